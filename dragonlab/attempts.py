"""Attempts: a model's scripts for a dataset split, each judged by the evaluator.

Per-attempt correctness is the paper's headline number: every generated script counts, the
ones that do not even decode included. An `Attempt` keeps the script and its `Evaluation`;
`summary` counts them per task with the stage each one stopped at.

The speedup of a correct attempt is measured against a reference timed in the same run: the
unscheduled kernel for construction, the prompt's input script for refinement.

`sample_and_evaluate` appends one JSON line per attempt to a file as soon as the attempt is
judged, and skips the attempts the file already holds: killed, it resumes where it stopped.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from dragonlab.progress import progress_bar

from dragonlab.evaluate import STAGES, Evaluation, Evaluator
from dragonlab.prompts import REFINEMENT, TASKS
from dragonlab.workloads import Workload


@dataclass(frozen=True)
class Attempt:
    split: str
    index: int  # the example's row in its split
    sample: int  # which of the n attempts at that example
    task: str
    workload: str  # Workload.key
    name: str
    script: str  # what the model wrote, untrusted
    evaluation: Evaluation
    ending: str | None = None  # constrained decoding: "eos", "dead end" or "length" (constrain.py)

    def to_json(self) -> dict:
        d = asdict(self)
        d["evaluation"] = self.evaluation.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Attempt":
        e = dict(d["evaluation"])
        e["repairs"] = tuple(e.get("repairs") or ())
        e["latencies"] = tuple(e["latencies"]) if e.get("latencies") else None
        return cls(**{**d, "evaluation": Evaluation(**e)})


def evaluate_attempts(evaluator: Evaluator, workloads: dict[str, Workload], rows: list[dict],
                      scripts: list[list[str]], *, split: str = "", progress: bool = False,
                      endings: list[list[str]] | None = None) -> list[Attempt]:
    """Judge `scripts[i][s]`, the s-th attempt at `rows[i]`. For refinement rows the prompt's
    input script is evaluated in the same batch and is the speedup's reference. `endings`: how
    each constrained attempt ended, in the shape of `scripts`."""
    refs: dict[int, float | None] = {}
    refinement = [i for i, row in enumerate(rows) if row["task"] == REFINEMENT]
    if refinement:
        inputs = evaluator.evaluate_many([(workloads[rows[i]["workload"]], rows[i]["input_script"]) for i in refinement],
                                         progress=False)
        refs = {i: e.latency for i, e in zip(refinement, inputs)}
    items, where = [], []
    for i, (row, attempts) in enumerate(zip(rows, scripts)):
        for s, script in enumerate(attempts):
            items.append((workloads[row["workload"]], script))
            where.append((i, s))
    evaluations = evaluator.evaluate_many(items, reference_latencies=[refs.get(i) for i, _ in where],
                                          progress=progress)
    return [Attempt(split, rows[i].get("index", i), s, rows[i]["task"], rows[i]["workload"], rows[i].get("name", ""),
                    scripts[i][s], e, endings[i][s] if endings else None) for (i, s), e in zip(where, evaluations)]


def sample_and_evaluate(model, tokenizer, evaluator: Evaluator, dataset, workloads: dict[str, Workload], *,
                        split: str = "test", n: int = 4, temperature: float = 0.8, max_new_tokens: int = 512,
                        limit: int | None = None, batch_size: int = 8, out: str | os.PathLike | None = None,
                        seed: int = 0, progress: bool = True, constrained: bool = False) -> list[Attempt]:
    """n attempts at each example of `dataset[split]` (the first `limit`), generated, judged and
    appended to `out` (a JSON-lines file) example by example; attempts already there are kept.
    `constrained`: generate with `dragonlab.constrain` (every script decodes and applies)."""
    from dragonlab.constrain import for_rows
    from dragonlab.models import generate

    if split not in dataset:
        raise KeyError(f"the dataset has no {split!r} split (it has {', '.join(dataset)})")
    rows = [dict(row, index=i) for i, row in enumerate(dataset[split])][:limit]
    done = read_attempts(out) if out and Path(out).exists() else []
    have = {(a.split, a.index) for a in done}
    todo = [row for row in rows if (split, row["index"]) not in have]
    attempts = [a for a in done if a.split == split and a.index < len(rows)]
    per_batch = max(1, batch_size // n)
    constraint = for_rows(tokenizer, todo, workloads) if constrained and todo else None
    try:
        with progress_bar(total=len(rows), initial=len(rows) - len(todo), unit="example",
                          desc=f"attempts ({split})", progress=progress) as bar:
            for start in range(0, len(todo), per_batch):
                chunk = todo[start:start + per_batch]
                scripts = generate(model, tokenizer, [row["prompt"] for row in chunk], n=n, temperature=temperature,
                                   max_new_tokens=max_new_tokens, batch_size=batch_size,
                                   seed=seed + chunk[0]["index"], constraint=constraint)
                endings = constraint.take_endings(n) if constraint else None
                judged = evaluate_attempts(evaluator, workloads, chunk, scripts, split=split, endings=endings)
                if out:
                    with open(out, "a") as f:  # append-only: an interrupted run keeps every judged attempt
                        f.writelines(json.dumps(a.to_json()) + "\n" for a in judged)
                attempts.extend(judged)
                bar.update(len(chunk))
    finally:  # the constraint's worker process
        if constraint is not None:
            constraint.close()
    return sorted(attempts, key=lambda a: (a.index, a.sample))


def read_attempts(path: str | os.PathLike) -> list[Attempt]:
    out = []
    with open(path) as f:
        for no, line in enumerate(f, 1):
            if not line.endswith("\n"):
                break  # a line cut by a kill: the attempt is redone
            try:
                out.append(Attempt.from_json(json.loads(line)))
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{path}:{no}: not an attempt record ({type(e).__name__}: {e})") from None
    return out


def summary(attempts: list[Attempt]) -> list[dict]:
    """One row per task (and 'all'): attempts, correct and exact rates, and where the rest stopped."""
    rows = []
    for task in (*TASKS, "all"):
        group = [a for a in attempts if task in ("all", a.task)]
        if not group:
            continue
        stages = Counter(a.evaluation.stage for a in group)
        speedups = sorted(a.evaluation.speedup for a in group if a.evaluation.correct and a.evaluation.speedup)
        ended = Counter(a.ending for a in group)
        rows.append({"task": task, "attempts": len(group),
                     "correct": sum(a.evaluation.correct for a in group) / len(group),
                     "exact": sum(a.evaluation.exact for a in group) / len(group),
                     "repaired": sum(a.evaluation.correct and a.evaluation.repaired for a in group),
                     "median_speedup": speedups[len(speedups) // 2] if speedups else None,
                     "dead_ends": ended["dead end"], "cut_at_length": ended["length"],
                     "stopped_at": {s: stages[s] for s in STAGES if stages[s]}})
    return rows


def format_summary(rows: list[dict]) -> str:
    head = f"{'task':<13}{'attempts':>9}{'correct':>9}{'exact':>8}{'speedup':>9}  stopped at (stage: attempts)"
    lines = [head]
    for r in rows:
        speedup = f"{r['median_speedup']:.2f}x" if r["median_speedup"] else "-"
        stopped = ", ".join(f"{s}: {c}" for s, c in r["stopped_at"].items()) or "none"
        if r.get("dead_ends") or r.get("cut_at_length"):  # constrained: scripts ended before the model ended them
            stopped += f"; cut short: {r['dead_ends']} dead ends, {r['cut_at_length']} at the token limit"
        lines.append(f"{r['task']:<13}{r['attempts']:>9}{r['correct']:>9.1%}{r['exact']:>8.1%}{speedup:>9}  {stopped}")
    return "\n".join(lines)

