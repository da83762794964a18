"""The code is read more than it is run: no unused or repeated imports, no undefined or shadowed
names (pyflakes' rules, through ruff, which the test extras install beside pytest), in the library,
the tests, the benchmarks and the scripts."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_pyflakes_finds_nothing():
    ruff = Path(sys.executable).parent / "ruff"
    done = subprocess.run([str(ruff), "check", "--select", "F", "--output-format", "concise", "--no-cache",
                           "dragonlab", "tests", "benchmarks", "scripts"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
