"""Which machine judged a long job: a calibration kernel timed at each session's start.

Machines that report the same CPU can run the same kernels at very different speeds: on
2026-12-06 a 2-core AMD EPYC judged the standard report's kernels 2.5x slower than the one that
had judged them the day before, and their speedups came out 1.18x higher. A job resumed over
sessions (the report) must not mix them. `check` times the unscheduled kernel of one fixed
matmul with the job's evaluator and compares it with the first session's, recorded in the job's
`machine.jsonl` (one line per session: when, where, the calibration): outside
`TOLERANCE` either way, the job stops before judging anything and says by how much.
"""

from __future__ import annotations

import datetime
import os
import platform
import socket
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import append_lines, read_lines

# One machine timed this kernel at 16.6 to 20.5 ms within minutes (idle, and beside a test's
# notebook kernel and chat server); machines of one "2-core AMD EPYC" kind ran the same kernels
# 2.5x and 3x apart (docs/report.md). Between the two: the audit's `reference_drift` still sees it.
TOLERANCE = 1.5


def calibration_workload():
    """A dense 256 x 256 x 256 matmul: unscheduled, a few milliseconds to tens of them on a CPU,
    long enough that timer noise does not move it."""
    from dragonlab.core.families import matmul

    return matmul(m=256, n=256, k=256)


def calibrate(evaluator) -> float | None:
    """Seconds the calibration kernel takes here (median of its repeats), timed by `evaluator`."""
    return evaluator.unscheduled_latency(calibration_workload())


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def check(path: str | os.PathLike, evaluator, *, other_machine: bool = False) -> dict:
    """Time the calibration kernel and compare it with the first session's in `path`; append
    this session's line and return it. A machine outside `TOLERANCE` is refused (InputError,
    nothing appended) unless `other_machine`."""
    path = Path(path)
    seconds = calibrate(evaluator)
    line = {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(), "cpu": cpu_name(), "cores": os.cpu_count(), "calibration": seconds}
    first = next(iter(read_lines(path, dict)), None) if path.exists() else None
    if first is not None and seconds and first.get("calibration"):
        ratio = seconds / first["calibration"]
        line["ratio_to_first"] = ratio
        if not 1 / TOLERANCE <= ratio <= TOLERANCE and not other_machine:
            raise InputError(
                f"this machine runs the calibration kernel in {seconds * 1e3:.3g} ms, {ratio:.2f}x the "
                f"{first['calibration'] * 1e3:.3g} ms of the session that started this job ({path}, "
                f"{first.get('time')}, {first.get('cpu')}): judged here, its latencies would not compare with "
                f"those judged there. Resume on that machine (or an idle one: a loaded machine is slow too), "
                f"judge the whole job again here (dragonlab report --replay), or pass --other-machine to mix them")
    append_lines(path, [line])
    return line
