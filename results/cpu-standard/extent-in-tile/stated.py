"""Per tile line of an extent-stating model's scripts: is the stated extent the loop's, and do the
factors multiply to it? The loop's extent is the product of the decision TVM took when applying.
Only scripts that the evaluator's sandboxed workers applied are applied again here.

    python stated.py ATTEMPTS.jsonl[.gz]
"""
import collections
import gzip
import json
import math
import sys
from pathlib import Path

from dragonlab.core.codec import apply, decode, design_part, to_plain
from dragonlab.learn.dataset import load

sys.path.insert(0, str(Path(__file__).parent))
from transform import STATED  # noqa: E402

_, workloads = load("runs/std/dataset")
counts = collections.Counter()
with (gzip.open if sys.argv[1].endswith(".gz") else open)(sys.argv[1], "rt") as lines:
    for a in map(json.loads, lines):
        stated = [int(m[2]) for m in STATED.finditer(a["written"])]
        if a["evaluation"]["stage"] in ("decode", "apply"):
            counts["scripts that do not decode or apply"] += 1
            continue
        plain = design_part(decode(a["script"]))
        try:
            taken = dict(to_plain(apply(plain, workloads[a["workload"]].mod).trace)[1])
        except Exception as e:
            print(a["evaluation"]["stage"], a["evaluation"]["reason"], "| here:", str(e).splitlines()[-1][:100])
            counts["scripts that do not apply here"] += 1
            continue
        tiles = [(i, d) for i, d in plain[1] if plain[0][i][0] == "SamplePerfectTile"]
        for (i, factors), extent in zip(tiles, stated):
            loop = math.prod(taken[i])
            counts["tiles"] += 1
            counts["stated = the loop's extent"] += extent == loop
            counts["product = the loop's extent"] += math.prod(factors) == loop
            counts["product = stated"] += math.prod(factors) == extent
print(dict(counts))
