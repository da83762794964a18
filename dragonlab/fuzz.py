"""Adversarial input for the evaluator: every byte a model could emit must end as an Evaluation.

Real scripts (sampled from MetaSchedule design spaces of quick workloads) are mutated the ways a
small model goes wrong, and the ways an adversary would try: random bytes, truncation, reordered
or dropped lines, references to variables that do not exist, out-of-range, zero, negative,
non-dividing and huge decisions, unknown instruction kinds, a duplicated post-processing part,
and `unsafe_*` primitives. `fuzz` counts the stages they stopped at, host crashes (an exception
that escaped the evaluator) and worker processes left alive after the evaluator closed.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from dragonlab.progress import progress_bar

from dragonlab.codec import encode
from dragonlab.explore import sample_traces
from dragonlab.targets import TargetSpec
from dragonlab.workloads import Workload

_VAR = re.compile(r"\b([blv])(\d+)\b")
_INT = re.compile(r"(?<![\w.])-?\d+(?![\w.])")
_DECISION = re.compile(r"=(\[[^\]]*\]|-?\d+)")


def sample_scripts(workloads: list[Workload], target: TargetSpec, per_workload: int, seed: int) -> list:
    """(workload, script) pairs: random post-processed samples of each design space."""
    return [(w, encode(s.sch.trace)) for w in workloads
            for s in sample_traces(w, target, per_workload, seed + 1)]


def _random_bytes(rng, s):
    return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))).decode("latin-1")


def _truncate(rng, s):
    return s[: rng.randrange(len(s))]


def _swap_lines(rng, s):
    lines = s.splitlines()
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _drop_line(rng, s):
    lines = s.splitlines()
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def _wrong_reference(rng, s):
    hits = list(_VAR.finditer(s))
    m = rng.choice(hits)
    return s[: m.start()] + m.group(1) + str(rng.choice([int(m.group(2)) + 1, rng.randrange(1000), 10**6])) + s[m.end():]


def _decision(rng, s):
    hits = list(_DECISION.finditer(s))
    if not hits:
        return s
    m = rng.choice(hits)
    old = m.group(1)
    if old.startswith("["):
        n = old.count(",") + 1
        new = rng.choice([
            [rng.choice([0, -1, 3, 7, 10**12]) if k == rng.randrange(n) else 1 for k in range(n)],  # zero, negative, non-dividing
            [rng.randrange(1, 9) for _ in range(n + rng.choice([-1, 1]))],  # wrong length
            [2**40] * n,  # huge
        ])
        text = "[" + ",".join(map(str, new)) + "]"
    else:
        text = str(rng.choice([-5, 99, 10**9, -(10**12), 2**63]))  # categorical / compute location out of range
    return s[: m.start()] + "=" + text + s[m.end():]


def _huge_number(rng, s):
    hits = list(_INT.finditer(s))
    if not hits:
        return s
    m = rng.choice(hits)
    return s[: m.start()] + str(rng.choice([10**rng.randrange(10, 40), -(10**18), 2**64])) + s[m.end():]


def _unknown_kind(rng, s):
    lines = s.splitlines()
    lines.insert(rng.randrange(len(lines) + 1), rng.choice(["bogus b0", "exec b0", "import os", "__import__ x",
                                                            "get", "tile", "SampleBogus l1"]))
    return "\n".join(lines)


def _duplicate_postproc(rng, s):
    lines = s.splitlines()
    if "postproc" not in lines:
        return s + "\npostproc"
    start = lines.index("postproc")
    return "\n".join(lines + lines[start:])


def _unsafe(rng, s):
    lines = s.splitlines()
    blocks = sorted({m.group(0) for m in _VAR.finditer(s) if m.group(1) == "b"}) or ["b0"]
    b = rng.choice(blocks)
    line = rng.choice([f"set_dtype {b} 0 float16", f"set_dtype {b} 0 int8", f'hide_access {b} "read" [0]',
                       f'hide_access {b} "write" [0,1]'])
    lines.insert(rng.randrange(1, len(lines) + 1), line)
    return "\n".join(lines)


def _clean(rng, s):
    return s


MUTATIONS = {f.__name__.lstrip("_"): f for f in (
    _random_bytes, _truncate, _swap_lines, _drop_line, _wrong_reference, _decision, _huge_number,
    _unknown_kind, _duplicate_postproc, _unsafe, _clean)}


@dataclass
class FuzzReport:
    evaluated: int = 0
    host_crashes: int = 0  # exceptions that escaped the evaluator
    leaked_workers: int = 0  # worker processes alive after the evaluator closed
    stages: Counter = field(default_factory=Counter)
    by_mutation: dict = field(default_factory=lambda: defaultdict(Counter))


def fuzz(n: int, seed: int, evaluator, bases: list[tuple[Workload, str]], *, chunk: int = 50,
         progress: bool = True) -> FuzzReport:
    """Evaluate `n` mutated scripts. The caller closes the evaluator and counts leaks."""
    rng = random.Random(seed)
    names = list(MUTATIONS)
    cases = []
    for _ in range(n):
        w, script = rng.choice(bases)
        name = rng.choice(names)
        cases.append((name, w, MUTATIONS[name](rng, script)))
    report = FuzzReport()
    for start in progress_bar(range(0, n, chunk), progress=progress, unit="chunk"):
        batch = cases[start:start + chunk]
        try:
            results = evaluator.evaluate_many([(w, s) for _, w, s in batch], progress=False)
        except Exception:  # find which items escape, one by one
            results = []
            for _, w, s in batch:
                try:
                    results.append(evaluator.evaluate(w, s))
                except Exception:
                    results.append(None)
        for (name, _, _), e in zip(batch, results):
            report.evaluated += 1
            if e is None:
                report.host_crashes += 1
                continue
            report.stages[e.stage] += 1
            report.by_mutation[name][e.stage] += 1
    return report
