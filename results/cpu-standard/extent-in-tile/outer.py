"""If a tile's outermost factor were derived (the loop's extent over the others), how many of a
model's correct unconstrained scripts would be exact? Those whose every repaired decision is a tile
whose inner factors TVM kept. Only correct scripts (applied by the evaluator's sandboxed workers)
are applied again here.

    python outer.py ATTEMPTS.jsonl[.gz] ...
"""
import collections
import gzip
import json
import sys

from dragonlab.core.codec import apply, decode, design_part, to_plain
from dragonlab.learn.dataset import load

_, workloads = load("runs/std/dataset")
for path in sys.argv[1:]:
    counts = collections.Counter()
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as lines:
        for a in map(json.loads, lines):
            e = a["evaluation"]
            counts[a["task"], "attempts"] += 1
            if e["stage"] not in ("ok", "time"):
                continue
            counts[a["task"], "correct"] += 1
            counts[a["task"], "exact"] += not e["repairs"]
            plain = design_part(decode(a["script"]))
            taken = dict(to_plain(apply(plain, workloads[a["workload"]].mod).trace)[1])
            counts[a["task"], "exact if the outer factor were derived"] += all(
                taken[i] == d or plain[0][i][0] == "SamplePerfectTile" and taken[i][1:] == d[1:] for i, d in plain[1])
    print(path, dict(sorted(counts.items())))
