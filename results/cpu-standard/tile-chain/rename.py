"""Experiment (issue 20): do the models copy from the kernel when memory cannot help? The named
form's models write block names, and chains' first numbers, from memory of the training kernels
(`conv2d_nhwc` in a `conv2d_nchw` kernel). Here every train example comes COPIES times, each
with its blocks renamed at random (`block out(` -> `block tavoke(`, `get out` -> `get tavoke`,
`@out` -> `@tavoke`, in the kernel, the prompt's script and the completion alike): a name is
right only if it is copied from the prompt. Validation and test are left as they are, so the
model is judged on the kernels' own names.

    python rename.py [COPIES]    # runs/exp-named/dataset -> runs/exp-renamed/dataset (5 copies)

A renamed example comes back exactly with its names mapped back (checked for every copy).
"""
import random
import re
import shutil
import sys
from pathlib import Path

import datasets

sys.path.insert(0, str(Path(__file__).parent))
from transform import NAMED, SIGNATURE, dataset_dir, signatures  # noqa: E402

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def new_names(names: list[str], rng: random.Random, taken: set[str]) -> dict[str, str]:
    out = {}
    for name in names:
        while (fresh := "".join(rng.choices(SYLLABLES, k=rng.randint(2, 4)))) in taken:
            pass
        taken.add(fresh)
        out[name] = fresh
    return out


def rename(text: str, names: dict[str, str]) -> str:
    """Block names in a kernel's `block NAME(` lines and a named script's `get NAME` and `@NAME`."""
    text = SIGNATURE.sub(lambda m: f"block {names.get(m[1], m[1])}({m[2]})", text)
    text = re.sub(r"^get (\S+)$", lambda m: f"get {names.get(m[1], m[1])}", text, flags=re.M)
    return NAMED.sub(lambda m: "@" + names.get(m[1], m[1]), text)


if __name__ == "__main__":
    copies = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    src, out = dataset_dir("named"), dataset_dir("renamed")
    dsd = datasets.load_from_disk(str(src))

    def renamed(r, index):
        rng = random.Random(index)
        names = new_names(list(signatures(r["prompt"])), rng, set(re.findall(r"[A-Za-z_]\w*", r["prompt"])))
        back = {v: k for k, v in names.items()}
        new = {"prompt": rename(r["prompt"], names), "completion": rename(r["completion"], names)}
        assert rename(new["prompt"], back) == r["prompt"] and rename(new["completion"], back) == r["completion"]
        return new

    n = len(dsd["train"])
    train = datasets.concatenate_datasets(
        [dsd["train"].map(lambda r, i, c=c: renamed(r, i + c * n), with_indices=True) for c in range(copies)])
    new = datasets.DatasetDict({**dsd, "train": train.shuffle(seed=0)})
    new.save_to_disk(str(out))
    for name in ("workloads.jsonl", "build.json", "README.md"):
        shutil.copy(src / name, out / name)
    print(new["train"][0]["prompt"][:600], "\n...\n", new["train"][0]["completion"][:400])
