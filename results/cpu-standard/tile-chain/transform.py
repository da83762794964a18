"""Experiment (issue 20): scripts in which a fetched block is named as in the kernel (`@out`, not
`b6`) and a tile decision is written as the chain of its loops' extents, outermost first
(`tile l24 =12>12>12>6` for the factors [1,1,2,6]: 12 = 1*1*2*6, then 1*2*6, 2*6, 6).

The first number of a chain is the loop's extent, to be copied from the kernel; each next one
divides the one before. A model writing the codec's `=[1,1,2,6]` must multiply four numbers to
the extent of a loop it finds through the script's variable numbering.

    python transform.py FORM     # FORM: chain (tiles only), named (and block names),
                                 # extents (and each `loops` line its loops' extents: `loops @out >12,16,32,16`),
                                 # verbatim (the block's signature as the kernel shows it: `loops @out(t 12, i 16 r)`)
                                 # spaced (named, each chain's number after a space: `= 12 4 1 1`)
                                 # or implied (the codec's form, each tile's outermost factor `*`: `=[*,1,2,6]`)

builds runs/exp-FORM/dataset from runs/std/dataset (prompts' input scripts and completions).
`back(FORM, text, mod)` turns a model's text into the codec's script for the evaluator (the
kernel `mod` fills the implied form's outermost factors).
"""
import math
import re
import shutil
import sys
from pathlib import Path

from dragonlab.core.allowlist import refusal
from dragonlab.core.codec import apply, decode, design_part, to_plain
from dragonlab.core.jsonl import read_lines
from dragonlab.evaluation.evaluate import STAGES
from dragonlab.learn.attempts import Attempt

TILE = re.compile(r"^(tile [^\n=]*) =\[([0-9,]+)\]$", re.M)
CHAIN = re.compile(r"^(tile [^\n=]*) =([0-9>]+)$", re.M)
NAMED = re.compile(r"@([A-Za-z_][A-Za-z0-9_.]*)")


def chain(factors: list[int]) -> str:
    return ">".join(str(math.prod(factors[i:])) for i in range(len(factors)))


def factors(spans: list[int]) -> list[int]:
    """The factors of a chain; where a span does not divide the one before, the rounded quotient
    (the script is then not exact: TVM repairs it)."""
    out = [max(1, round(a / b)) if b else 1 for a, b in zip(spans, spans[1:])]
    return out + [spans[-1]]


def to_chain(script: str) -> str:
    return TILE.sub(lambda m: f"{m[1]} ={chain([int(x) for x in m[2].split(',')])}", script)


def from_chain(text: str) -> str:
    def one(m):
        spans = [int(x) for x in m[2].split(">") if x]
        return f"{m[1]} =[{','.join(map(str, factors(spans)))}]" if spans else m[0]
    return CHAIN.sub(one, text)


SPACED = re.compile(r"^(tile [^\n=]*) =((?: \d+)+)$", re.M)


def to_spaced(text: str) -> str:
    """A chain's numbers each after a space (`=12>4>1>1` as `= 12 4 1 1`): the tokens the kernel's
    signature writes its extents with (` 12`), where `=12` and `>4` are other tokens (`12`, `4`)."""
    return CHAIN.sub(lambda m: f"{m[1]} = " + " ".join(m[2].split(">")), text)


def from_spaced(text: str) -> str:
    return SPACED.sub(lambda m: f"{m[1]} =" + ">".join(m[2].split()), text)


def to_named(script: str) -> str:
    """Each variable a `get` defined, written @NAME, where the script fetches that name once."""
    insts, _ = decode(script)
    gets = [(i[2][0], i[3][0]) for i in insts if i[0] == "GetSBlock"]
    names = [n for n, _ in gets]
    for name, var in gets:
        if names.count(name) == 1 and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
            script = re.sub(rf"(?<![\w.@]){var}(?![\w.])", "@" + name, script)
    return script


def from_named(text: str) -> str:
    """@NAME back to the variable the script's `get NAME` defined (decoding each prefix to learn
    its number); an @NAME never fetched is left as it is, and the decoder refuses it."""
    lines, defined = text.split("\n"), {}
    for k, line in enumerate(lines):
        lines[k] = NAMED.sub(lambda m: defined.get(m[1], m[0]), line)
        if line.startswith("get "):
            try:
                insts, _ = decode("\n".join(lines[:k + 1]))
            except Exception:
                break
            defined[insts[-1][2][0]] = insts[-1][3][0]
    return "\n".join(lines)


VARIABLE = re.compile(r"(?<![\w.@$\"])([blv])(\d+)(?:\.\.(\d+))?(?![\w])")


def dataset_dir(form: str) -> Path:
    """Where a form's dataset is: the standard one for the codec's form, else runs/exp-FORM."""
    return Path("runs/std/dataset" if form == "codec" else f"runs/exp-{form}/dataset")


