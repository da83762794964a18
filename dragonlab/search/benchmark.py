"""The fixed benchmark: the workloads every report judges, chosen once and stored as keys.

A benchmark file (JSON, `benchmark.json` beside a shipped corpus) names workloads by key, the
structural hash that records and datasets join on, in three splits:

- `test`: unseen shapes of families seen in training (two per generator family, one per op
  family of the extracted networks that has at least three tasks);
- `test_family`: half of the workloads of each *held-out* family, none of which is ever trained
  on; one held-out family occurs only in an extracted network;
- `validation`: the same kinds again (one unseen shape per family, the other half of each
  held-out family), for choosing checkpoints and recipes without touching the test splits.

`search` gives every judged workload (test and test_family) the trials its stored MetaSchedule
search runs to: 512 for one workload per family (24 at most), 128 for the others.

`define` draws the splits from a suite deterministically (by `sha256(seed/key)` within each op
family), so the file can be checked against the code that wrote it; `load` validates a file
and names the field that is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import JsonFormatError, read_json, write_atomic
from dragonlab.core.workloads import GENERATORS, Workload

SPLITS = ("test", "test_family", "validation")
# conv1d and gemv are near relatives of trained families (conv2d, matmul); MobileNet's fused
# convolution + batch norm + ReLU6 (a clip) occurs only in an extracted network.
HELD_OUT = ("conv1d", "gemv", "model:fused_conv2d_subtract_divide_expand_dims_multiply_expand_dims_add_tir_clip")
SEARCH_LONG, SEARCH_LONG_TRIALS, SEARCH_TRIALS = 24, 512, 128


class BenchmarkFormatError(InputError):
    """A benchmark file that is not what `save` writes; names the file and the field."""


@dataclass(frozen=True)
class Benchmark:
    name: str
    doc: str
    held_out_families: tuple[str, ...]
    splits: dict[str, tuple[str, ...]]  # split -> workload keys
    names: dict[str, str]  # workload key -> name, for people reading the file
    search: dict[int, tuple[str, ...]]  # trials -> the judged workloads whose search runs to them

    def split_of(self, key: str) -> str | None:
        """The benchmark split of a workload key, or None for a training workload."""
        return self._index.get(key)

    @cached_property  # built once: dataset builds ask it for every workload
    def _index(self) -> dict[str, str]:
        return {k: s for s in SPLITS for k in self.splits[s]}

    def judged(self) -> tuple[str, ...]:
        """The keys a report judges: test, then test_family."""
        return self.splits["test"] + self.splits["test_family"]

    def search_trials(self, key: str) -> int:
        """The trials the stored search of a judged workload runs to."""
        return next(t for t, keys in self.search.items() if key in keys)

    def to_json(self) -> dict:
        return {"name": self.name, "doc": self.doc, "held_out_families": list(self.held_out_families),
                "splits": {s: [{"key": k, "name": self.names[k]} for k in self.splits[s]] for s in SPLITS},
                "search": {str(t): list(keys) for t, keys in self.search.items()}}


def op_family(w: Workload) -> str:
    """A generator's family, or for an extracted task its fused ops without TVM's counters:
    `model:resnet/fused_conv2d1_..._add1_relu` -> `model:fused_conv2d_..._add_relu`."""
    if w.family in GENERATORS:
        return w.family
    task = w.family.split("/", 1)[-1]
    return "model:" + re.sub(r"(?<=[a-z])\d+(?=_|$)", "", task)


def _order(keys: list[str], seed: int) -> list[str]:
    return sorted(keys, key=lambda k: hashlib.sha256(f"{seed}/{k}".encode()).hexdigest())


def define(workloads: list[Workload], *, name: str, held_out: tuple[str, ...] = HELD_OUT,
           seed: int = 0) -> Benchmark:
    """The benchmark splits of a suite (see the module docstring for the rules)."""
    by_family: dict[str, list[str]] = defaultdict(list)
    for w in workloads:
        by_family[op_family(w)].append(w.key)
    missing = [f for f in held_out if f not in by_family]
    if missing:
        raise InputError(f"held-out family {missing[0]!r} has no workload in the suite")
    splits: dict[str, list[str]] = {s: [] for s in SPLITS}
    firsts = []
    for family in sorted(by_family):
        keys = _order(by_family[family], seed)
        if family in held_out:
            half = (len(keys) + 1) // 2
            splits["test_family"] += keys[:half]
            splits["validation"] += keys[half:]
            firsts.append(keys[0])
        elif family in GENERATORS:
            splits["test"] += keys[:2]
            splits["validation"] += keys[2:3]
            firsts.append(keys[0])
        elif len(keys) >= 3:
            splits["test"] += keys[:1]
            splits["validation"] += keys[1:2] if len(keys) >= 4 else []
            firsts.append(keys[0])
    names = {w.key: w.name for w in workloads}
    doc = (f"The {name} benchmark: {len(splits['test'])} test workloads (unseen shapes of trained families), "
           f"{len(splits['test_family'])} of the held-out families {', '.join(held_out)}, and "
           f"{len(splits['validation'])} validation workloads of both kinds. Drawn by dragonlab's Benchmark.define "
           f"(seed {seed}); every report judges test and test_family unless told otherwise.")
    long = tuple(firsts[:SEARCH_LONG])
    rest = tuple(k for k in splits["test"] + splits["test_family"] if k not in long)
    return Benchmark(name, doc, tuple(held_out), {s: tuple(v) for s, v in splits.items()},
                     {k: names[k] for v in splits.values() for k in v}, {SEARCH_LONG_TRIALS: long, SEARCH_TRIALS: rest})


def save(benchmark: Benchmark, path: str | os.PathLike) -> None:
    write_atomic(path, json.dumps(benchmark.to_json(), indent=1) + "\n")


def load(path: str | os.PathLike) -> Benchmark:
    """A benchmark file, every field checked; BenchmarkFormatError names the file and field."""
    try:
        d = read_json(path)
    except JsonFormatError as e:
        raise BenchmarkFormatError(str(e)) from None

    def bad(field: str, why: str) -> BenchmarkFormatError:
        return BenchmarkFormatError(f"{path}: field {field!r}: {why}")

    if not isinstance(d, dict):
        raise bad("<root>", "expected a JSON object")
    for field, kind in (("name", str), ("doc", str), ("held_out_families", list), ("splits", dict),
                        ("search", dict)):
        if not isinstance(d.get(field), kind):
            raise bad(field, f"missing or not {'a string' if kind is str else 'an ' + kind.__name__}")
    splits, names, seen = {}, {}, set()
    for s in SPLITS:
        rows = d["splits"].get(s)
        if not isinstance(rows, list):
            raise bad(f"splits.{s}", "missing or not a list")
        keys = []
        for i, row in enumerate(rows):
            if not (isinstance(row, dict) and isinstance(row.get("key"), str) and row["key"].isdigit()
                    and isinstance(row.get("name"), str)):
                raise bad(f"splits.{s}[{i}]", "expected {\"key\": decimal digits, \"name\": string}")
            if row["key"] in seen:
                raise bad(f"splits.{s}[{i}]", f"workload {row['key']} is in two splits")
            seen.add(row["key"])
            keys.append(row["key"])
            names[row["key"]] = row["name"]
        splits[s] = tuple(keys)
    unknown = set(d["splits"]) - set(SPLITS)
    if unknown:
        raise bad("splits", f"unknown split {sorted(unknown)[0]!r}; known: {', '.join(SPLITS)}")
    judged = set(splits["test"]) | set(splits["test_family"])
    search, searched = {}, set()
    for trials, keys in d["search"].items():
        if not (trials.isdigit() and int(trials) > 0 and isinstance(keys, list)):
            raise bad(f"search.{trials}", "expected positive trials mapped to a list of workload keys")
        for i, k in enumerate(keys):
            if k not in judged or k in searched:
                raise bad(f"search.{trials}[{i}]", f"{k!r} is not a test or test_family workload, or listed twice")
            searched.add(k)
        search[int(trials)] = tuple(keys)
    if searched != judged:
        raise bad("search", f"no trials for workload {sorted(judged - searched)[0]}")
    if not all(isinstance(f, str) for f in d["held_out_families"]):
        raise bad("held_out_families", "expected a list of strings")
    return Benchmark(d["name"], d["doc"], tuple(d["held_out_families"]), splits, names, search)


def find(records_path: str | os.PathLike) -> Path | None:
    """The benchmark file shipped beside a record store, if any."""
    path = Path(records_path) / "benchmark.json"
    return path if path.is_file() else None
