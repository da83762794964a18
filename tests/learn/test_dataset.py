"""Construction and refinement datasets built from real search records: splits without
leakage, determinism, exact completions, margins, failures kept out, clear errors."""

import itertools
import json
import random
import re
import shutil
from collections import Counter

import datasets
import pytest
import tvm_ffi
from hypothesis import given, settings
from hypothesis import strategies as st

from dragonlab.cli import main
from dragonlab.core import codec, families
from dragonlab.core.errors import InputError
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import Workload, iter_suite, suite
from dragonlab.evaluation.replay import target_postprocs
from dragonlab.learn import dataset
from dragonlab.learn.dataset import SPLITS
from dragonlab.learn.dataset_config import DatasetConfig
from dragonlab.learn.prompts import CONSTRUCTION, REFINEMENT, kernel_text
from dragonlab.search.records import OK, Record, RecordStore, trace_text

HOLDOUT = "reduce_row"


@pytest.fixture(scope="module")
def built(collected, stores, tmp_path_factory):
    """`dataset build` on both stores, with wide validation/test shares and a seed that puts the
    two workloads that are not held out into different splits."""
    keys = [(w.key, w.family) for w in collected[1]]  # matmul and softmax
    seed = next(s for s in range(100) if len({dataset.split_of(k, f, DatasetConfig(
        seed=s, validation=0.3, test=0.3)) for k, f in keys}) == 2)  # a seed that puts them on two sides
    out = tmp_path_factory.mktemp("ds") / "ds"
    assert main(["dataset", "build", "--records", *map(str, stores), "--out", str(out), "--top-k", "3",
                 "--holdout-family", HOLDOUT, "--validation", "0.3", "--test", "0.3", "--seed", str(seed)]) == 0
    return out, datasets.load_from_disk(str(out))


def rows(dsd) -> list[dict]:
    return [{**r, "split": split} for split, ds in dsd.items() for r in ds.to_list()]


def ok_traces(stores, cut=codec.design_part) -> dict[tuple[str, str], dict[str, Record]]:
    """(workload, target) -> canonical text of the trace's script (by default its design part) -> its ok record."""
    out = {}
    for s in stores:
        for r in RecordStore(s).records():
            if r.status == OK:
                out.setdefault((r.workload, r.target), {})[trace_text(cut(codec.to_plain(r.trace)))] = r
    return out


def test_compact_kernels_tell_workloads_apart_and_name_every_block():
    workloads = suite("quick") + list(itertools.islice(iter_suite("standard"), 30))
    texts = {w.key: kernel_text(w, "compact") for w in workloads}
    assert len(set(texts.values())) == len(texts)  # distinct computations, distinct texts
    for w in workloads:
        blocks = set(re.findall(r'T\.sblock\("([^"]+)"\)', kernel_text(w, "tvmscript"))) - {"root"}  # implicit
        assert blocks and all(f"block {b}(" in texts[w.key] for b in blocks), w.name


def test_compact_kernels_give_each_loop_in_scope_its_own_name():
    # attention's `out` block runs over two loops that te names `j`: one must not read as the other
    text = kernel_text(families.attention(b=1, heads=2, s=16, d=32), "compact")
    assert "block out(t 2, i 16, j 32, j_1 16 r):" in text
    assert "out[t, i, j] + T_softmax_norm[t, i, j_1] * V[t, j_1, j]" in text
    assert "block T_softmax_exp(i0 2, i1 16, i2 16):" in text  # a name out of scope is free again
    for header in re.findall(r"block \w+\((.*)\)", text):
        names = [part.split()[0] for part in header.split(", ")]
        assert len(names) == len(set(names)), header


def test_compact_kernels_are_less_than_half_the_tokens_of_tvmscript():
    quick = suite("quick")
    compact = sum(dataset.tokens(kernel_text(w, "compact")) for w in quick)
    tvmscript = sum(dataset.tokens(kernel_text(w, "tvmscript")) for w in quick)
    assert compact < 0.55 * tvmscript, (compact, tvmscript)


