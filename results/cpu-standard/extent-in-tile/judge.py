"""The extent-stating model's unconstrained attempts at the prompts of an attempts file (the scaling
curve's tiny-all baseline: the same rows), stated extents checked and stripped, then judged.

    python judge.py MODEL BASELINE.jsonl OUT.jsonl TEMPERATURE N
"""
import collections
import json
import math
import sys
from pathlib import Path

import torch

from dragonlab.core.jsonl import append_lines
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.learn import models
from dragonlab.learn.attempts import evaluate_attempts, format_summary, summary
from dragonlab.learn.dataset import load

sys.path.insert(0, str(Path(__file__).parent))
from transform import STATED, strip  # noqa: E402

model_dir, baseline, out, temperature, n = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(2)
dsd, ws = load("runs/exp-extent/dataset")
keys = sorted({(a["split"], a["index"]) for a in map(json.loads, open(baseline))})
rows = [dict(dsd[s][i], index=i) for s, i in keys]
model, tok = models.load(model_dir)
written = models.generate(model, tok, [r["prompt"] for r in rows], n=n, temperature=temperature, max_new_tokens=768,
                          batch_size=8, seed=0, progress=True)
stated = collections.Counter()
for m in (m for texts in written for t in texts for m in STATED.finditer(t)):
    stated["tiles"] += 1
    stated["stated = product"] += int(m[2]) == math.prod(map(int, m[3].split(",")))
print(dict(stated))
with Evaluator("cpu") as ev:
    attempts = evaluate_attempts(ev, ws, rows, [[strip(t) for t in texts] for texts in written], split="test",
                                 progress=True)
append_lines(out, [dict(a.to_json(), written=w) for a, w in zip(attempts, [t for ts in written for t in ts])])
print(format_summary(summary(attempts)))
