"""Append-only JSON-lines files: a writer killed mid-line loses that line and nothing else,
the next append starts on a line of its own, and a corrupt line that is not the last is an
error naming file and line. Every append-only file of the project goes through dragonlab.core.jsonl."""

import json
import os
import random
import signal
import subprocess
import sys

import pytest

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import JsonFormatError, append_lines, read_json, read_lines
from dragonlab.evaluation.evaluate import Evaluation
from dragonlab.learn.attempts import Attempt, read_attempts
from dragonlab.learn.sft import read_log
from dragonlab.search.baselines import read_times
from dragonlab.search.records import OK, Record, RecordFormatError, RecordStore

# Appends pairs of 64 KiB lines, numbered from argv[2], under a file-size limit of argv[3]
# bytes: the kernel writes up to the limit, then kills the writer with SIGXFSZ. A kill that
# lands at a chosen byte, mid-line, with no timing to race.
WRITER = """
import resource, signal, sys
from dragonlab.core.jsonl import append_lines
path, i, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it; the kernel's default kills
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
pad = "x" * (1 << 16)
while True:
    append_lines(path, [{"i": i, "pad": pad}, {"i": i + 1, "pad": pad}])
    i += 2
"""


def test_writers_killed_mid_line_lose_only_that_line_and_the_next_append_cuts_it(tmp_path):
    path = tmp_path / "lines.jsonl"
    rng = random.Random(0)
    torn = 0
    for _ in range(8):
        have = [d["i"] for d in read_lines(path)] if path.exists() else []
        assert have == list(range(len(have)))  # every complete line kept, none corrupt
        size = path.stat().st_size if path.exists() else 0
        limit = size + rng.randrange(1 << 16, 1 << 19)  # somewhere in the next few lines
        writer = subprocess.run([sys.executable, "-c", WRITER, str(path), str(len(have)),
                                 str(limit)], capture_output=True, timeout=120)
        assert writer.returncode == -signal.SIGXFSZ, writer.stderr.decode()[-2000:]
        assert path.stat().st_size == limit  # killed in the write that crossed the limit
        torn += not path.read_bytes().endswith(b"\n")
    assert torn >= 6  # a random byte is almost never a line's end
    have = [d["i"] for d in read_lines(path)]
    assert len(have) >= 8
    append_lines(path, [{"i": "after"}])
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and [json.loads(x)["i"] for x in lines[:-1]] == [*have, "after"]
    assert have == list(range(len(have)))


def test_a_torn_last_line_is_ignored_on_read_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "a.jsonl"
    append_lines(path, [{"n": 1}, {"n": 2}])
    with open(path, "ab") as f:
        f.write(b'{"n": 3, "pad": "xx')
    assert list(read_lines(path)) == [{"n": 1}, {"n": 2}]
    append_lines(path, [{"n": 4}])
    assert path.read_text() == '{"n":1}\n{"n":2}\n{"n":4}\n'


def test_a_file_that_is_only_a_torn_line_reads_empty_and_appends_from_the_start(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"n": 1' * 30000)  # longer than one backwards read
    assert list(read_lines(path)) == []
    append_lines(path, [{"n": 2}])
    assert path.read_text() == '{"n":2}\n'


def test_appending_nothing_leaves_the_file_alone(tmp_path):
    path = tmp_path / "a.jsonl"
    append_lines(path, [])
    assert not path.exists()
    path.write_bytes(b'{"n": 1}\n{"torn')
    append_lines(path, [])
    assert path.read_bytes() == b'{"n": 1}\n{"torn'


@pytest.mark.parametrize("line, message", [
    (b"{not json", r"a\.jsonl:2: not JSON \(Expecting property name enclosed in double quotes at column 2\)"),
    (b"[" * 100000 + b"]" * 100000, r"a\.jsonl:2: not JSON \(nested too deeply\)"),
    (b'"\xff"', r"a\.jsonl:2: not JSON \(not UTF-8 at byte 1\)"),
])
def test_a_corrupt_line_before_the_last_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"n": 1}\n' + line + b'\n{"n": 3}\n')
    with pytest.raises(JsonFormatError, match=message):
        list(read_lines(path))


def test_a_line_the_parser_rejects_names_file_line_and_reason(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"workload": "1", "seconds": 2.0}\n{"seconds": 3.0}\n')
    with pytest.raises(JsonFormatError, match=r"a\.jsonl:2: KeyError: 'workload'"):
        read_times(path)
    with pytest.raises(RecordFormatError, match=r"a\.jsonl:1: field 'workload' must be a number"):
        list(read_lines(path, _seconds_by_number, error=RecordFormatError))