UNAPPLIED = STAGES[:STAGES.index("build")]  # an attempt stopped at one of these was never applied


def judged(path) -> list[Attempt]:
    """An attempts file of judge.py's (a `written` field, the text as the model wrote it, set aside)."""
    return list(read_lines(path, lambda d: Attempt.from_json({k: v for k, v in d.items() if k != "written"})))


def tile_bucket(tiles: int) -> str:
    """A script by the tile decisions it makes (matmuls and convolutions make three or more)."""
    return "no tile" if tiles == 0 else "1-2 tiles" if tiles <= 2 else "3+ tiles"


def blocks(kernel: str) -> set[str]:
    """The names a script can fetch in a kernel: its blocks' and the root block's."""
    return set(signatures(kernel)) | {"root"}


def fetching(text: str, kernel: str, renumber: bool) -> str:
    """Named-form text in which an @NAME the script never fetched, a block of the kernel, gets its
    `get NAME` line just before the line that first names it. `renumber`: the model numbered its
    variables without that line, so those numbered from the new `get`'s number on move up by one;
    otherwise it counted a `get` at that line. Text whose lines before cannot be decoded is returned
    as it is."""
    fetchable, lines, defined, k = blocks(kernel), text.split("\n"), set(), 0
    while k < len(lines):
        if lines[k].startswith("get "):
            defined.add(lines[k].split()[1])
        missing = next((m[1] for m in NAMED.finditer(lines[k]) if m[1] not in defined and m[1] in fetchable), None)
        if missing is None:
            k += 1
            continue
        if renumber:
            try:
                first = sum(len(inst[3]) for inst in decode(from_named("\n".join(lines[:k])))[0])
            except Exception:
                return text

            def up(m, first=first):
                return "".join((m[1], str(int(m[2]) + (int(m[2]) >= first)),
                                f"..{int(m[3]) + (int(m[3]) >= first)}" if m[3] else ""))
            lines[k:] = [VARIABLE.sub(up, line) for line in lines[k:]]
        lines.insert(k, f"get {missing}")
    return "\n".join(lines)


LOOPS = re.compile(r"^(loops \S+) >([0-9?,]+)$", re.M)
SIGNATURE = re.compile(r"^block (\S+)\((.*)\)", re.M)


def loop_extent(item: str) -> int:
    """The extent of one loop of a block signature (`j_1 16 r`, `i int64(16)`); 0 if it has none."""
    m = re.search(r" (?:int64\()?(\d+)\)?", item)
    return int(m[1]) if m else 0


def signatures(kernel: str) -> dict[str, list[int]]:
    """Each block's loop extents as the kernel shows them (`block out(t 12, i 16, j 32, j_1 16 r)`)."""
    return {m[1]: [loop_extent(it) for it in m[2].split(", ")] for m in SIGNATURE.finditer(kernel)}


def to_extents(script: str, kernel: str) -> str:
    """Each `loops X >n` line written with its loops' extents: a tiled loop's is its factors'
    product, another's the kernel's extent at that position for a block fetched by name, else `?`."""
    insts, decisions = decode(script)
    tiled = {insts[i][1][0]: math.prod(d) for i, d in decisions if insts[i][0] == "SamplePerfectTile"}
    names = {i[3][0]: i[2][0] for i in insts if i[0] == "GetSBlock"}
    sigs, lines, k = signatures(kernel), script.split("\n"), 0
    for inst in insts:
        if inst[0] != "GetLoops":
            continue
        while not lines[k].startswith("loops "):
            k += 1
        sig = sigs.get(names.get(inst[1][0]), [])
        ext = [tiled.get(v) or (sig[j] if j < len(sig) else "?") for j, v in enumerate(inst[3])]
        lines[k] = re.sub(r" >\d+$", " >" + ",".join(map(str, ext)), lines[k])
        k += 1
    return "\n".join(lines)


def from_extents(text: str) -> str:
    return LOOPS.sub(lambda m: f"{m[1]} >{len(m[2].split(','))}", text)


VERBATIM = re.compile(r"^(loops \S+?)\((.*)\)$", re.M)


def to_verbatim(named: str, kernel: str) -> str:
    """`loops @out >4` as `loops @out(t 12, i 16, j 32, j_1 16 r)`, the kernel's own text, where the
    block's signature has as many loops as the line."""
    text = {m[1]: m[2] for m in SIGNATURE.finditer(kernel)}

    def one(m):
        sig = text.get(m[1][len("loops @"):]) if m[1].startswith("loops @") else None
        return f"{m[1]}({sig})" if sig is not None and len(sig.split(", ")) == int(m[2]) else m[0]
    return re.sub(r"^(loops \S+) >(\d+)$", one, named, flags=re.M)


def from_verbatim(text: str) -> str:
    return VERBATIM.sub(lambda m: f"{m[1]} >{len(m[2].split(', '))}", text)


