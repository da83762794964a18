"""Correct and exact shares per task of attempts files, as `dragonlab attempts` counts them
(a `written` field, the text as the model wrote it, is set aside).

    python table.py ATTEMPTS.jsonl[.gz] ...
"""
import sys
from pathlib import Path

from dragonlab.learn.attempts import format_summary, summary

sys.path.insert(0, str(Path(__file__).parent))
from transform import judged  # noqa: E402

for path in sys.argv[1:]:
    attempts = judged(path)
    print(path)
    print(format_summary(summary(attempts)))
