"""Search records: every measured MetaSchedule candidate, kept on disk append-only.

A `RecordStore` is a directory:

    workloads.jsonl          one line per workload: the exact IRModule it was tuned on
    records[.SHARD].jsonl    one line per measured candidate (a `Record`)
    progress[.SHARD].jsonl   one line per (workload, target) whose collection finished

Every file is append-only: a line is written whole with one `write`, and a torn last line
(the process was killed mid-write) is ignored on read and cut off before the next append, so
a kill -9 loses at most the line being written. Shards (`--shard i/n`) write their own files
in the same directory or in separate ones; reading de-duplicates, so merging is `cat`.

Records keep the module they were tuned on by workload key, and the workload file keeps the
module itself: the structural hash ignores block names, but traces look blocks up by name.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from dragonlab.workloads import Workload, WorkloadFormatError

# What happened to a measured candidate. Only "ok" records carry latencies and become data;
# "timeout" means the build or run was killed for time (often a busy machine, not a bad
# schedule), so it is neither a latency nor a schedule failure.
# "failed" is a failure whose stage is unknown (MetaSchedule databases do not say), and
# "unmeasured" a trace committed without a measurement (a sampled design space, say): a trace
# for the codec, never a latency.
OK, BUILD_ERROR, RUN_ERROR, FAILED, TIMEOUT, UNMEASURED = (
    "ok", "build_error", "run_error", "failed", "timeout", "unmeasured")
STATUSES = (OK, BUILD_ERROR, RUN_ERROR, FAILED, TIMEOUT, UNMEASURED)

# MetaSchedule commits failed measurements with this run time.
MS_FAILURE_SECS = 1e10


class RecordFormatError(ValueError):
    """A record or workload file line that is not what dragonlab wrote: names file and line."""


@dataclass(frozen=True)
class Record:
    workload: str  # Workload.key: decimal structural hash, as in MetaSchedule's database
    target: str  # dragonlab target name ("cpu", "cuda-sm80", ...)
    trace: list = field(repr=False)  # the full trace in MetaSchedule's JSON form, plain values
    status: str = OK
    latencies: tuple[float, ...] | None = None  # seconds, one per repeat; only when status == ok
    error: str | None = None
    round: int | None = None  # search round of the collection that measured it
    trial: int | None = None  # index of the candidate within its (workload, target) collection
    source: str = "collect"

    def __post_init__(self):
        if self.status not in STATUSES:
            raise RecordFormatError(f"status {self.status!r} is not one of {STATUSES}")
        if (self.status == OK) != bool(self.latencies):
            raise RecordFormatError(f"a record with status {self.status!r} must "
                                    f"{'' if self.status == OK else 'not '}carry latencies")

    @property
    def latency(self) -> float | None:
        """Median of the repeats, in seconds."""
        return statistics.median(self.latencies) if self.latencies else None

    @property
    def identity(self) -> tuple[str, str, str]:
        """What makes two records the same data point: one trace on one workload and target."""
        return (self.workload, self.target, trace_text(self.trace))

    def to_json(self) -> dict:
        d = asdict(self)
        d["latencies"] = list(self.latencies) if self.latencies else None
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Record":
        if not isinstance(d, dict):
            raise RecordFormatError("a record must be a JSON object")
        missing = [k for k in ("workload", "target", "trace", "status") if k not in d]
        if missing:
            raise RecordFormatError(f"record is missing field {missing[0]!r}")
        unknown = set(d) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise RecordFormatError(f"record has unknown field {sorted(unknown)[0]!r}")
        if not isinstance(d["trace"], list) or len(d["trace"]) != 2:
            raise RecordFormatError("field 'trace' must be [instructions, decisions]")
        lat = d.get("latencies")
        if lat is not None and not all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in lat):
            raise RecordFormatError("field 'latencies' must hold positive finite seconds")
        return cls(**{**d, "latencies": tuple(lat) if lat else None})


def trace_text(trace: list) -> str:
    """Canonical compact JSON of a plain trace: the identity used for de-duplication."""
    return json.dumps(trace, separators=(",", ":"))


def classify_error(message: str) -> str:
    """Tell a timeout (retry it) from a schedule that failed to build or run."""
    if "Timeout" in message or "timed out" in message:
        return TIMEOUT
    return BUILD_ERROR if "Builder" in message else RUN_ERROR


def write_atomic(path: Path, text: str) -> None:
    """Write a whole file or nothing: a temporary file beside it, then one rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object); a torn final line (no newline: a killed writer) is skipped."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    complete = lines[:-1]  # whatever follows the last newline was never finished
    for no, raw in enumerate(complete, 1):
        if not raw.strip():
            continue
        try:
            yield no, json.loads(raw)
        except json.JSONDecodeError as e:
            raise RecordFormatError(f"{path}:{no}: not JSON ({e.msg} at column {e.colno})") from None


