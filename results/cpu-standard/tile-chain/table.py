"""Correct and exact shares per task of attempts files, as `dragonlab attempts` counts them
(a `written` field, the text as the model wrote it, is set aside).

    python table.py ATTEMPTS.jsonl[.gz] ...
"""
import sys

from dragonlab.core.jsonl import read_lines
from dragonlab.learn.attempts import Attempt, format_summary, summary

for path in sys.argv[1:]:
    attempts = list(read_lines(path, lambda d: Attempt.from_json({k: v for k, v in d.items() if k != "written"})))
    print(path)
    print(format_summary(summary(attempts)))
