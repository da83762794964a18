"""Experiment (issue 20): tile lines that state their loop's extent, `tile l16 =8:[2,2,2,1]`.
Builds runs/exp-extent/dataset from runs/std/dataset with every tile line rewritten."""
import math
import re
import shutil
from pathlib import Path

TILE = re.compile(r"^(tile [^\n=]*) =\[([0-9,]+)\]$", re.M)
STATED = re.compile(r"^(tile [^\n=]*) =(\d+):\[([0-9,]+)\]$", re.M)

def add(text: str) -> str:
    return TILE.sub(lambda m: f"{m[1]} ={math.prod(map(int, m[2].split(',')))}:[{m[2]}]", text)

def strip(text: str) -> str:
    """The codec's text again: the stated extent dropped (a wrong one is left to TVM's repair check)."""
    return STATED.sub(lambda m: f"{m[1]} =[{m[3]}]", text)

if __name__ == "__main__":
    import datasets
    src, out = Path("runs/std/dataset"), Path("runs/exp-extent/dataset")
    dsd = datasets.load_from_disk(str(src))
    new = dsd.map(lambda r: {"prompt": add(r["prompt"]), "completion": add(r["completion"])})
    new.save_to_disk(str(out))
    for name in ("workloads.jsonl", "build.json", "README.md"):
        shutil.copy(src / name, out / name)
    r = new["train"][0]
    assert strip(r["completion"]) == dsd["train"][0]["completion"]
    print(r["completion"][:600])
