"""Search records: every measured MetaSchedule candidate, kept on disk append-only.

A `RecordStore` is a directory:

    workloads.jsonl          one line per workload: the exact IRModule it was tuned on
    records[.SHARD].jsonl    one line per measured candidate (a `Record`)
    progress[.SHARD].jsonl   one line per (workload, target) whose collection finished
    collection[.SHARD].jsonl one line per `dragonlab collect` run: machine, versions, settings, time
    checks.jsonl             one line per record judged by the evaluator (`dragonlab records check`)

Every file is append-only (`dragonlab.core.jsonl`: a torn last line left by a kill is ignored on
read and cut off before the next append, so a kill -9 loses at most the lines being written).
Shards (`--shard i/n`) write their own files in the same directory or in separate ones;
reading de-duplicates, so merging is `cat`. A finished file can be sealed (`seal`): compressed
to `<name>.gz`, which readers read as it is and which never changes again, so a shipped corpus
goes into git file by file while later shards are still being collected.

MetaSchedule's runner times a kernel without looking at what it computes, and TVM builds some
schedules of its own design spaces into kernels that compute wrong numbers. `records check` runs
the evaluator's numerical check on stored records and appends its verdicts; reading applies them,
so a record whose kernel differs from the unscheduled one reads as "wrong" everywhere (statistics,
datasets, search baselines) while the measured file stays as it was sealed.

Records keep the module they were tuned on by workload key, and the workload file keeps the
module itself: the structural hash ignores block names, but traces look blocks up by name.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import append_lines, read_lines, seal
from dragonlab.core.workloads import Workload

# What happened to a measured candidate. Only "ok" records carry latencies and become data;
# "timeout" means the build or run was killed for time (often a busy machine, not a bad
# schedule), so it is neither a latency nor a schedule failure.
# "failed" is a failure whose stage is unknown (MetaSchedule databases do not say), and
# "unmeasured" a trace committed without a measurement (a sampled design space, say): a trace
# for the codec, never a latency. "wrong": measured ok, but the evaluator found that the kernel's
# outputs differ from the unscheduled kernel's (a verdict of `records check`): never a latency.
OK, BUILD_ERROR, RUN_ERROR, FAILED, TIMEOUT, UNMEASURED, WRONG = (
    "ok", "build_error", "run_error", "failed", "timeout", "unmeasured", "wrong")
STATUSES = (OK, BUILD_ERROR, RUN_ERROR, FAILED, TIMEOUT, UNMEASURED, WRONG)

# MetaSchedule commits failed measurements with this run time.
MS_FAILURE_SECS = 1e10


class RecordFormatError(InputError):
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

    @property
    def digest(self) -> str:
        """A short name of `identity`, by which a check verdict refers to its record."""
        return hashlib.sha256("\n".join(self.identity).encode()).hexdigest()[:32]

    def to_json(self) -> dict:
        d = asdict(self)
        d["latencies"] = list(self.latencies) if self.latencies else None
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Record":
        """The record a JSON object describes, every field checked; RecordFormatError names the field."""
        if not isinstance(d, dict):
            raise RecordFormatError(f"a record must be a JSON object, got {_json_type(d)}")
        missing = [k for k in ("workload", "target", "trace", "status") if k not in d]
        if missing:
            raise RecordFormatError(f"record is missing field {missing[0]!r}")
        unknown = set(d) - set(_FIELDS)
        if unknown:
            raise RecordFormatError(f"record has unknown field {sorted(unknown)[0]!r}")
        for name, value in d.items():
            kind, nullable = _FIELDS[name]
            if not (value is None and nullable or isinstance(value, kind) and not isinstance(value, bool)):
                raise RecordFormatError(f"field {name!r} must be {_JSON_NAMES[kind]}{' or null' if nullable else ''}, "
                                        f"got {_json_type(value)}")
        if len(d["trace"]) != 2 or not all(isinstance(part, list) for part in d["trace"]):
            raise RecordFormatError("field 'trace' must be [instructions, decisions]")
        lat = d.get("latencies")
        if lat is not None and not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                                       and x > 0 for x in lat):
            raise RecordFormatError("field 'latencies' must hold positive finite seconds")
        return cls(**{**d, "latencies": tuple(lat) if lat else None})


# The JSON type of each field of a stored Record, and whether it may be null.
_FIELDS = {"workload": (str, False), "target": (str, False), "trace": (list, False), "status": (str, False),
           "latencies": (list, True), "error": (str, True), "round": (int, True), "trial": (int, True),
           "source": (str, False)}
_JSON_NAMES = {str: "a string", list: "an array", int: "an integer", float: "a number", dict: "an object",
               bool: "a boolean", type(None): "null"}


def _json_type(value) -> str:
    return next((name for kind, name in _JSON_NAMES.items() if type(value) is kind), type(value).__name__)


def trace_text(trace: list) -> str:
    """Canonical compact JSON of a plain trace: the identity used for de-duplication."""
    return json.dumps(trace, separators=(",", ":"))


@dataclass(frozen=True)
class Check:
    """The evaluator's verdict on a stored record: the status it gives the record when read."""

    record: str  # Record.digest
    status: str  # OK, or the failure the evaluator found (WRONG, RUN_ERROR, BUILD_ERROR)
    stage: str  # the evaluator's stage
    reason: str | None = None
    max_error: float | None = None  # worst error over the tolerance (<= 1: correct)

    @classmethod
    def from_json(cls, d: dict) -> "Check":
        if not isinstance(d, dict):
            raise RecordFormatError(f"a check must be a JSON object, got {_json_type(d)}")
        fields = {"record": lambda v: isinstance(v, str), "status": lambda v: v in STATUSES,
                  "stage": lambda v: isinstance(v, str), "reason": lambda v: v is None or isinstance(v, str),
                  "max_error": lambda v: v is None or isinstance(v, (int, float)) and not isinstance(v, bool)}
        unknown = set(d) - set(fields)
        if unknown:
            raise RecordFormatError(f"check has unknown field {sorted(unknown)[0]!r}")
        for name, valid in fields.items():
            if (name in ("record", "status", "stage") and name not in d) or not valid(d.get(name)):
                raise RecordFormatError(f"check field {name!r} is missing or invalid: {d.get(name)!r}")
        return cls(**d)


