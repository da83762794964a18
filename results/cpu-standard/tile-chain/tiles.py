"""Exactness against the number of tile decisions a script makes: of the scripts the evaluator
applied (past decode, apply and validate), how many are correct and how many exact, for
scripts with no `tile` line, one or two, and three or more (matmuls and convolutions tile each of
their loops). One wrong tile makes a script inexact, so a per-line rate compounds.

    python tiles.py ATTEMPTS.jsonl[.gz] ...
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from transform import UNAPPLIED, judged, tile_bucket  # noqa: E402

TILES = re.compile(r"^tile ", re.M)

for path in sys.argv[1:]:
    attempts = judged(path)
    applied = [a for a in attempts if a.evaluation.stage not in UNAPPLIED]
    print(f"{path}: {len(attempts)} attempts, {len(applied)} applied")
    print(f"  {'tile lines':<10}{'scripts':>9}{'correct':>9}{'exact':>7}  families")
    for label in ("no tile", "1-2 tiles", "3+ tiles"):
        group = [a for a in applied if tile_bucket(len(TILES.findall(a.script))) == label]
        families = sorted({a.name.split("_")[0] for a in group})
        print(f"  {label:<10}{len(group):>9}{sum(a.evaluation.correct for a in group):>9}"
              f"{sum(a.evaluation.exact for a in group):>7}  {', '.join(families)}")
