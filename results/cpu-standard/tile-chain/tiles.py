"""Exactness against the number of tile decisions a script makes: of the scripts the evaluator
applied (past decode, apply and validate), how many are correct and how many exact, for
scripts with no `tile` line, one or two, and three or more (matmuls and convolutions tile each of
their loops). One wrong tile makes a script inexact, so a per-line rate compounds.

    python tiles.py ATTEMPTS.jsonl[.gz] ...
"""
import re
import sys

from dragonlab.core.jsonl import read_lines
from dragonlab.learn.attempts import Attempt

TILES = re.compile(r"^tile ", re.M)
BUCKETS = (("no tile", range(0, 1)), ("1-2 tiles", range(1, 3)), ("3+ tiles", range(3, 1000)))

for path in sys.argv[1:]:
    attempts = list(read_lines(path, lambda d: Attempt.from_json({k: v for k, v in d.items() if k != "written"})))
    applied = [a for a in attempts if a.evaluation.stage not in ("decode", "apply", "validate")]
    print(f"{path}: {len(attempts)} attempts, {len(applied)} applied")
    print(f"  {'tile lines':<10}{'scripts':>9}{'correct':>9}{'exact':>7}  families")
    for label, counts in BUCKETS:
        group = [a for a in applied if len(TILES.findall(a.script)) in counts]
        families = sorted({a.name.split("_")[0] for a in group})
        print(f"  {label:<10}{len(group):>9}{sum(a.evaluation.correct for a in group):>9}"
              f"{sum(a.evaluation.exact for a in group):>7}  {', '.join(families)}")
