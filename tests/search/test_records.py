"""The record store: append-only lines, torn-line recovery, de-duplication, clear errors.

These tests exercise the file format with hand-made records; real measured records are
tested in test_collect.py.
"""

import json

import pytest

from dragonlab.search.records import (OK, RUN_ERROR, TIMEOUT, WRONG, Record, RecordFormatError, RecordStore,
                                      check_of, classify_error, merge, stats)

TRACE_A = [[["GetSBlock", [], ["C", "main"], ["b0"]]], []]
TRACE_B = [[["GetSBlock", [], ["D", "main"], ["b0"]]], []]
TRACE_C = [[["GetSBlock", [], ["E", "main"], ["b0"]]], []]


def _ok(trace, secs=(1e-3, 1.1e-3, 0.9e-3), workload="123"):
    return Record(workload, "cpu", trace, OK, tuple(secs), round=0, trial=0)


def test_records_round_trip_through_the_store(tmp_path):
    store = RecordStore(tmp_path, create=True)
    store.append([_ok(TRACE_A), Record("123", "cpu", TRACE_B, RUN_ERROR, None, "boom")])
    back = store.records()
    assert back == [_ok(TRACE_A), Record("123", "cpu", TRACE_B, RUN_ERROR, None, "boom")]
    assert back[0].latency == pytest.approx(1e-3)


def test_duplicates_are_dropped_on_read(tmp_path):
    store = RecordStore(tmp_path, create=True)
    store.append([_ok(TRACE_A)])
    store.append([_ok(TRACE_A, secs=(2e-3,))])  # same trace measured again: same data point
    assert len(store.records()) == 1
    assert store.records()[0].latencies[0] == pytest.approx(1e-3)  # first one wins


def test_torn_last_line_is_ignored_then_cut_before_the_next_append(tmp_path):
    store = RecordStore(tmp_path, create=True)
    store.append([_ok(TRACE_A)])
    path = tmp_path / "records.jsonl"
    with open(path, "a") as f:
        f.write('{"workload": "123", "tar')  # a writer killed mid-line
    assert len(store.records()) == 1
    store.append([_ok(TRACE_B)])
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x) for x in lines)
    assert [r.trace for r in store.records()] == [TRACE_A, TRACE_B]


def test_malformed_line_error_names_file_and_line(tmp_path):
    store = RecordStore(tmp_path, create=True)
    store.append([_ok(TRACE_A)])
    with open(tmp_path / "records.jsonl", "a") as f:
        f.write('{"workload": "1", "target": "cpu", "trace": [[], []], "status": "great"}\n')
    with pytest.raises(RecordFormatError, match=r"records.jsonl:2: .*status 'great'"):
        store.records()


def test_missing_field_is_named(tmp_path):
    (tmp_path / "records.jsonl").write_text('{"workload": "1", "target": "cpu", "status": "ok"}\n')
    with pytest.raises(RecordFormatError, match="records.jsonl:1: record is missing field 'trace'"):
        RecordStore(tmp_path).records()


def test_a_failure_cannot_carry_a_latency():
    with pytest.raises(RecordFormatError):
        Record("1", "cpu", TRACE_A, RUN_ERROR, (1e-3,))
    with pytest.raises(RecordFormatError):
        Record("1", "cpu", TRACE_A, OK, None)


def test_timeouts_are_told_apart_from_failures():
    assert classify_error("Builder: Timeout, killed after 30 seconds") == TIMEOUT
    assert classify_error("LocalRunner: Timeout, killed after 30 seconds\n") == TIMEOUT
    assert classify_error("Builder: InternalError: Check failed") == "build_error"
    assert classify_error("LocalRunner: An exception occurred\nSegfault") == RUN_ERROR


def test_shards_merge_without_duplicates(tmp_path):
    a = RecordStore(tmp_path / "a", shard="0-of-2", create=True)
    b = RecordStore(tmp_path / "b", shard="1-of-2", create=True)
    a.append([_ok(TRACE_A)])
    b.append([_ok(TRACE_A), _ok(TRACE_B)])
    b.mark_done("123", "cpu", 16)
    out = RecordStore(tmp_path / "out", create=True)
    assert merge([a, b], out) == 2
    assert merge([a, b], out) == 0  # merging again adds nothing
    assert len(out.records()) == 2 and out.done() == {("123", "cpu"): 16}


def test_a_verdict_of_the_check_is_applied_on_read_and_sealed_with_the_store(tmp_path):
    store = RecordStore(tmp_path, create=True)
    a, b, c = _ok(TRACE_A), _ok(TRACE_B), _ok(TRACE_C)
    store.append([a, b, c])
    store.add_checks([check_of(a, "check", "argument 3 differs from the unscheduled kernel", 1800.0),
                      check_of(b, "ok", None, 0.01)])
    assert check_of(c, "run", "worker timed out during run: timed out after 60 s", None) is None  # no verdict
    assert check_of(c, "check", "NaN in argument 1", float("nan")).max_error is None  # JSON has no NaN
    back = {r.trace[0][0][2][0]: r for r in store.records()}
    assert back["C"].status == WRONG and back["C"].latencies is None and "differs" in back["C"].error
    assert back["D"] == b and back["E"] == c  # correct, and not checked yet: as measured
    assert store.records(checked=False) == [a, b, c]
    assert stats({}, store.records()).totals == {OK: 2, WRONG: 1}
    store.seal()
    assert (tmp_path / "checks.jsonl.gz").exists() and not (tmp_path / "checks.jsonl").exists()
    assert [r.status for r in store.records()] == [WRONG, OK, OK]
    with open(tmp_path / "checks.jsonl", "w") as f:
        f.write('{"record": "x", "status": "fine", "stage": "ok"}\n')
    with pytest.raises(RecordFormatError, match=r"checks.jsonl:1: check field 'status' is missing or invalid: 'fine'"):
        store.records()


