"""Carry a long job's directory from one machine (or session) to the next in parts that never change.

A report, an attempts run, a comparison and the searches they run write nothing but append-only
JSON-lines files and the `run.json` that holds their settings (written once), so what such a job
has done so far is the bytes of those files. `save(run, parts)` writes, for each of them, the
complete lines added since the last save as `parts/<path in run>` with `.partN` before its suffix
(`attempts.part1.jsonl.gz`; N = 1, 2, ...), sealed as the corpus's parts are (`jsonl.seal`: the same lines give the same
bytes): files that go into git once and never change.
`restore(parts, run)` puts each file back together from its parts, and the job, rerun with the
same command, resumes where the last save left it.

    dragonlab parts save runs/standard/report --to results/cpu-standard/report-parts
    dragonlab parts restore results/cpu-standard/report-parts --to runs/standard/report

Outputs that a job rewrites whole (report.json, report.html, figures) are not carried: the
resumed job writes them again. Neither are model weights.
"""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import complete_bytes, seal, write_atomic

PART = re.compile(r"^(?P<stem>.+)\.part(?P<n>[1-9][0-9]*)(?P<suffix>\.jsonl|\.json)\.gz$")


def carried(run: Path) -> list[Path]:
    """The files of a job's directory that parts carry: every `*.jsonl`, and `run.json`."""
    return sorted(p for p in run.rglob("*") if p.is_file() and (p.suffix == ".jsonl" or p.name == "run.json"))


def save(run: str | os.PathLike, parts: str | os.PathLike) -> list[Path]:
    """The lines each carried file under `run` gained since its last saved part, as new parts
    under `parts` (the paths written, none when nothing is new). A file that no longer begins
    with its saved parts (another run's directory, or parts of another run) is refused, and
    nothing is written."""
    run, parts = Path(run), Path(parts)
    if not run.is_dir():
        raise InputError(f"{run}: no such directory")
    todo = []
    for path in carried(run):
        rel = path.relative_to(run)
        saved = _parts(parts, rel)
        before = _joined(saved)
        now = complete_bytes(path)
        if not now.startswith(before):
            raise InputError(f"{path}: does not begin with the {len(saved)} part(s) saved in {parts / rel.parent}: "
                             "they are another run's")
        if len(now) > len(before):
            todo.append((parts / rel.parent / f"{rel.stem}.part{len(saved) + 1}{rel.suffix}", now[len(before):]))
    written = []
    for plain, data in todo:
        plain.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(plain, data)
        written.append(seal(plain))
    return written


def restore(parts: str | os.PathLike, run: str | os.PathLike) -> list[Path]:
    """Each file saved under `parts`, put together into `run` (the paths written). A file `run`
    already holds is left alone when it begins with what the parts hold (it went on since), is
    completed when it is the beginning of it, and is refused otherwise; nothing is written then."""
    parts, run = Path(parts), Path(run)
    if not parts.is_dir():
        raise InputError(f"{parts}: no such directory")
    names = sorted({p.parent.relative_to(parts) / f"{m['stem']}{m['suffix']}" for p in parts.rglob("*.gz")
                    if (m := PART.match(p.name))})
    todo = []
    for rel in names:
        data = _joined(_parts(parts, rel))
        target = run / rel
        if target.exists():
            have = complete_bytes(target)
            if have.startswith(data):
                continue
            if not data.startswith(have):
                raise InputError(f"{target}: differs from the parts saved in {parts / rel.parent}: another run's")
        todo.append((target, data))
    for target, data in todo:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, data)
    return [target for target, _ in todo]


def _parts(parts: Path, rel: Path) -> list[Path]:
    """The saved parts of the file `rel`, in order; a gap in their numbers is an error."""
    folder = parts / rel.parent
    found = {int(m["n"]): p for p in folder.glob(f"{rel.stem}.part*{rel.suffix}.gz")
             if (m := PART.match(p.name)) and (m["stem"], m["suffix"]) == (rel.stem, rel.suffix)} \
        if folder.is_dir() else {}
    missing = [n for n in range(1, max(found, default=0) + 1) if n not in found]
    if missing:
        raise InputError(f"{folder / f'{rel.stem}.part{missing[0]}{rel.suffix}.gz'}: missing "
                         "(parts are numbered 1, 2, ...)")
    return [found[n] for n in sorted(found)]


def _joined(paths: list[Path]) -> bytes:
    out = []
    for p in paths:
        try:
            out.append(gzip.decompress(p.read_bytes()))
        except (OSError, EOFError) as e:
            raise InputError(f"{p}: not a gzip file ({e})") from None
    return b"".join(out)