def check_of(record: Record, stage: str, reason: str | None, max_error: float | None) -> Check | None:
    """The verdict of an evaluation of a record (stage "ok" when correct); None when the
    evaluation was stopped by time, which says nothing about the kernel (checked again later).
    A non-finite `max_error` (NaN outputs) is kept as None: JSON has no such number."""
    if reason and classify_error(reason) == TIMEOUT:
        return None
    status = {"ok": OK, "check": WRONG, "run": RUN_ERROR}.get(stage, BUILD_ERROR)
    return Check(record.digest, status, stage, reason,
                 max_error if max_error is None or math.isfinite(max_error) else None)


def classify_error(message: str) -> str:
    """Tell a timeout (retry it) from a schedule that failed to build or run."""
    if "Timeout" in message or "timed out" in message:
        return TIMEOUT
    return BUILD_ERROR if "Builder" in message else RUN_ERROR


class RecordStore:
    """A directory of append-only JSON-lines files; see the module docstring."""

    def __init__(self, root: str | os.PathLike, *, shard: str = "", create: bool = False):
        self.root = Path(root)
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        elif not self.root.is_dir():
            raise InputError(f"record store {self.root} does not exist")
        self._suffix = f".{shard}" if shard else ""

    # writing -------------------------------------------------------------------------------
    def add_workloads(self, workloads: Iterable[Workload]) -> None:
        known = set(self.workloads())
        new = [w.to_json() for w in workloads if w.key not in known]
        append_lines(self.root / "workloads.jsonl", new)

    def append(self, records: Iterable[Record]) -> None:
        append_lines(self.root / f"records{self._suffix}.jsonl", (r.to_json() for r in records))

    def add_checks(self, checks: Iterable[Check]) -> None:
        append_lines(self.root / "checks.jsonl", (asdict(c) for c in checks))

    def mark_done(self, workload: str, target: str, trials: int) -> None:
        append_lines(self.root / f"progress{self._suffix}.jsonl",
                     [{"workload": workload, "target": target, "trials": trials}])

    def log_run(self, entry: dict) -> None:
        append_lines(self.root / f"collection{self._suffix}.jsonl", [entry])

    # reading -------------------------------------------------------------------------------
    def runs(self) -> list[dict]:
        """Every logged collection run (see `log_run`), in file order."""
        return [d for path in self.files("collection") for d in read_lines(path, _run, error=RecordFormatError)]

    def seal(self, shard: str | None = None, *, part: bool = False) -> list[Path]:
        """Compress the plain files (of one shard, and the workload file) into sealed `.gz` files.
        `part`: a shard still being collected is sealed as `<stem>.<shard>.partN.jsonl.gz` (N the
        next free number), so that what it has so far can be shipped and its collection goes on
        in a new plain file. A plain file whose sealed name is taken (lines appended after its
        shard was sealed: a rerun's log line) is sealed as the next part too; nothing sealed is
        ever replaced."""
        if part and not shard:
            raise InputError("sealing a part needs the shard it belongs to")
        names = [f"{stem}.{shard}.jsonl" for stem in ("records", "progress", "collection")] if shard else None
        paths = [p for stem in ("workloads", "records", "progress", "collection", "checks") for p in self.files(stem)]
        paths = [p for p in paths if p.suffix == ".jsonl" and (names is None or p.name in names
                                                                or p.name == "workloads.jsonl")]
        moved = [p for p in paths if p.with_name(p.name + ".gz").exists() or part and p.name != "workloads.jsonl"]
        if moved:
            n = 1 + max((int(m) for p in moved for q in self.root.glob(f"{p.name[:-len('.jsonl')]}.part*.jsonl*")
                         for m in [q.name.rsplit(".part", 1)[1].split(".")[0]] if m.isdigit()), default=0)
            paths = [p.rename(p.with_name(f"{p.name[:-len('.jsonl')]}.part{n}.jsonl")) if p in moved else p
                     for p in paths]
        return [seal(p) for p in paths]

    def files(self, stem: str) -> list[Path]:
        """The store's files of one kind (workloads, records, progress) by name, a sealed file where
        its plain file was and before lines appended to that name after sealing."""
        paths = [*self.root.glob(f"{stem}*.jsonl"), *self.root.glob(f"{stem}*.jsonl.gz")]
        return sorted(paths, key=lambda p: (p.name.removesuffix(".gz"), p.suffix != ".gz"))

    def workloads(self) -> dict[str, Workload]:
        out: dict[str, Workload] = {}
        for path in self.files("workloads"):
            for w in read_lines(path, Workload.from_json, error=RecordFormatError):
                out.setdefault(w.key, w)
        return out

    def records(self, *, target: str | None = None, workload: str | None = None,
                checked: bool = True) -> list[Record]:
        """All records, de-duplicated (first occurrence wins), optionally filtered. `checked`:
        with the evaluator's verdicts applied (`checks`): a kernel found wrong or failing is a
        record of that status, without latencies."""
        seen: set = set()
        out: list[Record] = []
        verdicts = self.checks() if checked else {}
        for path in self.files("records"):
            for r in read_lines(path, Record.from_json, error=RecordFormatError):
                if (target and r.target != target) or (workload and r.workload != workload):
                    continue
                if r.identity not in seen:
                    seen.add(r.identity)
                    verdict = verdicts.get(r.digest) if verdicts and r.status == OK else None
                    if verdict is not None and verdict.status != OK:
                        r = replace(r, status=verdict.status, latencies=None, error=verdict.reason)
                    out.append(r)
        return out

    def checks(self) -> dict[str, Check]:
        """Record digest -> the evaluator's verdict on it (a record is checked once)."""
        return {c.record: c for path in self.files("checks")
                for c in read_lines(path, Check.from_json, error=RecordFormatError)}

    def done(self) -> dict[tuple[str, str], int]:
        """(workload key, target) -> trial budget of each finished collection."""
        out: dict[tuple[str, str], int] = {}
        for path in self.files("progress"):
            for workload, target, trials in read_lines(path, _progress, error=RecordFormatError):
                out[(workload, target)] = max(out.get((workload, target), 0), trials)
        return out


def _progress(d: dict) -> tuple[str, str, int]:
    if not (isinstance(d, dict) and isinstance(d.get("workload"), str) and isinstance(d.get("target"), str)
            and type(d.get("trials")) is int):
        raise RecordFormatError("expected workload, target and trials")
    return d["workload"], d["target"], d["trials"]


def _run(d: dict) -> dict:
    if not (isinstance(d, dict) and isinstance(d.get("wall_s"), (int, float)) and isinstance(d.get("machine"), dict)):
        raise RecordFormatError("expected a collection run with wall_s and machine")
    return d


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
