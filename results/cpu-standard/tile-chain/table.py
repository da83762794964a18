"""Correct and exact shares per task of attempts files, as `dragonlab attempts` counts them
(a `written` field, the text as the model wrote it, is set aside).

    python table.py ATTEMPTS.jsonl[.gz] ...
"""
import gzip
import json
import sys

from dragonlab.learn.attempts import Attempt, format_summary, summary

for path in sys.argv[1:]:
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as lines:
        attempts = [Attempt.from_json({k: v for k, v in json.loads(line).items() if k != "written"}) for line in lines]
    print(path)
    print(format_summary(summary(attempts)))
