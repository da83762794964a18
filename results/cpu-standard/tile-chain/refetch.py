"""Would `get` lines written for the model rescue the scripts that name a block they never
fetched (`@name` with no `get name`)? For each such attempt of an attempts file (judge.py's, with
the text as written), the missing `get` lines are put back (transform.fetching) under both
readings of the model's variable numbers, and the script is decoded.

    python refetch.py ATTEMPTS.jsonl[.gz]
"""
import re
import sys
from collections import Counter
from pathlib import Path

from dragonlab.core.codec import decode
from dragonlab.core.jsonl import read_lines
from dragonlab.learn.dataset import load

sys.path.insert(0, str(Path(__file__).parent))
from transform import NAMED, blocks, dataset_dir, fetching, from_chain, from_named, split_prompt  # noqa: E402

dsd, _ = load(dataset_dir("named"))
unfetched = [r for r in read_lines(sys.argv[1]) if "found '@'" in (r["evaluation"]["reason"] or "")]
kernels = [split_prompt(dsd[r["split"]][r["index"]]["prompt"])[0] for r in unfetched]
strangers = [r for r, k in zip(unfetched, kernels)
             if set(NAMED.findall(r["written"])) - blocks(k)]
print(f"{len(unfetched)} scripts stopped at an @name never fetched; {len(strangers)} of them name a block"
      f" their kernel does not have, e.g. {[sorted(set(NAMED.findall(r['written'])))[:4] for r in strangers[:3]]}")
for renumber in (False, True):
    decoded, errors = 0, Counter()
    for r, kernel in zip(unfetched, kernels):
        try:
            decode(from_named(fetching(from_chain(r["written"]), kernel, renumber)))
            decoded += 1
        except Exception as e:  # what stops it now, without the line, column and names
            errors[re.sub(r"^line \d+, column \d+: |'[^']*'", "", str(e))] += 1
    print(f"  decode with the missing gets put back ({'numbers moved up' if renumber else 'numbers as written'}):"
          f" {decoded}; the others stop at: {dict(errors.most_common())}")
