"""MetaSchedule's JSONDatabase format, in and out, so anyone's tuning logs are data.

A JSONDatabase is a directory with `database_workload.json` (one IRModule per line) and
`database_tuning_record.json` (one record per line: trace, run_secs, target, argument info).
MetaSchedule stores a failed build or run as `run_secs = [1e10]` without saying which stage
failed; such records come in with status `failed` and stay failures. Records committed with no
run time at all (sampled design spaces) come in as `unmeasured`: traces, never latencies.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import tvm
import tvm.s_tir.meta_schedule as ms
import tvm_ffi
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.schedule import Trace

from dragonlab.core import tensor_intrinsics
from dragonlab.core.codec import to_plain
from dragonlab.core.errors import InputError, one_line
from dragonlab.core.targets import get_target, name_of
from dragonlab.core.workloads import Workload
from dragonlab.search.records import (FAILED, MS_FAILURE_SECS, OK, TIMEOUT, UNMEASURED, Record, RecordFormatError,
                                      RecordStore)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"


def is_database(path: Path) -> bool:
    return (path / WORKLOAD_FILE).is_file() and (path / RECORD_FILE).is_file()


def find_databases(root: Path) -> list[Path]:
    """`root` itself if it is a database, else every database below it (tune_tir work dirs)."""
    root = Path(root)
    if is_database(root):
        return [root]
    found = sorted(p.parent for p in root.rglob(WORKLOAD_FILE) if is_database(p.parent))
    if not found:
        raise InputError(f"{root}: no {WORKLOAD_FILE} + {RECORD_FILE} found")
    return found


def read_database(path: Path) -> tuple[list[Workload], list[Record]]:
    """Workloads and records of one JSONDatabase directory."""
    path = Path(path)
    def open_db():
        db = ms.database.JSONDatabase(path_workload=str(path / WORKLOAD_FILE),
                                      path_tuning_record=str(path / RECORD_FILE), allow_missing=False)
        return db.get_all_tuning_records()

    try:
        tuning_records = tensor_intrinsics.retrying(open_db)  # tensor-core traces name TVM's intrinsics
    except Exception as e:  # TVM raises its own error types from C++ parsing
        raise RecordFormatError(f"{path}: not a readable MetaSchedule database: "
                                f"{one_line(e, last=True, typed=False)}") from None
    workloads: dict[str, Workload] = {}
    records = []
    source = f"import:{path.name}"
    for rec in tuning_records:
        w = _workload_of(rec.workload.mod, path.name)
        workloads.setdefault(w.key, w)
        target = name_of(rec.target) if rec.target is not None else "cpu"
        secs = [float(s) for s in rec.run_secs] if rec.run_secs is not None else None
        trace = to_plain(rec.trace)
        if not secs:
            records.append(Record(w.key, target, trace, UNMEASURED, source=source))
        elif any(s >= MS_FAILURE_SECS for s in secs):
            records.append(Record(w.key, target, trace, FAILED, None,
                                  "MetaSchedule stored run_secs=1e10 (build or run failed)", source=source))
        else:
            records.append(Record(w.key, target, trace, OK, tuple(secs), source=source))
    return list(workloads.values()), records


def is_record_store(path: Path) -> bool:
    """A dragonlab record store: a workload or records file, plain or sealed."""
    return any(next(Path(path).glob(pattern), None) for pattern in
               ("workloads.jsonl", "workloads.jsonl.gz", "records*.jsonl", "records*.jsonl.gz"))


def load(path: Path) -> tuple[dict[str, Workload], list[Record]]:
    """Workloads and records from a dragonlab record store or from MetaSchedule database(s)."""
    path = Path(path)
    if is_record_store(path):
        store = RecordStore(path)
        return store.workloads(), store.records()
    workloads: dict[str, Workload] = {}
    records: list[Record] = []
    for db in find_databases(path):
        ws, rs = read_database(db)
        workloads.update((w.key, w) for w in ws)
        records.extend(rs)
    return workloads, records


def import_databases(paths: list[Path], store: RecordStore) -> int:
    """Append the records of every database under `paths`; returns how many were new."""
    have = {r.identity for r in store.records()}
    added = 0
    for root in paths:
        for db in find_databases(Path(root)):
            workloads, records = read_database(db)
            store.add_workloads(workloads)
            new = [r for r in records if r.identity not in have]
            have.update(r.identity for r in new)
            store.append(new)
            added += len(new)
    return added


def export_database(store: RecordStore, out: Path, target: str) -> int:
    """Write the store's records for `target` as one JSONDatabase directory (one per target,
    since MetaSchedule's query does not filter by target). Refuses to overwrite."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} exists and is not empty; choose a new directory")
    spec = get_target(target)
    workloads = store.workloads()
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent if out.parent.exists() else None))
    try:
        db = ms.database.JSONDatabase(work_dir=str(tmp))
        n = 0
        for r in store.records(target=target):
            if r.status == TIMEOUT or r.workload not in workloads:
                continue
            w = workloads[r.workload]
            sch = Schedule(w.mod)
            Trace.apply_json_to_schedule(r.trace, sch)
            secs = (list(r.latencies) if r.status == OK
                    else None if r.status == UNMEASURED else [MS_FAILURE_SECS])
            db.commit_tuning_record(ms.database.TuningRecord(
                sch.trace, db.commit_workload(w.mod), secs, spec.tvm(), ArgInfo.from_prim_func(w.mod["main"])))
            n += 1
        del db
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            out.rmdir()
        tmp.rename(out)  # atomic: the directory appears whole or not at all
        return n
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _workload_of(mod: tvm.IRModule, origin: str) -> Workload:
    """A Workload for a module found in someone's database: family `imported`."""
    func = mod["main"]
    args = ArgInfo.from_prim_func(func)
    signature = ", ".join(f"{a.dtype}[{','.join(str(int(d)) for d in a.shape)}]" for a in args)
    dtype = str(args[0].dtype) if args else "float32"
    try:
        flops = int(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:  # estimation is best effort: some TIR has no countable flops
        flops = 0
    key = str(tvm_ffi.structural_hash(mod))
    return Workload(name=f"{origin}/{key[:10]}", family="imported", params={"args": signature},
                    dtype=dtype, flops=flops, mod=mod)