def _append_lines(path: Path, objs: Iterable[dict]) -> None:
    payload = "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objs).encode()
    if not payload:
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.lseek(fd, 0, os.SEEK_END)
        if size:  # cut a torn last line so the new lines start on a line of their own
            os.lseek(fd, size - 1, os.SEEK_SET)
            if os.read(fd, 1) != b"\n":
                with open(path, "rb") as f:
                    keep = f.read().rfind(b"\n") + 1
                os.ftruncate(fd, keep)
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)


class RecordStore:
    """A directory of append-only JSON-lines files; see the module docstring."""

    def __init__(self, root: str | os.PathLike, *, shard: str = "", create: bool = False):
        self.root = Path(root)
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.root.is_dir():
            raise FileNotFoundError(f"record store {self.root} does not exist")
        self._suffix = f".{shard}" if shard else ""

    # writing -------------------------------------------------------------------------------
    def add_workloads(self, workloads: Iterable[Workload]) -> None:
        known = set(self.workloads())
        new = [w.to_json() for w in workloads if w.key not in known]
        _append_lines(self.root / "workloads.jsonl", new)

    def append(self, records: Iterable[Record]) -> None:
        _append_lines(self.root / f"records{self._suffix}.jsonl", (r.to_json() for r in records))

    def mark_done(self, workload: str, target: str, trials: int) -> None:
        _append_lines(self.root / f"progress{self._suffix}.jsonl",
                      [{"workload": workload, "target": target, "trials": trials}])

    # reading -------------------------------------------------------------------------------
    def workloads(self) -> dict[str, Workload]:
        path = self.root / "workloads.jsonl"
        out: dict[str, Workload] = {}
        if path.exists():
            for no, obj in _read_jsonl(path):
                try:
                    w = Workload.from_json(obj)
                except (WorkloadFormatError, KeyError, TypeError, ValueError) as e:
                    raise RecordFormatError(f"{path}:{no}: {e}") from None
                out.setdefault(w.key, w)
        return out

    def records(self, *, target: str | None = None, workload: str | None = None) -> list[Record]:
        """All records, de-duplicated (first occurrence wins), optionally filtered."""
        seen: set = set()
        out: list[Record] = []
        for path in sorted(self.root.glob("records*.jsonl")):
            for no, obj in _read_jsonl(path):
                try:
                    r = Record.from_json(obj)
                except (RecordFormatError, TypeError) as e:
                    raise RecordFormatError(f"{path}:{no}: {e}") from None
                if (target and r.target != target) or (workload and r.workload != workload):
                    continue
                if r.identity not in seen:
                    seen.add(r.identity)
                    out.append(r)
        return out

    def done(self) -> dict[tuple[str, str], int]:
        """(workload key, target) -> trial budget of each finished collection."""
        out: dict[tuple[str, str], int] = {}
        for path in sorted(self.root.glob("progress*.jsonl")):
            for no, obj in _read_jsonl(path):
                try:
                    key = (obj["workload"], obj["target"])
                    out[key] = max(out.get(key, 0), int(obj["trials"]))
                except (KeyError, TypeError, ValueError):
                    raise RecordFormatError(f"{path}:{no}: expected workload, target and trials") from None
        return out


def merge(sources: Iterable[RecordStore], out: RecordStore) -> int:
    """Copy every record and workload not already in `out`; returns the number of new records."""
    have = {r.identity for r in out.records()}
    added = 0
    for src in sources:
        out.add_workloads(src.workloads().values())
        new = [r for r in src.records() if r.identity not in have]
        have.update(r.identity for r in new)
        out.append(new)
        added += len(new)
        for (w, t), trials in src.done().items():
            out.mark_done(w, t, trials)
    return added


@dataclass(frozen=True)
class Stats:
    rows: list[dict]  # one per (workload, target): name, family, counts by status, latency spread
    by_family: dict[str, Counter]
    totals: Counter


def stats(workloads: dict[str, Workload], records: Iterable[Record]) -> Stats:
    """Counts per (workload, target) and per family, and the latency spread of the ok ones."""
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    seen: set = set()
    for r in records:
        if r.identity not in seen:
            seen.add(r.identity)
            groups[(r.workload, r.target)].append(r)
    rows, by_family, totals = [], defaultdict(Counter), Counter()
    for (wkey, target), recs in sorted(groups.items(), key=lambda kv: (kv[0][1], _name(workloads, kv[0][0]))):
        counts = Counter(r.status for r in recs)
        lats = sorted(r.latency for r in recs if r.status == OK)
        family = workloads[wkey].family if wkey in workloads else "?"
        rows.append({
            "workload": _name(workloads, wkey), "family": family, "target": target,
            "records": len(recs), **{s: counts.get(s, 0) for s in STATUSES},
            "best_ms": lats[0] * 1e3 if lats else None,
            "median_ms": statistics.median(lats) * 1e3 if lats else None,
            "worst_ms": lats[-1] * 1e3 if lats else None,
        })
        by_family[f"{family} @ {target}"].update(counts)
        totals.update(counts)
    return Stats(rows, dict(by_family), totals)


def _name(workloads: dict[str, Workload], key: str) -> str:
    return workloads[key].name if key in workloads else key
