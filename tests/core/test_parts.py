"""Parts: a job's append-only files saved as parts that never change, and put back together."""

import gzip

import pytest

from dragonlab.cli import main
from dragonlab.core.errors import InputError
from dragonlab.core.parts import restore, save


def _run(root, x=b'{"a":1}\n{"a":2}\n', y=b'{"b":1}\n'):
    (root / "search").mkdir(parents=True, exist_ok=True)
    (root / "attempts.jsonl").write_bytes(x)
    (root / "search" / "records.jsonl").write_bytes(y)
    (root / "report.json").write_text("{}")  # rewritten whole by its job: not carried
    (root / "run.json").write_text('{\n "config": {"k": 8}\n}\n')  # the settings a resume is checked against
    return root


def test_saves_only_new_complete_lines_as_numbered_parts_and_restores_them(tmp_path):
    run = _run(tmp_path / "run", x=b'{"a":1}\n{"a":')  # a torn last line: the job was killed mid-write
    parts = tmp_path / "parts"
    assert save(run, parts) == [parts / "attempts.part1.jsonl.gz", parts / "run.part1.json.gz",
                                parts / "search" / "records.part1.jsonl.gz"]
    with open(run / "attempts.jsonl", "ab") as f:
        f.write(b'2}\n{"a":3}\n')
    assert save(run, parts) == [parts / "attempts.part2.jsonl.gz"]
    assert save(run, parts) == []  # nothing new
    assert gzip.decompress((parts / "attempts.part1.jsonl.gz").read_bytes()) == b'{"a":1}\n'
    assert sorted(p.name for p in parts.rglob("*")) == ["attempts.part1.jsonl.gz", "attempts.part2.jsonl.gz",
                                                        "records.part1.jsonl.gz", "run.part1.json.gz", "search"]
    new = tmp_path / "new"
    assert sorted(restore(parts, new)) == [new / "attempts.jsonl", new / "run.json", new / "search" / "records.jsonl"]
    assert (new / "run.json").read_bytes() == (run / "run.json").read_bytes()
    assert (new / "attempts.jsonl").read_bytes() == b'{"a":1}\n{"a":2}\n{"a":3}\n'
    assert (new / "search" / "records.jsonl").read_bytes() == b'{"b":1}\n' and not (new / "report.json").exists()
    assert restore(parts, new) == []  # already there
    with open(new / "attempts.jsonl", "ab") as f:  # the resumed job went on: left alone
        f.write(b'{"a":4}\n')
    assert restore(parts, new) == [] and (new / "attempts.jsonl").read_bytes().endswith(b'{"a":4}\n')


def test_the_same_lines_give_the_same_part_bytes(tmp_path):
    a, b = save(_run(tmp_path / "r1"), tmp_path / "p1"), save(_run(tmp_path / "r2"), tmp_path / "p2")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_another_runs_files_are_refused_and_nothing_is_written(tmp_path):
    parts = tmp_path / "parts"
    save(_run(tmp_path / "run"), parts)
    other = _run(tmp_path / "other", x=b'{"a":9}\n{"a":2}\n{"a":3}\n', y=b'{"b":1}\n{"b":2}\n')
    before = sorted(parts.rglob("*"))
    with pytest.raises(InputError, match=r"other/attempts\.jsonl: does not begin with the 1 part\(s\) saved in"):
        save(other, parts)
    assert sorted(parts.rglob("*")) == before  # not even the other file's new line
    with pytest.raises(InputError, match=r"other/attempts\.jsonl: differs from the parts saved in"):
        restore(parts, other)
    assert (other / "search" / "records.jsonl").read_bytes() == b'{"b":1}\n{"b":2}\n'


def test_a_missing_or_broken_part_is_named(tmp_path):
    run, parts = _run(tmp_path / "run"), tmp_path / "parts"
    save(run, parts)
    (run / "attempts.jsonl").write_bytes(b'{"a":1}\n{"a":2}\n{"a":3}\n')
    save(run, parts)
    (parts / "attempts.part1.jsonl.gz").rename(parts / "attempts.part3.jsonl.gz")
    with pytest.raises(InputError, match=r"parts/attempts\.part1\.jsonl\.gz: missing"):
        restore(parts, tmp_path / "new")
    (parts / "attempts.part1.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match=r"parts/attempts\.part1\.jsonl\.gz: not a gzip file"):
        restore(parts, tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_the_command_saves_restores_and_names_a_bad_directory(tmp_path, capsys):
    run, parts = _run(tmp_path / "run"), tmp_path / "parts"
    assert main(["parts", "save", str(run), "--to", str(parts)]) == 0
    assert main(["parts", "save", str(run), "--to", str(parts)]) == 0
    assert main(["parts", "restore", str(parts), "--to", str(tmp_path / "new")]) == 0
    out = capsys.readouterr().out
    assert "attempts.part1.jsonl.gz" in out and f"nothing to save: {parts} is up to date" in out
    assert (tmp_path / "new" / "attempts.jsonl").read_bytes() == (run / "attempts.jsonl").read_bytes()
    assert main(["parts", "restore", str(tmp_path / "nowhere"), "--to", str(run)]) == 2
    assert "nowhere: no such directory" in capsys.readouterr().err
