"""Per line of a transformed model's scripts, in the scripts the evaluator validated and applied
(TVM itself dies of SIGFPE on a tile factor 0, which the evaluator's validation refuses).

Per tile line: does the chain's first number equal the loop's extent (the product of the
decision TVM took when it applied the script), does each number divide the one before, do the
factors multiply to the loop's extent, and (forms that state extents on `loops` lines) is the
first number the extent its loops line stated for that loop? Where the first number is wrong, is
it another of the extents the kernel shows, or one it does not show (written from memory)? Per
`loops` line of a named block: are the extents it states the kernel's for that block? The
product's rate is also given apart for scripts of one or two tiles and of three or more.

FORM `codec` reads a control's attempts (the codec's form, no `written` text): its chains are
its factors' (`to_chain`), so their first number is their product and they always divide. So
does FORM `implied`, whose outermost factors the judge filled in. For every form: do the factors
after the outermost multiply to a divisor of the loop's extent (the tile would be exact had the
outermost been implied)?

    python lines.py FORM ATTEMPTS.jsonl[.gz]
"""
import collections
import math
import sys
from pathlib import Path

from dragonlab.core.codec import apply, decode, design_part, to_plain
from dragonlab.core.jsonl import read_lines
from dragonlab.learn.dataset import load

sys.path.insert(0, str(Path(__file__).parent))
from transform import (CHAIN, LOOPS, UNAPPLIED, VERBATIM, dataset_dir, from_spaced, loop_extent, signatures,  # noqa: E402
                       split_prompt, tile_bucket, to_chain)


def stated_extents(form: str, line: str) -> list[int | None] | None:
    """The extents a `loops` line states (None for a loop it gives none), or None for a line of
    a form that states none."""
    if form == "extents" and (m := LOOPS.match(line)):
        return [int(x) if x.isdigit() else None for x in m[2].split(",")]
    if form == "verbatim" and (m := VERBATIM.match(line)):
        return [loop_extent(it) or None for it in m[2].split(", ")]
    return None


form, path = sys.argv[1], sys.argv[2]
factor_form = form in ("codec", "implied")  # the script's own factors are the chain: no `written` chain to read
dsd, workloads = load(dataset_dir(form))
counts = collections.Counter()
for a in read_lines(path):
    if a["evaluation"]["stage"] in UNAPPLIED:
        counts["scripts that stopped at decode, apply or validate"] += 1
        continue
    plain = design_part(decode(a["script"]))
    try:
        taken = dict(to_plain(apply(plain, workloads[a["workload"]].mod).trace)[1])
    except Exception:
        counts["scripts that do not apply here"] += 1
        continue
    kernel = signatures(split_prompt(dsd[a["split"]][a["index"]]["prompt"])[0])
    extents = {e for ext in kernel.values() for e in ext}
    text = to_chain(a["script"]) if factor_form else from_spaced(a["written"]) if form == "spaced" else a["written"]
    written = text.split("\n")
    stated = {}
    loops = [inst for inst in plain[0] if inst[0] == "GetLoops"]
    for inst, line in zip(loops, [w for w in written if w.startswith("loops ")]):
        ext = stated_extents(form, line)
        if ext is None:
            continue
        stated.update(zip(inst[3], ext))
        name = line.split()[1].split("(")[0]
        if name.startswith("@") and name[1:] in kernel:
            counts["loops lines of a named block"] += 1
            counts["  stating the kernel's extents"] += ext == kernel[name[1:]]
    chains = [[int(x) for x in m[2].split(">") if x] for m in CHAIN.finditer(text)]
    tiles = [(i, d) for i, d in plain[1] if plain[0][i][0] == "SamplePerfectTile"]
    for (i, factors), spans in zip(tiles, chains):
        loop = math.prod(taken[i])
        counts["tiles"] += 1
        counts["  first = the loop's extent"] += spans[0] == loop
        counts["  the loop's extent is one the kernel shows"] += loop in extents
        if not factor_form and spans[0] != loop:  # a wrong first number: from the kernel, or from memory?
            counts["  first not the loop's, but one the kernel shows"] += spans[0] in extents
        counts["  each divides the one before"] += all(b and a % b == 0 for a, b in zip(spans, spans[1:]))
        multiplies = math.prod(factors) == loop
        others = math.prod(factors[1:])
        counts["  the others' product divides the loop's extent"] += bool(others) and loop % others == 0
        counts["  product = the loop's extent"] += multiplies
        bucket = tile_bucket(len(tiles))  # the script's
        counts[f"  tiles in scripts of {bucket}"] += 1
        counts[f"    product = the loop's extent ({bucket})"] += multiplies
        if stated:
            counts["  first = its loops line's extent"] += spans[0] == stated.get(plain[0][i][1][0])
for k, v in counts.items():
    print(f"{k:50} {v}")