def test_build_writes_both_tasks_with_card_and_parquet(built):
    out, dsd = built
    r = rows(dsd)
    assert {x["task"] for x in r} == {CONSTRUCTION, REFINEMENT}
    assert all(list(ds.features) == list(dataset.COLUMNS) for ds in dsd.values())
    card = (out / "README.md").read_text()
    for split in SPLITS:
        assert re.search(rf"\| {split} \| \d+ \| \d+ \| \d+ \|", card), split
    assert "Held-out family (`test_family`): reduce_row" in card and re.search(r"Search budget: \d+ to \d+ measured", card)
    for split, ds in dsd.items():  # the Parquet copy holds the same rows
        assert datasets.Dataset.from_parquet(str(out / "data" / f"{split}.parquet")).to_list() == ds.to_list()
    info = json.loads((out / "build.json").read_text())
    assert sum(sum(c.values()) for c in info["counts"].values()) == len(r)


def test_every_completion_is_an_ok_records_design_part_and_round_trips_exactly(built, stores):
    _, dsd = built
    traces = ok_traces(stores)
    for x in rows(dsd):
        plain = codec.decode(x["completion"])
        record = traces[(x["workload"], x["target"])][trace_text(plain)]  # KeyError: not an ok record
        assert plain == codec.design_part(codec.to_plain(record.trace)) and codec.encode(plain) == x["completion"]
        assert "\npostproc" not in x["completion"]
        assert x["prompt"].startswith(f"task: {x['task']}\ntarget: {x['target']}\nkernel:\n")
        if x["task"] == REFINEMENT:
            assert trace_text(codec.decode(x["input_script"])) in traces[(x["workload"], x["target"])]
            assert x["prompt"].endswith(f"script:\n{x['input_script']}\nfaster script:\n")
    pairs = [(x["prompt"], x["completion"]) for x in rows(dsd)]
    assert len(pairs) == len(set(pairs))


def test_the_targets_post_processors_rebuild_every_recorded_kernel_from_its_design_part(collected, stores):
    """What `scripts="design"` leaves out is what the post-processors write: on every ok record,
    the design part post-processed gives the module of the whole trace."""
    target = get_target("cpu").config
    workloads = {w.key: w for w in collected[1]}
    workloads.update(RecordStore(stores[1]).workloads())
    records = [r for s in stores for r in RecordStore(s).records() if r.status == OK]
    assert len(records) >= 16
    for r in records:
        plain, mod = codec.to_plain(r.trace), workloads[r.workload].mod
        sch = codec.apply(codec.design_part(plain), mod)
        sch.enter_postproc()
        assert all(p.apply(sch) for p in target_postprocs(target))
        assert tvm_ffi.structural_equal(sch.mod, codec.apply(plain, mod).mod), codec.encode(plain)


def test_full_scripts_keep_the_whole_trace(collected, stores):
    workloads, records, _ = dataset.load_records(stores)
    full = dataset.build(workloads, records, DatasetConfig(scripts="full"))
    design = dataset.build(workloads, records, DatasetConfig())
    traces = ok_traces(stores, cut=lambda plain: plain)
    pairs = 0
    for split in SPLITS:
        assert len(full.examples[split]) == len(design.examples[split])
        for f, d in zip(full.examples[split], design.examples[split]):
            plain = codec.decode(f.completion)
            assert trace_text(plain) in traces[(f.workload, f.target)] and "\npostproc" in f.completion
            assert codec.encode(codec.design_part(plain)) == d.completion
            pairs += 1
    assert pairs
    with pytest.raises(ValueError, match="scripts must be one of design, full, got 'postproc'"):
        DatasetConfig(scripts="postproc")


