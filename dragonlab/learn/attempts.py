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

import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import append_lines, read_lines
from dragonlab.core.progress import progress_bar
from dragonlab.core.workloads import Workload
from dragonlab.evaluation.evaluate import STAGES, Evaluation, Evaluator
from dragonlab.learn.prompts import CONSTRUCTION, REFINEMENT, TASKS, refinement_from


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
    # wall seconds spent on it: its share of its batch's writing and judging (write_and_evaluate);
    # the two overlap, so the shares add up to more than the batch's wall time
    seconds: float | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["evaluation"] = self.evaluation.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Attempt":
        return cls(**{**d, "evaluation": Evaluation.from_json(d["evaluation"])})


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
    # An empty script is the unscheduled kernel: correct, and no attempt at all (a refusal, a
    # reply with nothing in it). It counts as writing nothing, not as a correct schedule.
    evaluations = [Evaluation(e.workload, e.target, "decode", "empty script: nothing was written")
                   if not script.strip() else e for (_, script), e in zip(items, evaluations)]
    return [Attempt(split, rows[i].get("index", i), s, rows[i]["task"], rows[i]["workload"], rows[i].get("name", ""),
                    scripts[i][s], e, endings[i][s] if endings else None) for (i, s), e in zip(where, evaluations)]


class ModelWriter:
    """A local model as a script writer: `write(prompts, n=, seed=)` gives n scripts per prompt.
    `constrained`: through `dragonlab.learn.constrain` (every script decodes and applies); then
    `endings(n)` says how each script of the last call ended. Close it (or use `with`)."""

    def __init__(self, model, tokenizer, *, temperature: float = 0.8, max_new_tokens: int = 512,
                 batch_size: int = 8, rows: list[dict] = (), workloads: dict | None = None, constrained: bool = False):
        from dragonlab.learn.constrain import for_rows

        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.max_new_tokens, self.batch_size = temperature, max_new_tokens, batch_size
        self.constraint = for_rows(tokenizer, rows, workloads) if constrained and rows else None

    def write(self, prompts: list[str], *, n: int, seed: int) -> list[list[str]]:
        from dragonlab.learn.models import generate

        return generate(self.model, self.tokenizer, prompts, n=n, temperature=self.temperature,
                        max_new_tokens=self.max_new_tokens, batch_size=self.batch_size, seed=seed,
                        constraint=self.constraint)

    def add_prompts(self, rows: list[dict], workloads: dict) -> None:
        """Let the constraint follow scripts for more prompts (rows with "prompt" and "workload")."""
        if self.constraint is not None:
            self.constraint.modules.update({row["prompt"]: workloads[row["workload"]].mod for row in rows})

    def endings(self, n: int) -> list[list[str]] | None:
        return self.constraint.take_endings(n) if self.constraint else None

    def close(self) -> None:
        if self.constraint is not None:  # its worker process
            self.constraint.close()

    def __enter__(self) -> "ModelWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def per_workload(rows, refinement: int | None) -> list[dict]:
    """One construction prompt per workload (a workload's construction rows share it) and its
    first `refinement` refinement prompts (None: all), each row with its "index" in `rows`: every
    workload weighs alike, as in the report. More draws at a prompt are more samples (n)."""
    taken: Counter = Counter()
    out = []
    for i, row in enumerate(rows):
        cap = refinement if row["task"] == REFINEMENT else 1
        if cap is None or taken[(row["task"], row["workload"])] < cap:
            taken[(row["task"], row["workload"])] += 1
            out.append(dict(row, index=i))
    return out


