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
@pytest.mark.parametrize("script, args", [
    ("evaluate.py", ("--batches", "1", "--per-workload", "1")),
    ("collect.py", ("--workloads", "1", "--trials", "4", "--per-round", "4")),
])
def test_a_baseline_that_failed_makes_no_figure(script, args):
    """A build limit no build can meet, on the first try and on the retry."""
    out = _run(script, *args, "--baseline-build-timeout", "0.001", "--retry-build-timeout", "0.001")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Trying again with a build limit of 0.001 s" in out.stdout
    assert "no ratio:" in out.stdout and "first error:" in out.stdout
    assert "ratio (" not in out.stdout  # no "throughput ratio (...)" line
    assert "machine:" in out.stdout.splitlines()[0]


def test_a_busy_machine_is_refused_or_marked(monkeypatch, capsys):
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import fair
    finally:
        sys.path.remove(str(BENCHMARKS))
    monkeypatch.setattr(fair.psutil, "cpu_percent", lambda interval: 100.0)
    with pytest.raises(SystemExit) as info:
        fair.machine(allow_contended=False)
    assert info.value.code == 3 and "refused: the machine is busy" in capsys.readouterr().err
    assert fair.machine(allow_contended=True) is False
    assert "CONTENDED" in capsys.readouterr().out