def test_construction_completions_are_the_top_k_and_refinements_beat_the_margin(built, stores):
    _, dsd = built
    traces = ok_traces(stores)
    r = rows(dsd)
    for group, by_trace in traces.items():
        lats = sorted(rec.latency for rec in by_trace.values())
        mine = sorted(x["output_latency"] for x in r if x["task"] == CONSTRUCTION
                      and (x["workload"], x["target"]) == group)
        assert mine == pytest.approx(lats[:3])
    refinements = [x for x in r if x["task"] == REFINEMENT]
    assert refinements
    for x in refinements:
        assert x["output_latency"] <= x["input_latency"] * (1 - 0.10)
        assert x["speedup"] == pytest.approx(x["input_latency"] / x["output_latency"])


def test_no_workload_is_on_two_sides_and_the_held_out_family_is_alone(built):
    out, dsd = built
    sides = {split: {x["workload"] for x in ds.to_list()} for split, ds in dsd.items()}
    assert len(sides) == 3 and "test_family" in sides
    for a, b in itertools.combinations(sides, 2):
        assert not sides[a] & sides[b], (a, b)
    families = {split: {x["family"] for x in ds.to_list()} for split, ds in dsd.items()}
    assert families["test_family"] == {HOLDOUT}
    assert all(HOLDOUT not in f for split, f in families.items() if split != "test_family")
    stored = [Workload.from_json(json.loads(line)) for line in (out / "workloads.jsonl").read_text().splitlines()]
    assert {w.key for w in stored} == set().union(*sides.values())  # from_json checked each key is its hash


def test_same_seed_same_dataset_regardless_of_record_order(stores, tmp_path):
    workloads, records, _ = dataset.load_records(stores)
    config = DatasetConfig(validation=0.3, test=0.3)
    a, b = dataset.build(workloads, records, config), dataset.build(workloads, records[::-1], config)
    assert a.examples == b.examples and a.examples["train"]
    dataset.save(a, tmp_path / "a")
    dataset.save(b, tmp_path / "b")
    for name in ("README.md", "build.json", "workloads.jsonl", "data/train.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    moved = [seed for seed in range(1, 20) for key, split in a.split_of.items()
             if dataset.split_of(key, workloads[key].family, DatasetConfig(seed=seed, validation=0.3, test=0.3)) != split]
    assert moved  # another seed puts some workload in another split


def test_failed_timeout_and_unmeasured_records_never_become_data(collected, tmp_path, capsys):
    src = collected[0]
    copy = tmp_path / "store"
    shutil.copytree(src, copy)
    recs = [r for r in RecordStore(copy).records() if r.status == OK]
    best = min(recs, key=lambda r: r.latency)
    # a failing record of the fastest trace, in another store: the script must go altogether
    flaky = RecordStore(tmp_path / "flaky", create=True)
    flaky.add_workloads(RecordStore(src).workloads().values())
    flaky.append([Record(best.workload, best.target, best.trace, "build_error", None, "boom", source="test")])
    # new traces that only ever failed, timed out or went unmeasured
    injected = []
    for status, r in zip(("run_error", "failed", "timeout", "unmeasured"), recs):
        trace = json.loads(json.dumps(r.trace))
        trace[0].append(["EnterPostproc", [], [], []])  # a distinct trace that still encodes
        injected.append(Record(r.workload, r.target, trace, status, None, None if status == "unmeasured" else "x"))
    RecordStore(copy).append(injected)
    out = tmp_path / "ds"
    assert main(["dataset", "build", "--records", str(copy), str(tmp_path / "flaky"), "--out", str(out),
                 "--scripts", "full"]) == 0
    assert "also recorded as failing 1" in capsys.readouterr().out
    forbidden = {codec.encode(best.trace)} | {codec.encode(r.trace) for r in injected}
    for x in rows(datasets.load_from_disk(str(out))):
        assert x["completion"] not in forbidden and x["input_script"] not in forbidden
    # Design scripts: a failure of any trace with the same design part drops it too.
    assert main(["dataset", "build", "--records", str(src), str(tmp_path / "flaky"), "--out", str(tmp_path / "d")]) == 0
    assert "also recorded as failing 1" in capsys.readouterr().out
    flaky_design = codec.encode(codec.design_part(codec.to_plain(best.trace)))
    assert all(flaky_design not in (x["completion"], x["input_script"])
               for x in rows(datasets.load_from_disk(str(tmp_path / "d"))))


