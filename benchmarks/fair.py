"""What every benchmark here does before it prints a ratio: say which machine, refuse a busy one,
and print a ratio only over equal work.

A ratio against a baseline that failed measures the baseline's breakage, not our speed: on a
loaded 2-core machine MetaSchedule's LocalBuilder timed out on every candidate (each fresh build
process first imports TVM's tensor intrinsics, 16-22 s idle) and a benchmark divided by it.
"""

from __future__ import annotations

import datetime
import os
import sys

import psutil

from dragonlab.search.collect import machine as dragonlab_machine

BUSY_CORES = 0.25  # CPU other processes may use while a benchmark runs, in cores


def machine(allow_contended: bool) -> bool:
    """Print the machine and its load; exit 3 on a busy machine unless `allow_contended`, in which
    case the figures are marked contended. Returns whether the machine was idle."""
    m = dragonlab_machine()
    busy = psutil.cpu_percent(interval=2.0) / 100 * (psutil.cpu_count() or 1)
    print(f"machine: {m['cpu']}, {m['cores']} cores ({m['threads']} threads), {m['memory_gib']} GiB; "
          f"{datetime.date.today()}; other processes used {busy:.2f} cores over 2 s", flush=True)
    if busy <= BUSY_CORES:
        return True
    message = (f"the machine is busy ({busy:.2f} cores in use by other processes, more than {BUSY_CORES}): "
               "both sides would be slowed unevenly")
    if not allow_contended:
        print(f"refused: {message}; stop the other jobs or pass --allow-contended", file=sys.stderr)
        sys.exit(3)
    print(f"CONTENDED: {message}; the figures below are not comparable with idle runs", flush=True)
    return False


def enough(recorded: int, ok: int, wanted: int) -> bool:
    """Equal work for a search: every trial measured, and no more than 5% of them failed (a
    search's own failed candidates), so that a side that timed out is never a baseline."""
    return recorded == wanted and ok >= 0.95 * wanted


def refuse_unequal(what: str, first_error: str | None) -> int:
    """Say that the two sides did not do the same work, and return the exit status (1)."""
    print(f"no ratio: {what}" + (f"; first error: {first_error}" if first_error else ""), flush=True)
    return 1


def baseline(name: str, run, shortfall, first_timeout: float, retry_timeout: float):
    """`run(build_timeout)` once, and again with `retry_timeout` if `shortfall(result)` (a
    sentence such as "timed 3 of 32 candidates; first error: ...", or None when the baseline did
    all the work). Returns (result, the limit it ran under), or None after saying why no ratio.
    MetaSchedule's builder pool raises TimeoutError when a worker does not start within the
    limit, past its own error catching: a try that falls short, not a crash."""
    for limit in (first_timeout, retry_timeout):
        try:
            result = run(limit)
            why = shortfall(result)
        except TimeoutError:
            why = "measured nothing; first error: a build worker did not start within the limit"
        if why is None:
            return result, limit
        if limit == first_timeout:
            print(f"{name} (build limit {first_timeout:g} s) {why}. "
                  f"Trying again with a build limit of {retry_timeout:g} s.", flush=True)
    refuse_unequal(f"{name} {why} with a build limit of {retry_timeout:g} s", None)
    return None


def add_load_argument(parser) -> None:
    parser.add_argument("--allow-contended", action="store_true",
                        help="run on a busy machine and mark the figures contended")


def add_arguments(parser) -> None:
    """The load flag and the baseline's build limits (benchmarks against MetaSchedule's builder)."""
    add_load_argument(parser)
    parser.add_argument("--baseline-build-timeout", type=float, default=None,
                        help="the baseline's build limit in seconds on its first try (default: its usual one)")
    parser.add_argument("--retry-build-timeout", type=float, default=300.0,
                        help="the baseline's build limit when it is tried again: long enough for each fresh "
                             "build process's import of TVM's tensor intrinsics")


def environment_note() -> str:
    return f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}"
