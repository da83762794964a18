"""Is the codec exact on these records? `dragonlab codec check` and the notebooks call this.

A record passes when its script decodes to exactly its trace (`decode(encode(t)) == to_plain(t)`,
telling True from 1 and 1 from 1.0) and when replaying the decoded script on the record's
workload gives the same scheduled module as replaying the stored trace
(`tvm_ffi.structural_equal`). A record that fails names the first difference: the instruction,
its kind and the field, or the stage that stopped it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from dragonlab.core import codec
from dragonlab.core.allowlist import known_crash
from dragonlab.core.workloads import Workload
from dragonlab.search.explore import forms
from dragonlab.search.records import Record


@dataclass(frozen=True)
class TraceCheck:
    """One trace: exact or not, why not, and its sizes in the three forms (0 where unknown)."""

    exact: bool
    difference: str | None = None  # the first difference, or the stage that failed
    script_chars: int = 0
    python_chars: int = 0  # "\n".join(Trace.as_python()) of the replayed trace; 0 if TVM fails
    json_chars: int = 0  # compact json.dumps of the plain form


@dataclass(frozen=True)
class Failure:
    index: int  # position among the records read, counting from 0 (as `codec show --index`)
    workload: str  # its name, or its key when the workload is missing
    target: str
    difference: str


@dataclass(frozen=True)
class CheckReport:
    total: int
    failures: list[Failure] = field(default_factory=list)
    script_chars: int = 0  # summed over the exact records whose three forms are all known
    python_chars: int = 0
    json_chars: int = 0

    @property
    def exact(self) -> int:
        return self.total - len(self.failures)

    def summary(self) -> str:
        """`exact: N/N, chars vs as_python: X.XXx, vs json: Y.YYx` (ratios of total characters)."""
        def ratio(n: int) -> str:
            return f"{n / self.script_chars:.2f}x" if self.script_chars else "n/a"

        return f"exact: {self.exact}/{self.total}, chars vs as_python: {ratio(self.python_chars)}, " \
               f"vs json: {ratio(self.json_chars)}"


def first_difference(expected: list, got: list) -> str | None:
    """Where two plain traces `[insts, decisions]` first differ, or None if they are identical."""
    insts, decisions = expected
    got_insts, got_decisions = got
    for i, (a, b) in enumerate(zip(insts, got_insts)):
        for k, name in enumerate(("kind", "inputs", "attrs", "outputs")):
            where = _where(a[k], b[k], name)
            if where is not None:
                return f"instruction {i} ({a[0]}) {where}"
    if len(insts) != len(got_insts):
        return f"instruction count: expected {len(insts)}, got {len(got_insts)}"
    for (i, a), (j, b) in zip(decisions, got_decisions):
        if i != j or _where(a, b, "") is not None:
            return f"decision of instruction {min(i, j)}: expected {_show(a)}, got {_show(b)}" if i == j \
                else f"decisions: expected one for instruction {i}, got one for {j}"
    if len(decisions) != len(got_decisions):
        return f"decision count: expected {len(decisions)}, got {len(got_decisions)}"
    return None


def _where(a, b, path: str) -> str | None:
    """The path of the first difference between two plain values, e.g. `attrs[0]: expected ...`."""
    if isinstance(a, list) and isinstance(b, list):
        for k, (x, y) in enumerate(zip(a, b)):
            where = _where(x, y, f"{path}[{k}]")
            if where is not None:
                return where
        return None if len(a) == len(b) else f"{path}: expected {len(a)} items, got {len(b)}"
    same = type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))
    return None if same else f"{path}: expected {_show(a)}, got {_show(b)}"


def _show(v) -> str:
    text = json.dumps(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _last_line(e: Exception) -> str:
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"


def check_trace(trace, mod) -> TraceCheck:
    """Check one trace (a Trace or its JSON form) against the module it was recorded on."""
    import tvm_ffi
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    try:
        expected = codec.to_plain(trace)
        script = codec.encode(trace)
    except codec.CodecError as e:
        return TraceCheck(False, f"encode: {e}")
    try:
        decoded = codec.decode(script)
    except codec.CodecError as e:
        return TraceCheck(False, f"decode: {e}", len(script))
    difference = first_difference(expected, decoded)
    if difference is not None:
        return TraceCheck(False, f"round trip: {difference}", len(script))
    crash = known_crash(expected)
    if crash is not None:
        return TraceCheck(False, crash, len(script))
    try:
        original = Schedule(mod, seed=1)
        if isinstance(trace, list):
            Trace.apply_json_to_schedule(trace, original)
        else:
            trace.apply_to_schedule(original, remove_postproc=False)
    except Exception as e:  # TVM raises many error types for a trace that does not fit the module
        return TraceCheck(False, f"the stored trace does not apply to its workload: {_last_line(e)}", len(script))
    try:
        replayed = codec.apply(decoded, mod)
    except Exception as e:
        return TraceCheck(False, f"the decoded script does not apply: {_last_line(e)}", len(script))
    if not tvm_ffi.structural_equal(replayed.mod, original.mod):
        return TraceCheck(False, "replaying the script gives a different module than the stored trace",
                          len(script))
    f = forms(original.trace)
    return TraceCheck(True, None, len(script), len(f.python_text) if f.python else 0, len(f.json))


def check_records(workloads: dict[str, Workload], records: list[Record], *, progress: bool = True) -> CheckReport:
    """Check every record against its workload's module; the size ratios count the exact records
    whose as_python TVM can print."""
    from dragonlab.core.progress import progress_bar

    failures, sizes = [], [0, 0, 0]
    for index, r in enumerate(progress_bar(records, desc="codec check", unit="record", progress=progress)):
        w = workloads.get(r.workload)
        result = check_trace(r.trace, w.mod) if w is not None else \
            TraceCheck(False, f"workload {r.workload} is not among the {len(workloads)} workloads read")
        if not result.exact:
            failures.append(Failure(index, w.name if w else r.workload, r.target, result.difference))
        elif result.python_chars:
            for k, n in enumerate((result.script_chars, result.python_chars, result.json_chars)):
                sizes[k] += n
    return CheckReport(len(records), failures, *sizes)