def test_samples_make_construction_examples_of_unmeasured_traces_only(collected, tmp_path):
    """`--examples samples`: the pre-training set. Every completion is the design part of one of
    the store's unmeasured samples, at most top_k per workload, with no latency; the measured
    records in the same store are left out, and no refinement is made."""
    from dragonlab.search.collect import collect_samples

    store = RecordStore(tmp_path / "samples", create=True)
    workloads = list(RecordStore(collected[0]).workloads().values())
    assert collect_samples(workloads, get_target("cpu"), store, 6, progress=False) > len(workloads)
    samples = {}
    for r in store.records():
        samples.setdefault(r.workload, set()).add(trace_text(codec.design_part(codec.to_plain(r.trace))))
    args = ["dataset", "build", "--records", str(collected[0]), str(store.root), "--examples", "samples",
            "--top-k", "3", "--validation", "0", "--test", "0"]  # measured records given too
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    r = rows(datasets.load_from_disk(str(tmp_path / "a")))
    assert {x["task"] for x in r} == {CONSTRUCTION} and {x["workload"] for x in r} == set(samples)
    for x in r:
        plain = codec.decode(x["completion"])
        assert trace_text(plain) in samples[x["workload"]] and codec.encode(plain) == x["completion"]
        assert x["output_latency"] is None
    per_workload = Counter(x["workload"] for x in r)
    assert all(n == min(3, len(samples[k])) for k, n in per_workload.items())
    assert "design-space samples" in (tmp_path / "a" / "README.md").read_text()
    assert main([*args, "--out", str(tmp_path / "b")]) == 0  # seeded: the same draw again
    assert rows(datasets.load_from_disk(str(tmp_path / "b"))) == r


