"""Session fixtures built once for all pytest-xdist workers.

`make test` runs the suite in two processes (pytest-xdist). A session fixture runs once per
process, so the expensive ones (real MetaSchedule records, a trained tiny model) would be
built twice, each process slowing the other. `once(tmp_path_factory, name, make)` builds in the
first process that asks, under a file lock, in a folder all workers of the run share; the others
wait for it and read its value back as JSON (written atomically: data, never pickled objects).
Without xdist it is a plain call in the session's temporary folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from filelock import FileLock

__all__ = ["once"]


def once(tmp_path_factory, name: str, make: Callable[[Path], object]):
    """`make(folder)` run once per test run (not per worker) in a folder of its own; the JSON
    value it returned."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
    folder, done = root / name, root / f"{name}.json"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            folder.mkdir(exist_ok=True)
            part = done.with_suffix(".part")
            part.write_text(json.dumps(make(folder)))
            part.replace(done)
    return json.loads(done.read_text())
