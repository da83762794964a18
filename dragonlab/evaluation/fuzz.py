"""Adversarial input for the evaluator: every byte a model could emit must end as an Evaluation.

Real scripts (sampled from MetaSchedule design spaces of quick workloads) are mutated the ways a
small model goes wrong, and the ways an adversary would try: random bytes, truncation, reordered
or dropped lines, references to variables that do not exist, out-of-range, zero, negative,
non-dividing and huge decisions, unknown instruction kinds, a duplicated post-processing part,
and `unsafe_*` primitives. `fuzz` counts the stages they stopped at, host crashes (an exception
that escaped the evaluator) and worker processes left alive after the evaluator closed.

The red-team mutations (`dragonlab.evaluation.redteam`, named in `RED_TEAM`) write what an attacker who
knows the grammar would write; `fuzz` also reports the ones that must be refused and were not,
and whether injected code ran (it would create `redteam.MARKER`).
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from dragonlab.core.codec import encode
from dragonlab.core.errors import InputError
from dragonlab.core.progress import progress_bar
from dragonlab.core.targets import TargetSpec
from dragonlab.core.workloads import Workload
from dragonlab.evaluation.redteam import MARKER, RED_TEAM, Mutant, red_team_mutation
from dragonlab.search.explore import sample_traces

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
    _unknown_kind, _duplicate_postproc, _unsafe, _clean, *map(red_team_mutation, RED_TEAM))}

_COLUMNS = ("decode", "apply", "validate", "build", "run", "check", "time", "ok")  # evaluate.STAGES, then "ok"


@dataclass
class FuzzReport:
    evaluated: int = 0
    host_crashes: int = 0  # exceptions that escaped the evaluator
    leaked_workers: int = 0  # worker processes alive after the evaluator closed
    stages: Counter = field(default_factory=Counter)
    by_mutation: dict = field(default_factory=lambda: defaultdict(Counter))
    by_case: dict = field(default_factory=lambda: defaultdict(Counter))  # "mutation:case" -> stages ("crash" too)
    crashes: Counter = field(default_factory=Counter)  # "mutation: ExceptionType" -> count
    unrefused: list = field(default_factory=list)  # (mutation:case, stage, reason): must-refuse, judged correct
    marker_touched: bool = False  # MARKER exists after the run: injected code ran

    def summary(self) -> str:
        """The last line `dragonlab fuzz` prints."""
        return (f"evaluated: {self.evaluated}, host crashes: {self.host_crashes}, "
                f"leaked workers: {self.leaked_workers}")

    def table(self, columns=_COLUMNS) -> str:
        """Stages per mutation, as `dragonlab fuzz` prints them; findings; the summary line last."""
        rows = [f"{'mutation':20s} " + " ".join(f"{c:>8s}" for c in columns)]
        rows += [f"{name:20s} " + " ".join(f"{counts.get(c, 0):8d}" for c in columns)
                 for name, counts in sorted(self.by_mutation.items())]
        rows.append(f"{'all':20s} " + " ".join(f"{self.stages.get(c, 0):8d}" for c in columns))
        rows += [f"host crash: {what} x{n}" for what, n in sorted(self.crashes.items())]
        rows += [f"not refused: {case} reached {stage}" for case, stage, _ in self.unrefused]
        if self.marker_touched:
            rows.append(f"injected code ran: {MARKER} was created")
        rows.append(self.summary())
        return "\n".join(rows)


def make_cases(n: int, seed: int, bases: list[tuple[Workload, str]], mutations=None) -> list[tuple[str, Workload, str]]:
    """The `n` (mutation, workload, script) triples `fuzz` evaluates: deterministic for a seed."""
    names = list(MUTATIONS) if mutations is None else list(mutations)
    unknown = [m for m in names if m not in MUTATIONS]
    if unknown or not names:
        raise InputError(f"unknown mutations {unknown}; choose from {', '.join(MUTATIONS)}")
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        w, script = rng.choice(bases)
        name = rng.choice(names)
        cases.append((name, w, MUTATIONS[name](rng, script)))
    return cases


def fuzz(n: int, seed: int, evaluator, bases: list[tuple[Workload, str]], *, chunk: int = 50,
         progress: bool = True, mutations=None) -> FuzzReport:
    """Evaluate `n` mutated scripts. The caller closes the evaluator and counts leaks.

    `mutations`: names of MUTATIONS to draw from (default all; `RED_TEAM` for the red team).
    Any exception escaping the evaluator is a host crash, RecursionError and MemoryError included
    (both are Exceptions): a chunk that raises is evaluated again item by item to find which."""
    cases = make_cases(n, seed, bases, mutations)
    Path(MARKER).unlink(missing_ok=True)
    report = FuzzReport()
    for start in progress_bar(range(0, n, chunk), progress=progress, unit="chunk"):
        batch = cases[start:start + chunk]
        try:
            results = list(evaluator.evaluate_many([(w, s) for _, w, s in batch], progress=False))
            if len(results) != len(batch):
                raise RuntimeError(f"evaluate_many returned {len(results)} results for {len(batch)} scripts")
        except Exception:  # find which items escape, one by one
            results = []
            for _, w, s in batch:
                try:
                    results.append(evaluator.evaluate(w, s))
                except Exception as e:
                    results.append(e)
        for (name, _, script), e in zip(batch, results):
            report.evaluated += 1
            case = f"{name}:{script.case}" if isinstance(script, Mutant) else None
            if not hasattr(e, "stage"):
                report.host_crashes += 1
                report.crashes[f"{name}: {type(e).__name__ if isinstance(e, BaseException) else 'no Evaluation'}"] += 1
                if case:
                    report.by_case[case]["crash"] += 1
                continue
            report.stages[e.stage] += 1
            report.by_mutation[name][e.stage] += 1
            if case:
                report.by_case[case][e.stage] += 1
                if script.refuse and e.stage in ("time", "ok"):
                    report.unrefused.append((case, e.stage, e.reason))
    report.marker_touched = Path(MARKER).exists()
    return report