@pytest.mark.parametrize("case, message", [
    ("missing", r"nowhere does not exist"),
    ("corrupt", r"records\.jsonl:3: not JSON"),
    ("margin", r"DatasetConfig\.margin must be a number in \(0, 1\), got -1\.0"),  # the config checks itself
    ("family", r"holdout family 'no_such_family': no workload of that family"),
    ("not empty", r"ds exists and is not empty"),
])
def test_bad_input_is_one_clear_error_exit_2_and_nothing_written(collected, tmp_path, capsys, case, message):
    store = tmp_path / "store"
    shutil.copytree(collected[0], store)
    args = ["--records", str(store)]
    if case == "missing":
        args = ["--records", str(tmp_path / "nowhere")]
    elif case == "corrupt":
        lines = (store / "records.jsonl").read_text().splitlines(keepends=True)
        (store / "records.jsonl").write_text("".join(lines[:2] + ['{"workload": "1", "trace\n'] + lines[2:]))
    elif case == "margin":
        args += ["--margin", "-1"]
    elif case == "family":
        args += ["--holdout-family", "no_such_family"]
    elif case == "not empty":
        (tmp_path / "ds").mkdir()
        (tmp_path / "ds" / "keep.txt").write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["dataset", "build", *args, "--out", str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dragonlab: error: ") and re.search(message, err[0]), err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no temporary directory
    if case == "not empty":
        assert [p.name for p in (tmp_path / "ds").iterdir()] == ["keep.txt"]


def test_stats_prints_counts_and_token_lengths_per_split_and_task(built, capsys):
    out, dsd = built
    assert main(["dataset", "stats", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["split", "task", "examples", "workloads"]
    table = {(f[0], f[1]): f for f in (line.split() for line in lines[1:])}
    for split, ds in dsd.items():
        for task in (CONSTRUCTION, REFINEMENT):
            mine = [x for x in ds.to_list() if x["task"] == task]
            f = table[(split, task)]
            assert int(f[2]) == len(mine)
            if mine:
                assert int(f[5]) == max(dataset.tokens(x["prompt"]) for x in mine)
                assert int(f[7]) == max(dataset.tokens(x["completion"]) for x in mine)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=60), st.integers(1, 40), st.integers(1, 6),
       st.floats(0.01, 0.9))
def test_refinement_pairs_keep_the_margin_and_the_cap_and_span_each_bins_improvements(lats, cap, strata, margin):
    lats = sorted(lats)
    config = DatasetConfig(pairs_per_workload=cap, strata=strata, margin=margin)
    pairs = dataset.refinement_pairs(lats, config, random.Random(0))
    valid = [(i, j) for i in range(len(lats)) for j in range(len(lats)) if lats[j] <= lats[i] * (1 - margin)]
    assert len(set(pairs)) == len(pairs) == min(cap, len(valid))
    assert all(lats[j] <= lats[i] * (1 - margin) for i, j in pairs)
    bins = {}  # input bin (latency quantile of the input) -> speedups of its valid pairs, ascending
    for i, j in valid:
        bins.setdefault(i * strata // len(lats), []).append(lats[i] / lats[j])
    if cap >= 2 * len(bins):  # every bin with two pairs gets two: one from each half of its range
        for b, speedups in bins.items():
            speedups.sort()
            chosen = [lats[i] / lats[j] for i, j in pairs if i * strata // len(lats) == b]
            if len(speedups) >= 2:
                assert min(chosen) <= speedups[len(speedups) // 2] <= max(chosen)


def test_cli_help_gives_the_config_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["dataset", "build", "--help"])
    options = {chunk.split()[0]: " ".join(chunk.split()) for chunk in re.split(r"\n  (?=--)", capsys.readouterr().out)}
    config = DatasetConfig()
    for name in ("top_k", "margin", "pairs_per_workload", "seed", "prompt_form", "scripts", "validation", "test"):
        assert options[f"--{name.replace('_', '-')}"].endswith(f"(default: {getattr(config, name)})"), name


def test_spread_workloads_covers_the_families_first_and_nests():
    keys = [(f"{family}{i}", family) for family in "abcd" for i in range(5 if family == "a" else 2)]
    ds = datasets.Dataset.from_list([{"workload": k, "family": f, "prompt": p} for k, f in keys for p in "xy"])
    picked = {n: dataset.spread_workloads(ds, n, seed=3) for n in (2, 4, 7, 11)}
    assert len(set(picked[4]["family"])) == 4 and len(set(picked[4]["workload"])) == 4  # one of each family
    assert len(picked[11]) == len(ds) and all(len(picked[n]) == 2 * n for n in picked)  # every example of each
    for small, large in ((2, 4), (4, 7), (7, 11)):
        assert set(picked[small]["workload"]) < set(picked[large]["workload"])
    assert set(dataset.spread_workloads(ds, 4, seed=4)["workload"]) != set(picked[4]["workload"])
    with pytest.raises(InputError, match="12 workloads asked for; the split has 11"):
        dataset.spread_workloads(ds, 12)


def test_load_or_build_builds_a_missing_dataset_once(collected, tmp_path, monkeypatch):
    out = tmp_path / "ds"
    dsd, workloads = dataset.load_or_build(out, [collected[0]])
    assert (out / "dataset_dict.json").is_file() and set(workloads) == {w.key for w in collected[1]}
    monkeypatch.setattr(dataset, "build_dataset", lambda *a, **k: pytest.fail("built again"))
    again, _ = dataset.load_or_build(out, [collected[0]])
    assert again["train"]["prompt"] == dsd["train"]["prompt"]
