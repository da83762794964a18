"""A model trained on a transformed dataset (transform.py) writes unconstrained scripts at the
prompts of an attempts file (the scaling curve's tiny-all rows: the control's prompts); its text
is turned back into the codec's form and judged by the CPU evaluator.

    python judge.py FORM MODEL BASELINE.jsonl OUT.jsonl TEMPERATURE N    # FORM codec: runs/std/dataset
"""
import sys
from pathlib import Path

import torch

from dragonlab.core.jsonl import append_lines
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.learn import models
from dragonlab.learn.attempts import evaluate_attempts, format_summary, read_attempts, summary
from dragonlab.learn.dataset import load

sys.path.insert(0, str(Path(__file__).parent))
from transform import back, dataset_dir  # noqa: E402

form, model_dir, baseline, out = sys.argv[1:5]
temperature, n = float(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(2)
dsd, ws = load(dataset_dir(form))
keys = sorted({(a.split, a.index) for a in read_attempts(baseline)})
rows = [dict(dsd[s][i], index=i) for s, i in keys]
model, tok = models.load(model_dir)
written = models.generate(model, tok, [r["prompt"] for r in rows], n=n, temperature=temperature, max_new_tokens=768,
                          batch_size=8, seed=0, progress=True)
with Evaluator("cpu") as ev:
    scripts = [[back(form, t, ws[row["workload"]].mod) for t in texts] for row, texts in zip(rows, written)]
    attempts = evaluate_attempts(ev, ws, rows, scripts, split="test", progress=True)
append_lines(out, [dict(a.to_json(), written=w) for a, w in zip(attempts, [t for ts in written for t in ts])])
print(format_summary(summary(attempts)))