def split_prompt(prompt: str) -> tuple[str, str, str]:
    head, _, rest = prompt.partition("\nscript:\n")
    script, sep, tail = rest.partition("\nfaster script:\n")
    return head + "\nscript:\n", script, sep + tail


def forward(form: str, script: str, kernel: str) -> str:
    if not script.strip():
        return script
    if form == "chain":
        return to_chain(script)
    if form == "implied":
        return to_implied(script)
    named = to_named(script)
    if form == "extents":  # the loops lines' extents (from the codec's form) on the named lines
        named = "\n".join(re.sub(r" >\d+$", " >" + e.rpartition(" >")[2], n) if n.startswith("loops ") else n
                          for n, e in zip(named.split("\n"), to_extents(script, kernel).split("\n")))
    if form == "verbatim":
        named = to_verbatim(named, kernel)
    return to_spaced(to_chain(named)) if form == "spaced" else to_chain(named)


UNDO = {"extents": from_extents, "verbatim": from_verbatim, "spaced": from_spaced}  # what a form adds to the named chain


IMPLIED = re.compile(r"^(tile [^\n=]*) =\[\*((?:,\d+)*)\]$", re.M)


def to_implied(script: str) -> str:
    """The codec's form with each tile's outermost factor written `*` (`=[*,1,2,6]`): the loop's
    extent divided by the others' product, which the kernel decides and the model need not write."""
    return TILE.sub(lambda m: f"{m[1]} =[{','.join(['*'] + m[2].split(',')[1:])}]", script)


def from_implied(text: str, mod, rounds: int = 3) -> str:
    """Each `*` as the loop's extent over the other factors' product. The extents are read from
    the schedule `mod` takes under the script with `*` as 1 (TVM replaces a decision that does not
    multiply to its loop's extent by one that does); a tile of a loop that an earlier tile made
    takes another round. Where the product does not divide the extent, `*` stays 1: the evaluator
    sees TVM repair that decision. Text that does not decode, that the evaluator's allowlist
    refuses (applying it here could crash this process: a zero factor is SIGFPE) or that does not
    apply comes back with `*` as 1, for the evaluator to refuse."""
    written = text.split("\n")  # line for line as `filled`, which only turns `*` into 1
    filled = IMPLIED.sub(lambda m: f"{m[1]} =[1{m[2]}]", text)
    for _ in range(rounds):
        try:
            plain = design_part(decode(filled, verbatim=False))
            if refusal(plain) is not None:
                return filled
            taken = dict(to_plain(apply(plain, mod).trace)[1])
        except Exception:
            return filled
        extents = iter([math.prod(taken[i]) for i, _ in plain[1] if plain[0][i][0] == "SamplePerfectTile"])
        lines = filled.split("\n")
        for k, line in enumerate(lines):
            if not (m := TILE.match(line)):
                continue
            extent, rest = next(extents, 0), m[2].split(",")[1:]
            inner = math.prod(int(x) for x in rest)
            if IMPLIED.match(written[k]) and extent and inner and extent % inner == 0:
                lines[k] = f"{m[1]} =[{','.join([str(extent // inner), *rest])}]"
        if "\n".join(lines) == filled:
            break
        filled = "\n".join(lines)
    return filled


def back(form: str, text: str, mod=None) -> str:
    """A model's text in the codec's form; `mod`, the kernel, for the implied form only."""
    if form == "codec":  # the standard dataset's own form, for a control
        return text
    if form == "implied":
        return from_implied(text, mod)
    text = from_chain(UNDO[form](text) if form in UNDO else text)
    return text if form == "chain" else from_named(text)  # every other form names its blocks


if __name__ == "__main__":
    import datasets

    from dragonlab.learn.dataset import load
    form = sys.argv[1]
    assert form in ("chain", "named", "extents", "verbatim", "spaced", "implied")
    src, out = dataset_dir("codec"), dataset_dir(form)
    dsd = datasets.load_from_disk(str(src))
    mods = {k: w.mod for k, w in load(src)[1].items()} if form == "implied" else {}

    def row(r):
        head, script, tail = split_prompt(r["prompt"])
        return {"prompt": head + forward(form, script, head) + tail,
                "completion": forward(form, r["completion"], head)}
    new = dsd.map(row)
    bad = 0
    for split in new:
        for old, r in zip(dsd[split], new[split]):
            mod = mods.get(r["workload"])
            bad += back(form, r["completion"], mod) != old["completion"]
            bad += back(form, split_prompt(r["prompt"])[1], mod) != split_prompt(old["prompt"])[1]
    assert bad == 0, f"{bad} scripts do not come back"
    new.save_to_disk(str(out))
    for name in ("workloads.jsonl", "build.json", "README.md"):
        shutil.copy(src / name, out / name)
    print(new["train"][3]["completion"][:900])