def _seconds_by_number(d: dict) -> float:
    if not isinstance(d["workload"], float):
        raise ValueError("field 'workload' must be a number")
    return d["seconds"]


def test_a_whole_json_file_that_is_not_json_is_named(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{\n "config": {\n')
    with pytest.raises(JsonFormatError, match=r"run\.json: not JSON \(Expecting property name .* at line 3"):
        read_json(path)


def _attempt(i: int) -> Attempt:
    return Attempt("test", i, 0, "construction", "1", "w", "", Evaluation("1", "cpu", "decode", "empty"))


def test_every_append_only_file_reads_past_a_torn_tail_and_appends_cleanly(tmp_path):
    """Records, attempts, training logs and search times: each reader skips the torn line
    a kill left, and the next append of its writer lands on a line of its own."""
    trace = [[["GetSBlock", [], ["C", "main"], ["b0"]]], []]
    store = RecordStore(tmp_path / "store", create=True)
    store.append([Record("1", "cpu", trace, OK, (1e-3,))])
    store.mark_done("1", "cpu", 8)
    files = {
        "attempts": (tmp_path / "attempts.jsonl", [_attempt(0).to_json()], _attempt(1).to_json(), read_attempts),
        "log": (tmp_path / "log.jsonl", [{"step": 1, "loss": 2.0}], {"step": 2, "loss": 1.0}, read_log),
        "seconds": (tmp_path / "seconds.jsonl", [{"workload": "1", "seconds": 2.0}], {"workload": "2", "seconds": 1.0},
                    read_times),
    }
    for path, first, _, _ in files.values():
        append_lines(path, first)
    for path in [*store.root.glob("*.jsonl"), *(f[0] for f in files.values())]:
        with open(path, "ab") as f:
            f.write(b'{"workload": "1", "tar')
    assert len(store.records()) == 1 and store.done() == {("1", "cpu"): 8}
    assert read_attempts(files["attempts"][0]) == [_attempt(0)]
    assert read_log(files["log"][0]) == [{"step": 1, "loss": 2.0}]
    assert read_times(files["seconds"][0]) == {"1": 2.0}

    store.append([Record("1", "cpu", [[], []], OK, (2e-3,))])
    store.mark_done("1", "cpu", 16)
    for path, _, more, _ in files.values():
        append_lines(path, [more])
    assert len(store.records()) == 2 and store.done() == {("1", "cpu"): 16}
    assert read_attempts(files["attempts"][0]) == [_attempt(0), _attempt(1)]
    assert [d["step"] for d in read_log(files["log"][0])] == [1, 2]
    assert read_times(files["seconds"][0]) == {"1": 2.0, "2": 1.0}
    for path in [*store.root.glob("*.jsonl"), *(f[0] for f in files.values())]:
        assert all(json.loads(line) for line in path.read_text().splitlines()), path


def test_write_atomic_replaces_the_whole_file(tmp_path):
    from dragonlab.core.jsonl import write_atomic

    path = tmp_path / "report.json"
    write_atomic(path, '{"a": 1}\n')
    write_atomic(path, '{"a": 2}\n')
    assert read_json(path) == {"a": 2} and os.listdir(tmp_path) == ["report.json"]


def test_sealing_keeps_every_complete_line_in_the_same_bytes_and_never_replaces(tmp_path):
    from dragonlab.core.jsonl import seal

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for path in (a, b):
        append_lines(path, [{"n": i, "pad": "x" * 50} for i in range(3000)])
        with open(path, "ab") as f:
            f.write(b'{"n": "torn')
    sealed = seal(a)
    assert sealed == tmp_path / "a.jsonl.gz" and not a.exists()
    assert [d["n"] for d in read_lines(sealed)] == list(range(3000))
    assert sealed.stat().st_size < 20_000  # compressed
    assert seal(b).read_bytes() == sealed.read_bytes()  # no timestamp: the same lines, the same file
    append_lines(a, [{"n": "more"}])
    with pytest.raises(InputError, match="a.jsonl.gz already exists"):
        seal(a)
    assert a.exists() and [d["n"] for d in read_lines(sealed)] == list(range(3000))


@pytest.mark.parametrize("content", [b"not gzip at all\n", None])
def test_a_damaged_sealed_file_is_an_error_naming_it(tmp_path, content):
    from dragonlab.core.jsonl import seal

    path = tmp_path / "a.jsonl"
    append_lines(path, [{"n": i} for i in range(1000)])
    sealed = seal(path)
    sealed.write_bytes(content if content is not None else sealed.read_bytes()[:-20])  # or cut short
    with pytest.raises(JsonFormatError, match=f"{sealed}: not a readable gzip file"):
        list(read_lines(sealed))
