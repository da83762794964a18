"""Collection on real MetaSchedule search: every candidate kept, resume after kill -9,
timeouts kept apart from failures, the RPC runner on loopback, and the CLI's errors."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace

import pytest
from dragonlab.testing.cluster import free_port

from dragonlab.cli import main
from dragonlab.core.errors import InputError
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family, suite
from dragonlab.search.collect import collect, shard
from dragonlab.search.config import CollectConfig, MeasureConfig
from dragonlab.search.measure import RunnerUnavailableError, check_tracker
from dragonlab.search.records import OK, TIMEOUT, RecordStore

QUICK = first_of_each_family("quick")
CLI = [sys.executable, "-m", "dragonlab.cli"]


def test_collect_keeps_every_measured_candidate(collected):
    root, workloads, summary = collected
    store = RecordStore(root)
    assert summary.failed_workloads == [] and summary.measured == 16
    for w in workloads:
        recs = store.records(workload=w.key)
        assert len(recs) == 8, w.name
        assert sorted(r.trial for r in recs) == list(range(8))
        assert {r.round for r in recs} == {0, 1}
        for r in recs:
            assert r.status == OK and len(r.latencies) == 3 and all(0 < s < 1 for s in r.latencies)
            kinds = [inst[0] for inst in r.trace[0]]
            assert "EnterPostproc" in kinds  # the full trace, post-processing included
    assert store.done() == {(w.key, "cpu"): 8 for w in workloads}
    assert set(store.workloads()) == {w.key for w in workloads}


def test_finished_workloads_are_skipped_on_rerun(collected):
    root, workloads, _ = collected
    before = (root / "records.jsonl").read_bytes()
    summary = collect(workloads, get_target("cpu"), RecordStore(root),
                      CollectConfig(trials=8, trials_per_round=4), progress=False)
    assert summary.skipped == 2 and summary.measured == 0
    assert (root / "records.jsonl").read_bytes() == before


QUIET = {**os.environ, "TQDM_DISABLE": "1"}  # no progress bars in a child's output


def small_collection(out) -> list[str]:
    """The command line of a small collection: two quick workloads, 8 trials each, 4 per round
    (a small population, as the demo's: MetaSchedule's 512 costs each round seconds)."""
    names = f"{QUICK['matmul'].name},{QUICK['reduce_row'].name}"
    return CLI + ["collect", "--suite", "quick", "--only", names, "--trials", "8", "--per-round", "4",
                  "--population", "64", "--out", str(out)]


def start_until_records(cmd, out, *, lines: int = 4, **popen) -> subprocess.Popen:
    """Start `cmd` in a session of its own; return once out/records.jsonl holds `lines` lines."""
    proc = subprocess.Popen(cmd, env=QUIET, start_new_session=True, **popen)
    records = out / "records.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and records.read_bytes().count(b"\n") >= lines:
            break
        time.sleep(0.2)
    assert proc.poll() is None, "collection ended before it was stopped"
    return proc


def test_collect_resumes_after_kill_without_loss_or_duplicates(tmp_path):
    names = f"{QUICK['matmul'].name},{QUICK['reduce_row'].name}"
    cmd = small_collection(tmp_path)
    proc = start_until_records(cmd, tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = tmp_path / "records.jsonl"
    os.killpg(proc.pid, signal.SIGKILL)  # the collector and its build workers, mid-run
    proc.wait()
    before = records.read_bytes()
    kept = before[: before.rfind(b"\n") + 1]
    assert kept.count(b"\n") >= 4

    done = subprocess.run(cmd, env=QUIET, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    after = records.read_bytes()
    assert after.startswith(kept), "records written before the kill were lost or rewritten"
    lines = [json.loads(x) for x in after.splitlines()]
    identities = [(x["workload"], x["target"], json.dumps(x["trace"])) for x in lines]
    assert len(identities) == len(set(identities)), "duplicate records after resume"
    store = RecordStore(tmp_path)
    for name in names.split(","):
        key = next(w.key for w in suite("quick") if w.name == name)
        recs = store.records(workload=key)
        assert len(recs) == 8 and all(r.status == OK for r in recs)
        assert sorted(r.trial for r in recs) == list(range(8))
    [run] = store.runs()  # the killed run logged nothing; the resumed one says what it did
    assert run["measured"] == 16 - kept.count(b"\n") and run["wall_s"] > 0 and run["trials"] == {"8": 2}
    assert run["machine"]["cores"] >= 1 and run["machine"]["tvm"].startswith("0.27")


def test_ctrl_c_stops_collection_and_logs_the_run(tmp_path):
    # a KeyboardInterrupt inside MetaSchedule's Python callbacks crosses TVM's FFI as a RuntimeError
    # (taken for a broken workload: collection went on) or ends in std::terminate
    proc = start_until_records(small_collection(tmp_path), tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the collector and its workers
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "dragonlab: interrupted" in err and "workload failed" not in err
    store = RecordStore(tmp_path)
    assert 4 <= len(store.records()) < 16 and store.done() == {}
    assert all(r.status == OK for r in store.records())  # the batch its dying workers spoiled is dropped
    [run] = store.runs()
    assert run["measured"] == len(store.records())


def test_timeouts_are_retried_and_never_stored_as_failures(tmp_path):
    config = CollectConfig(trials=2, trials_per_round=2, population=64,
                           measure=MeasureConfig(build_timeout_sec=0.01, retries=1))
    summary = collect([QUICK["elementwise_fusion"]], get_target("cpu"), RecordStore(tmp_path, create=True),
                      config, progress=False)
    recs = RecordStore(tmp_path).records()
    assert recs and all(r.status == TIMEOUT and r.latencies is None for r in recs)
    assert summary.timeouts == len(recs)


def test_shards_split_workloads_deterministically_and_disjointly():
    workloads = suite("quick")
    parts = [shard(workloads, f"{i}/3") for i in range(3)]
    keys = [w.key for part in parts for w in part]
    assert sorted(keys) == sorted(w.key for w in workloads) and len(keys) == len(set(keys))
    assert [w.key for w in shard(workloads, "1/3")] == [w.key for w in parts[1]]
    with pytest.raises(ValueError, match="I/N"):
        shard(workloads, "3/3")


def test_collect_through_the_rpc_tracker_on_loopback(rpc_tracker, tmp_path):
    config = CollectConfig(trials=4, trials_per_round=4, population=64, runner="rpc",
                           tracker=f"127.0.0.1:{rpc_tracker}", key="loopcpu")
    summary = collect([QUICK["softmax"]], get_target("cpu"), RecordStore(tmp_path, create=True), config,
                      progress=False)
    recs = RecordStore(tmp_path).records()
    assert summary.failed_workloads == []
    assert len(recs) == 4 and all(r.status == OK and len(r.latencies) == 3 for r in recs)


def test_two_shards_on_two_machines_through_one_tracker_merge_into_what_one_machine_collects(tmp_path):
    """Two `collect --shard i/2` processes (two machines, say) measure through one tracker with two
    servers; `records merge` of their stores holds what one machine collects of both: each
    workload, its 4 measured candidates and its done mark, once."""
    from dragonlab.testing.cluster import rpc_cluster

    names = [QUICK["matmul"].name, QUICK["batch_matmul"].name]  # keys 1 and 0 mod 2: one per shard
    common = ["collect", "--suite", "quick", "--only", ",".join(names), "--trials", "4", "--per-round", "4",
              "--population", "64", "--min-repeat-ms", "0"]  # a search of one round, timings not compared
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    with rpc_cluster(servers=2) as port:
        shards = [subprocess.Popen(CLI + common + ["--shard", f"{i}/2", "--out", str(tmp_path / f"machine{i}"),
                                                   "--runner", "rpc", "--tracker", f"127.0.0.1:{port}",
                                                   "--key", "loopcpu"], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True) for i in range(2)]
        outputs = [p.communicate(timeout=600)[0] for p in shards]
    assert [p.returncode for p in shards] == [0, 0], outputs
    assert main(["records", "merge", str(tmp_path / "machine0"), str(tmp_path / "machine1"),
                 "--out", str(tmp_path / "merged")]) == 0

    def counts(root):
        store = RecordStore(root)
        return set(store.workloads()), Counter((r.workload, r.status) for r in store.records()), store.done()

    parts = [counts(tmp_path / f"machine{i}") for i in range(2)]
    assert all(len(p[0]) == 1 for p in parts) and parts[0][0] != parts[1][0]  # each machine tuned its share
    keys = {QUICK["matmul"].key, QUICK["batch_matmul"].key}
    cpu = get_target("cpu").name
    assert counts(tmp_path / "merged") == (keys, Counter({(k, OK): 4 for k in keys}), {(k, cpu): 4 for k in keys})


def test_rpc_key_without_server_fails_fast(rpc_tracker):
    start = time.monotonic()
    with pytest.raises(RunnerUnavailableError, match="no server for key 'nosuchkey'"):
        check_tracker("127.0.0.1", rpc_tracker, "nosuchkey")
    with pytest.raises(RunnerUnavailableError, match="no RPC tracker"):
        check_tracker("127.0.0.1", free_port(), "loopcpu", timeout_sec=2)
    assert time.monotonic() - start < 10


def test_benchmark_search_continues_each_judged_workload_to_its_budget(collected, tmp_path, capsys):
    from dragonlab.search.benchmark import Benchmark, save

    root, (matmul, softmax), _ = collected
    store = tmp_path / "store"
    shutil.copytree(root, store)
    bench = Benchmark("tiny", "a test", ("softmax",), {"test": (matmul.key,), "test_family": (softmax.key,),
                      "validation": ()}, {matmul.key: matmul.name, softmax.key: softmax.name},
                      {10: (matmul.key,), 9: (softmax.key,)})
    save(bench, store / "benchmark.json")  # shipped beside the records, as the card expects
    args = ["collect", "--suite", "quick", "--out", str(store), "--benchmark-search", str(store / "benchmark.json"),
            "--per-round", "2", "--population", "64"]
    assert main(args) == 0
    s = RecordStore(store)
    assert len(s.records(workload=matmul.key)) == 10 and len(s.records(workload=softmax.key)) == 9
    assert {r.workload for r in RecordStore(store, shard="search").records()} == {matmul.key, softmax.key}
    assert (store / "records.search.jsonl").exists() and s.done()[(matmul.key, "cpu")] == 10
    assert [r["trials"] for r in s.runs()] == [{"10": 1, "9": 1}]
    assert main(["records", "card", str(store)]) == 0
    text = (store / "README.md").read_text()
    assert f"2 workloads, {len(s.records())} records" in text and "core-hours" in text
    assert "1 workloads to 10 trials (1 reached); 1 workloads to 9 trials (1 reached)" in text
    assert f"Checked so far: 0 of {len([r for r in s.records() if r.status == 'ok'])} measured `ok` records" in text
    assert "## Dataset" in text and "the benchmark's splits" in text  # what dataset build makes of it
    assert "| test | 1 | 4 | 16 |" in text and "| test_family | 1 | 4 | 16 |" in text and "| train | 0 | 0 | 0 |" in text
    # A search that ran out of distinct candidates is done below its budget: the card names it.
    save(replace(bench, search={10: (matmul.key,), 12: (softmax.key,)}), store / "benchmark.json")
    s.mark_done(softmax.key, "cpu", 12)  # what collect writes when the design space is exhausted
    assert main(["records", "card", str(store)]) == 0
    assert (f"1 workloads to 12 trials (1 reached; 1 of them ended at their design space's size: `{softmax.name}` 9)"
            in (store / "README.md").read_text())
    save(bench, store / "benchmark.json")
    capsys.readouterr()
    assert main([*args[:-2], "--trials", "4"]) == 2
    assert "leave out --trials" in capsys.readouterr().err
    bench.splits["test"] = ("123",)
    bench.search[10] = ("123",)
    bench.names["123"] = "elsewhere"
    save(bench, store / "benchmark.json")
    assert main(args) == 2
    assert "names workload 123 (elsewhere), which is not in suite 'quick'" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--trials", "0"], "CollectConfig.trials must be a positive integer, got 0"),
    (["--population", "0"], "CollectConfig.population must be a positive integer, got 0"),
    (["--seed", "-1"], "CollectConfig.seed must be a non-negative integer, got -1"),
    (["--runner", "rpc", "--key", "k"], "CollectConfig.tracker: missing (runner 'rpc' needs tracker HOST:PORT and key)"),
    (["--runner", "rpc", "--tracker", "nohost", "--key", "k"], "CollectConfig.tracker must be HOST:PORT, got 'nohost'"),
    (["--shard", "2/2"], "--shard must be I/N"),
    (["--target", "tpu"], "unknown target 'tpu'"),
    (["--only", "nosuch"], "'nosuch' is not a workload of suite 'quick'"),
    (["--suite", "huge"], "unknown suite 'huge'"),
])
def test_collect_rejects_bad_parameters_with_one_clear_error(tmp_path, capsys, args, message):
    out = tmp_path / "store"
    assert main(["collect", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dragonlab: error:") and message in err[0]
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("values, message", [
    ({"trials_per_round": 0}, "CollectConfig.trials_per_round must be a positive integer, got 0"),
    ({"population": -1}, "CollectConfig.population must be a positive integer, got -1"),
    ({"trials": 2.5}, "CollectConfig.trials must be a positive integer, got 2.5"),
    ({"runner": "ssh"}, "CollectConfig.runner must be one of local, rpc, got 'ssh'"),
    ({"runner": "rpc", "tracker": "127.0.0.1:9190"}, "CollectConfig.key: missing"),
])
def test_collect_config_refuses_bad_values_naming_the_field(values, message):
    with pytest.raises(InputError, match=re.escape(message)):
        CollectConfig(**values)


def test_stats_on_a_corrupt_store_names_file_and_line(collected, tmp_path, capsys):
    root, _, _ = collected
    bad = tmp_path / "bad"
    bad.mkdir()
    lines = (root / "records.jsonl").read_text().splitlines()
    (bad / "records.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    before = (bad / "records.jsonl").read_bytes()
    assert main(["records", "stats", str(bad)]) == 2
    assert "records.jsonl:2: not JSON" in capsys.readouterr().err
    assert (bad / "records.jsonl").read_bytes() == before


def test_samples_are_unmeasured_distinct_traces_that_resume_and_round_trip(tmp_path, capsys):
    """`collect --samples N`: postprocessed design-space samples, never built or run, stored once
    per distinct trace; a rerun samples nothing again; every one is exact through its script."""
    from dragonlab.core import codec
    from dragonlab.search.records import UNMEASURED

    out = tmp_path / "samples"
    args = ["collect", "--suite", "quick", "--only", "matmul_m64_n64_k64_float32,transpose_fusion_b4_m32_n64_ops-add_float32",
            "--samples", "3", "--out", str(out)]
    assert main(args) == 0
    records = RecordStore(out).records()
    assert {r.status for r in records} == {UNMEASURED} and {r.source for r in records} == {"sample"}
    assert all(r.latencies is None for r in records) and (out / "records.samples.jsonl").exists()
    by_workload = Counter(r.workload for r in records)
    assert sorted(by_workload.values()) == [1, 3]  # a transpose's design space has one candidate
    assert all(codec.decode(codec.encode(r.trace), verbatim=True) == codec.to_plain(r.trace) for r in records)
    assert main(args) == 0 and "sampled 0 unmeasured traces for 2 workloads" in capsys.readouterr().out
    assert len(RecordStore(out).records()) == len(records)
    assert main([*args[:-4], "--samples", "0", "--out", str(tmp_path / "none")]) == 2
    assert "--samples must be positive, got 0" in capsys.readouterr().err