def test_a_sealed_shard_reads_as_it_is_while_another_shard_goes_on(tmp_path, capsys):
    from dragonlab.cli import main
    from dragonlab.core.workloads import matmul

    w = matmul(m=8, n=8, k=8)
    done = RecordStore(tmp_path, shard="0-of-2", create=True)
    live = RecordStore(tmp_path, shard="1-of-2")
    done.add_workloads([w])
    done.append([_ok(TRACE_A, workload=w.key)])
    done.mark_done(w.key, "cpu", 1)
    live.append([_ok(TRACE_B, workload=w.key)])
    before = (done.workloads(), done.records(), done.done())
    assert main(["records", "seal", str(tmp_path), "--shard", "0/2"]) == 0
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["progress.0-of-2.jsonl.gz", "records.0-of-2.jsonl.gz", "records.1-of-2.jsonl",
                     "workloads.jsonl.gz"]
    assert (done.workloads(), done.records(), done.done()) == before  # every reader reads it as it is
    live.add_workloads([w])  # known from the sealed file: nothing appended, nothing unsealed
    live.append([_ok(TRACE_A, workload=w.key)])  # a duplicate of a sealed record: dropped on read
    assert not (tmp_path / "workloads.jsonl").exists() and len(live.records()) == 2
    capsys.readouterr()
    assert main(["records", "stats", str(tmp_path)]) == 0
    assert "total: 2 records" in capsys.readouterr().out
    assert main(["records", "seal", str(tmp_path), "--shard", "0/2"]) == 0
    assert "nothing to seal" in capsys.readouterr().out
    # a rerun of the sealed shard (make standard-corpus again) logs a line under a sealed name: sealed as a part
    sealed = (tmp_path / "progress.0-of-2.jsonl.gz").read_bytes()
    done.mark_done(w.key, "cpu", 1)
    assert main(["records", "seal", str(tmp_path), "--shard", "0/2"]) == 0
    assert (tmp_path / "progress.0-of-2.part1.jsonl.gz").exists() and not (tmp_path / "progress.0-of-2.jsonl").exists()
    assert (tmp_path / "progress.0-of-2.jsonl.gz").read_bytes() == sealed and done.done() == before[2]
    assert main(["records", "seal", str(tmp_path), "--shard", "2/2"]) == 2
    assert "--shard must be I/N" in capsys.readouterr().err

    # an unfinished shard: what it has so far is sealed as a part, and its collection goes on after it
    assert main(["records", "seal", str(tmp_path), "--shard", "1/2", "--part"]) == 0
    live.append([_ok(TRACE_C, workload=w.key)])
    assert main(["records", "seal", str(tmp_path), "--shard", "1/2", "--part"]) == 0
    assert sorted(p.name for p in tmp_path.glob("records.1-of-2*")) == [
        "records.1-of-2.part1.jsonl.gz", "records.1-of-2.part2.jsonl.gz"]
    assert len(live.records()) == 3 and (tmp_path / "workloads.jsonl.gz").exists()


def test_stats_count_statuses_and_latency_spread(tmp_path):
    recs = [_ok(TRACE_A, secs=(2e-3,)), _ok(TRACE_B, secs=(1e-3,)),
            Record("123", "cpu", [[], []], TIMEOUT, None, "Timeout")]
    s = stats({}, recs)
    (row,) = s.rows
    assert (row["ok"], row["timeout"], row["records"]) == (2, 1, 3)
    assert row["best_ms"] == pytest.approx(1.0) and row["worst_ms"] == pytest.approx(2.0)


@pytest.mark.parametrize("field, value, message", [
    ("workload", 123, "field 'workload' must be a string, got an integer"),
    ("target", None, "field 'target' must be a string, got null"),
    ("trace", {"a": 1}, "field 'trace' must be an array, got an object"),
    ("trace", [[], 1], r"field 'trace' must be \[instructions, decisions\]"),
    ("status", ["ok"], "field 'status' must be a string, got an array"),
    ("latencies", "1e-3", "field 'latencies' must be an array or null, got a string"),
    ("error", 5, "field 'error' must be a string or null, got an integer"),
    ("round", True, "field 'round' must be an integer or null, got a boolean"),
    ("trial", 1.5, "field 'trial' must be an integer or null, got a number"),
    ("source", None, "field 'source' must be a string, got null"),
])
def test_every_field_of_a_stored_record_is_type_checked(tmp_path, field, value, message):
    d = _ok(TRACE_A).to_json() | {field: value}
    (tmp_path / "records.jsonl").write_text(json.dumps(d) + "\n")
    with pytest.raises(RecordFormatError, match=f"records.jsonl:1: {message}"):
        RecordStore(tmp_path).records()
