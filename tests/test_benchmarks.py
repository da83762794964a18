"""Benchmarks print a ratio only over equal work, and say so when they cannot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args, "--allow-contended"],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_a_baseline_that_failed_makes_no_figure():
    """A build limit no build can meet, on the first try and on the retry: MetaSchedule's builder
    fails for real. (collect.py goes through the same `fair.baseline`, tested below without
    TVM.) One candidate: each build the limit kills costs the builder its worker, and the next
    try waits for another to start and import TVM's tensor intrinsics (about 15 s a try here)."""
    out = _run("evaluate.py", "--batches", "1", "--per-workload", "1", "--families", "softmax",
               "--baseline-build-timeout", "0.001", "--retry-build-timeout", "0.001")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Trying again with a build limit of 0.001 s" in out.stdout
    assert "no ratio:" in out.stdout and "first error:" in out.stdout
    assert "ratio (" not in out.stdout  # no "throughput ratio (...)" line
    assert "machine:" in out.stdout.splitlines()[0]


def _fair():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import fair
    finally:
        sys.path.remove(str(BENCHMARKS))
    return fair


@pytest.mark.parametrize("recorded_ok, verdict", [
    ([(4, 4), (4, 4)], "first"),  # every trial on the first try: no retry
    ([(4, 3), (4, 4)], "retry"),  # one short, then all under the longer limit
    ([(4, 3), (4, 3)], None),     # short twice: no figure
    ([(3, 3), (4, 4)], "retry"),  # fewer recorded than asked for is short too
])
def test_the_baseline_is_retried_once_and_a_short_one_makes_no_figure(recorded_ok, verdict, capsys):
    """What collect.py asks of its baseline (evaluate.py likewise, with its own count): every
    trial recorded and nearly all measured, on the first try or on one retry."""
    fair, limits, tries = _fair(), [], iter(recorded_ok)

    def run(limit):
        limits.append(limit)
        recorded, ok = next(tries)
        return 1.0, recorded, ok, "the first error"

    def shortfall(r):
        return None if fair.enough(r[1], r[2], 4) else f"measured {r[2]} of 4; first error: {r[3]}"

    done = fair.baseline("ms.tune_tir", run, shortfall, 30.0, 120.0)
    out = capsys.readouterr().out
    if verdict is None:
        assert done is None and limits == [30.0, 120.0] and "no ratio: ms.tune_tir measured 3 of 4" in out
    else:
        assert done is not None and done[1] == limits[-1] == (30.0 if verdict == "first" else 120.0)
        assert ("Trying again with a build limit of 120 s" in out) == (verdict == "retry")


def test_a_baseline_whose_builder_pool_times_out_is_tried_again_not_a_crash(capsys):
    """MetaSchedule's LocalBuilder raises TimeoutError when a pool worker does not start in time."""
    fair, limits = _fair(), []

    def run(limit):
        limits.append(limit)
        if limit < 100:
            raise TimeoutError()
        return 1.0, 4, 4, None

    done = fair.baseline("ms.tune_tir", run, lambda r: None, 30.0, 120.0)
    assert done == ((1.0, 4, 4, None), 120.0) and limits == [30.0, 120.0]
    assert "did not start within the limit. Trying again with a build limit of 120 s" in capsys.readouterr().out


def test_a_busy_machine_is_refused_or_marked(monkeypatch, capsys):
    fair = _fair()
    monkeypatch.setattr(fair.psutil, "cpu_percent", lambda interval: 100.0)
    with pytest.raises(SystemExit) as info:
        fair.machine(allow_contended=False)
    assert info.value.code == 3 and "refused: the machine is busy" in capsys.readouterr().err
    assert fair.machine(allow_contended=True) is False
    assert "CONTENDED" in capsys.readouterr().out