def sample_and_evaluate(model, tokenizer, evaluator: Evaluator, dataset, workloads: dict[str, Workload], *,
                        split: str = "test", n: int = 4, temperature: float = 0.8, max_new_tokens: int = 512,
                        limit: int | None = None, batch_size: int = 8, out: str | os.PathLike | None = None,
                        seed: int = 0, progress: bool = True, constrained: bool = False,
                        refinement_per_workload: int | None = None) -> list[Attempt]:
    """n attempts at each example of `dataset[split]` (the first `limit`), generated, judged and
    appended to `out` (a JSON-lines file) example by example; attempts already there are kept.
    `constrained`: generate with `dragonlab.learn.constrain` (every script decodes and applies).
    `refinement_per_workload`: only one construction prompt per workload and this many of its
    refinement prompts (`per_workload`); None: every example."""
    if split not in dataset:
        raise InputError(f"the dataset has no {split!r} split (it has {', '.join(dataset)})")
    rows = (per_workload(dataset[split], refinement_per_workload)
            if refinement_per_workload is not None
            else [dict(row, index=i) for i, row in enumerate(dataset[split])])[:limit]
    todo = pending(rows, split, out, n)
    with ModelWriter(model, tokenizer, temperature=temperature, max_new_tokens=max_new_tokens,
                     batch_size=batch_size, rows=todo, workloads=workloads, constrained=constrained) as writer:
        return write_and_evaluate(writer, evaluator, rows, workloads, split=split, n=n, out=out, seed=seed,
                                  per_batch=max(1, batch_size // n), progress=progress)


def pending(rows: list[dict], split: str, out: str | os.PathLike | None, n: int) -> list[dict]:
    """The rows (with their "index") that the attempts file `out` does not hold all n attempts for."""
    have = judged(out, split, rows, n)
    return [row for row in rows if row["index"] not in have]


def judged(out: str | os.PathLike | None, split: str, rows: list[dict], n: int) -> dict[int, list[Attempt]]:
    """The attempts file's n attempts (samples 0..n-1) at each of `rows` (examples of `split`,
    with their "index") that has them all, the last line of a sample winning: an example with
    fewer (its batch cut short by a kill, or a run that asked for fewer) is written again whole,
    and its new lines win. An example with a sample numbered n or more was written by a run that
    asked for more attempts per example; it is refused, naming the file, rather than mixed in."""
    if not out or not Path(out).exists():
        return {}
    indices = {row["index"] for row in rows}
    latest = {(a.index, a.sample): a for a in read_attempts(out) if a.split == split and a.index in indices}
    over = sorted(index for index, sample in latest if sample >= n)
    if over:
        raise InputError(f"{out}: example {over[0]} of {split!r} has an attempt numbered "
                         f"{max(s for i, s in latest if i == over[0])}, so it was written with more than the {n} "
                         f"attempts per example asked for now; write to a new file")
    by_index: dict[int, list[Attempt]] = {}
    for (index, _), a in sorted(latest.items()):
        by_index.setdefault(index, []).append(a)
    return {index: group for index, group in by_index.items() if len(group) == n}


def write_and_evaluate(writer, evaluator: Evaluator, rows: list[dict], workloads: dict[str, Workload], *,
                       split: str, n: int, out: str | os.PathLike | None = None, seed: int = 0, per_batch: int = 1,
                       progress: bool = True) -> list[Attempt]:
    """n attempts by `writer` (anything with `write(prompts, n=, seed=)`: a `ModelWriter`, an
    `llm.ChatModel`) at each row (a dataset row with its "index" in `split`), judged and appended
    to `out` batch by batch; rows `out` already holds n attempts for are not attempted again
    (`judged`). The seed of a batch is `seed` + its first row's index, so a run resumed after
    whole batches writes what an unbroken one would."""
    done = judged(out, split, rows, n)
    attempts = [a for row in rows for a in done.get(row["index"], [])]
    todo = [row for row in rows if row["index"] not in done]
    chunks = [todo[start:start + per_batch] for start in range(0, len(todo), per_batch)]
    with progress_bar(total=len(rows), initial=len(rows) - len(todo), unit="example",
                      desc=f"attempts ({split})", progress=progress) as bar, ThreadPoolExecutor(1) as judge:

        def record(chunk: list[dict], judging) -> None:
            judged = judging.result()
            if hasattr(writer, "seconds"):  # a writer that knows each attempt's time (a replay: as recorded)
                judged = [replace(a, seconds=writer.seconds(a)) for a in judged]
            if out:  # append-only: an interrupted run keeps every judged attempt
                append_lines(out, (a.to_json() for a in judged))
            attempts.extend(judged)
            bar.update(len(chunk))

        # The model writes batch i+1 while batch i is built and checked; its kernels are timed
        # after the writing, never beside it (the evaluator's timing lock).
        previous = None
        for chunk in chunks:
            with evaluator.timing_lock:
                start = time.perf_counter()
                scripts = writer.write([row["prompt"] for row in chunk], n=n, seed=seed + chunk[0]["index"])
                endings = writer.endings(n) if hasattr(writer, "endings") else None
                writing = time.perf_counter() - start
            if previous:
                record(*previous)
            previous = chunk, judge.submit(_timed, evaluator, workloads, chunk, scripts, split=split,
                                           endings=endings, writing=writing)
        if previous:
            record(*previous)
    return sorted(attempts, key=lambda a: (a.index, a.sample))


def _timed(evaluator, workloads, rows, scripts, *, split: str, endings, writing: float) -> list[Attempt]:
    """`evaluate_attempts`, each attempt with its share of the batch's writing and judging time."""
    start = time.perf_counter()
    judged = evaluate_attempts(evaluator, workloads, rows, scripts, split=split, endings=endings)
    share = (writing + time.perf_counter() - start) / max(1, len(judged))
    return [replace(a, seconds=share) for a in judged]


def best_attempts(group: list[Attempt], task: str, k: int) -> dict[str, Attempt | None]:
    """Per workload: the attempt with the fastest correct kernel among the first k at its prompts
    of `task` (None: none is correct)."""
    best: dict[str, Attempt | None] = {}
    for a in group:
        if a.task != task or a.sample >= k:
            continue
        t, b = a.evaluation.latency, best.setdefault(a.workload, None)
        if t and (b is None or t < b.evaluation.latency):
            best[a.workload] = a
    return best


def refine_in_turns(writer, evaluator: Evaluator, rows: dict[tuple[str, int], dict], workloads: dict[str, Workload],
                    start: dict[tuple[str, int], Attempt | None], *, turns: int, path: str | os.PathLike,
                    seed: int = 0, progress: bool = True) -> dict[tuple[str, int, int], dict]:
    """Multi-turn refinement: at each construction row (`rows`: {(split, index): row}), `turns`
    rounds in which `writer` is asked for a faster version of the best correct script so far
    (`start`: the attempt a row begins from; while there is none, the construction prompt is asked
    again). A turn's scripts, one per row (seed: `seed` + 1000 x turn + index), are judged in one
    batch and appended to `path`, a line per (row, turn): {"split", "index", "turn", "workload",
    "task", "script", "evaluation"}. Lines `path` already holds are kept, so a killed run resumes;
    returns them all, {(split, index, turn): line}."""
    done = read_turns(path)
    best = dict(start)
    wanted = [(split, index, turn) for turn in range(1, turns + 1) for split, index in rows]
    with progress_bar(total=len(wanted), initial=sum(w in done for w in wanted), unit="script", desc="turns",
                      progress=progress) as bar:
        for turn in range(1, turns + 1):
            todo, scripts = [], []
            for (split, index), row in rows.items():
                if (split, index, turn) in done:
                    continue
                b = best.get((split, index))
                prompt = refinement_from(row["prompt"], b.script) if b else row["prompt"]
                if hasattr(writer, "add_prompts"):
                    writer.add_prompts([dict(row, prompt=prompt)], workloads)
                scripts.append(writer.write([prompt], n=1, seed=seed + 1000 * turn + index)[0][0])
                if hasattr(writer, "endings"):
                    writer.endings(1)
                todo.append((split, index))
                bar.update()
            evaluations = evaluator.evaluate_many([(workloads[rows[p]["workload"]], s) for p, s in zip(todo, scripts)],
                                                  progress=False) if todo else []
            lines = [{"split": split, "index": index, "turn": turn, "workload": rows[(split, index)]["workload"],
                      "task": REFINEMENT if best.get((split, index)) else CONSTRUCTION, "script": script,
                      "evaluation": e.to_json()} for (split, index), script, e in zip(todo, scripts, evaluations)]
            append_lines(path, lines)
            done.update(((d["split"], d["index"], turn), d) for d in lines)
            for (split, index), row in rows.items():
                d, b = done[(split, index, turn)], best.get((split, index))
                e = Evaluation.from_json(d["evaluation"])
                if e.latency and (b is None or e.latency < b.evaluation.latency):
                    best[(split, index)] = Attempt(split, index, turn, REFINEMENT, row["workload"], row.get("name", ""),
                                                   d["script"], e)
    return done


def judge_turns_again(evaluator: Evaluator, recorded: dict[tuple[str, int, int], dict],
                      workloads: dict[str, Workload], *, path: str | os.PathLike,
                      progress: bool = True) -> dict[tuple[str, int, int], dict]:
    """The turns `refine_in_turns` recorded (`read_turns`), their scripts judged again, turn by
    turn in one batch each as they were written, and appended to `path` in the same shape. Lines
    `path` already holds are kept, so a killed run resumes; returns them all."""
    done = read_turns(path)
    with progress_bar(total=len(recorded), initial=sum(k in done for k in recorded), unit="script",
                      desc="turns judged again", progress=progress) as bar:
        for turn in sorted({k[2] for k in recorded}):
            todo = [recorded[k] for k in sorted(recorded) if k[2] == turn and k not in done]
            evaluations = evaluator.evaluate_many([(workloads[d["workload"]], d["script"]) for d in todo],
                                                  progress=False) if todo else []
            lines = [{k: d[k] for k in ("split", "index", "turn", "workload", "task", "script")}
                     | {"evaluation": e.to_json()} for d, e in zip(todo, evaluations)]
            append_lines(path, lines)
            done.update(((d["split"], d["index"], d["turn"]), d) for d in lines)
            bar.update(len(lines))
    return done


class Replay:
    """A writer that writes what was recorded: at each prompt of `rows` (dataset rows with their
    "index", per split), the scripts of `attempts` at that split and index, in sample order, and
    how each ended, and (`seconds`) each one's recorded share of the time to write and judge it. A
    report judges another report's scripts again with it (`dragonlab report --replay`); asked for a
    prompt with fewer recorded attempts than wanted, it names `source`."""

    def __init__(self, attempts: list[Attempt], rows: dict[str, list[dict]], source: str | os.PathLike):
        self.source = source
        by_prompt: dict[str, tuple[str, dict]] = {}
        for split, split_rows in rows.items():
            for row in split_rows:
                by_prompt.setdefault(row["prompt"], (split, row))
        self.by_prompt = by_prompt
        self.recorded: dict[tuple[str, int], dict[int, Attempt]] = {}
        for a in attempts:  # the last line of a sample wins, as it does for a resumed run
            self.recorded.setdefault((a.split, a.index), {})[a.sample] = a
        self.last: list[list[str | None]] = []

    def write(self, prompts: list[str], *, n: int, seed: int) -> list[list[str]]:
        out, self.last = [], []
        for prompt in prompts:
            split, row = self.by_prompt[prompt]
            samples = self.recorded.get((split, row["index"]), {})
            got = [samples[s] for s in range(n) if s in samples]
            where = f"{split} prompt {row['index']} (workload {row['workload']})"
            if len(got) < n:
                raise InputError(f"{self.source} holds {len(got)} of the {n} attempts to judge again at {where}")
            if any(a.workload != row["workload"] for a in got):
                raise InputError(f"{self.source}: its attempts at {where} are at another workload: "
                                 "a report of another dataset")
            out.append([a.script for a in got])
            self.last.append([a.ending for a in got])
        return out

    def endings(self, n: int) -> list[list[str | None]]:
        return self.last

    def seconds(self, attempt: Attempt) -> float | None:
        """The attempt's share of the writing and judging time when it was recorded: a replay
        judges again, it does not write, and the wall time a system took stays the one measured."""
        return self.recorded[(attempt.split, attempt.index)][attempt.sample].seconds

    def __enter__(self) -> "Replay":
        return self

    def __exit__(self, *exc) -> None:
        pass


def read_turns(path: str | os.PathLike) -> dict[tuple[str, int, int], dict]:
    """A turns file's lines (`refine_in_turns`), {(split, index, turn): line}, the last of a turn
    winning; a torn last line (a kill) is skipped."""
    return dict(read_lines(path, lambda d: ((d["split"], d["index"], d["turn"]), d))) if Path(path).exists() else {}


def read_attempts(path: str | os.PathLike) -> list[Attempt]:
    """The attempts of a file; a torn last line (a kill) is skipped, and its attempt is redone."""
    return list(read_lines(path, Attempt.from_json))


def summary(attempts: list[Attempt]) -> list[dict]:
    """One row per task (and 'all'): attempts, correct and exact rates, where the rest stopped, and
    how many were timed while other processes kept the cores busy."""
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
                     "stopped_at": {s: stages[s] for s in STAGES if stages[s]},
                     "contended": sum(a.evaluation.contended for a in group)})
    return rows


def format_summary(rows: list[dict]) -> str:
    head = f"{'task':<13}{'attempts':>9}{'correct':>9}{'exact':>8}{'speedup':>9}  stopped at (stage: attempts)"
    lines = [head]
    for r in rows:
        speedup = f"{r['median_speedup']:.2f}x" if r["median_speedup"] else "-"
        stopped = ", ".join(f"{s}: {c}" for s, c in r["stopped_at"].items()) or "none"
        if r.get("dead_ends") or r.get("cut_at_length"):  # constrained: scripts ended before the model ended them
            stopped += f"; cut short: {r['dead_ends']} dead ends, {r['cut_at_length']} at the token limit"
        if r.get("contended"):  # the evaluator saw other processes on the cores while it timed them
            stopped += f"; timed beside other work: {r['contended']} (their speedups are not to be trusted)"
        lines.append(f"{r['task']:<13}{r['attempts']:>9}{r['correct']:>9.1%}{r['exact']:>8.1%}{speedup:>9}  {stopped}")
    return "\n".join(lines)

