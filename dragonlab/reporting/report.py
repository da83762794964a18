"""The replication report: does a small task-trained model beat search and general-purpose LLMs,
and does RL beat SFT? Computed on held-out workloads, by the protocol in docs/report.md.

`run_report(run_dir)` reads `RUN/dataset` and the models `RUN/sft/model` and `RUN/rl/model`
(those present), and writes `RUN/report/`:

    attempts-<system>.jsonl   k attempts per held-out prompt (attempts.Attempt, one per line)
    turns-<system>.jsonl      multi-turn refinement from each construction prompt
    baselines.jsonl           unscheduled, random, dlight, MetaSchedule at each budget, seeded search
    together.jsonl            per workload, the systems' best-of-k and MetaSchedule's kernels timed side by side
    rl-vs-sft.jsonl           RL vs SFT: both models' kernels at each prompt timed side by side
    search/, seeded-<system>/ the searches' record stores (every measured candidate) and wall times
    machine.jsonl             per session that judged: when, where, a calibration kernel's latency
    report.json               every metric, with the files it was computed from
    report.html               one self-contained page: tables, plotly figures, the paper's numbers
    figures/                  the page's figures as PNG files (when Chromium is there for kaleido)

Every file is appended to as work is judged: a killed report resumes where it stopped.

How the numbers are defined (every figure is over held-out prompts or workloads):
- Per-attempt correctness: the share of single scripts that decode, apply, validate, build,
  run and match the unscheduled kernel (`attempts.summary`), per task, with the stage where the
  others stopped. pass@k: the unbiased estimator 1 - C(n-c, k) / C(n, k) over n attempts with
  c correct, averaged over prompts.
- Speedups are against the unscheduled kernel (timed once per workload in this run), or against
  the prompt's input script (refinement, timed in the same batch as the attempt). An incorrect
  kernel counts as speedup 1 (one would keep the unscheduled kernel) in "geomean"; "geomean
  correct" is over correct kernels only.
- fast_p: the share of attempts that are correct and faster than p x the baseline.
- Best-of-k: per workload, the fastest correct kernel among a system's k construction attempts.
  "vs MetaSchedule at N": the geometric mean over workloads of (best-of-k latency / latency of
  the best of the search's first N candidates); below 1 the model is faster. Both kernels, with
  every other system's and budget's of the workload, are timed again side by side in this run
  (`Evaluator.time_together`: in turn, 3 rounds, the median of each), so the ratio does not
  carry the minutes between their first judgements. Workloads where the system has no correct
  kernel are counted apart.
- Trials to match: the first N at which the search's recorded best latency is at most the
  model's best-of-k latency; its wall time is the search's, prorated by N.
- Wall time to match: the seconds the model (writing and judging its attempts in order) and the
  search (prorated per trial) took to a kernel within 10% of MetaSchedule at the largest budget.
- Model-seeded search: `seeded_budget` trials (the model's kernels among them) against plain
  search at every budget.
- RL vs SFT: `dragonlab.reporting.compare.compare_models` on the first `compared_draws` attempts
  at each prompt, paired sample by sample (both kernels timed again side by side; noise threshold
  from SFT's kernel against itself; sign tests over attempts and over workloads).

The numbers are computed by `dragonlab.reporting.metrics` from what was judged; the report is a
`dragonlab.reporting.results.Report` (frozen dataclasses, read by attribute), report.json its JSON.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import statistics
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from dragonlab.core.errors import InputError, one_line
from dragonlab.core.jsonl import append_lines, read_json, read_lines, write_atomic
from dragonlab.core.progress import progress_bar
from dragonlab.evaluation.evaluate import Evaluation
from dragonlab.learn.attempts import (Attempt, ModelWriter, Replay, best_attempts, judge_turns_again, per_workload,
                                      read_attempts, read_turns, refine_in_turns, write_and_evaluate)
from dragonlab.learn.prompts import CONSTRUCTION, REFINEMENT
from dragonlab.reporting.compare import ModelComparison, compare_models, script_digest
from dragonlab.reporting.config import ReportConfig
from dragonlab.reporting.metrics import metrics
from dragonlab.reporting.results import LLMSystem, Report

__all__ = ["ReportConfig", "Report", "run_report", "read_report", "held_out_rows", "llm_system", "model_systems"]


# --- the run -------------------------------------------------------------------------------------

FIGURES = "figures"  # RUN/report/figures: the page's figures as PNG files, written from report.json


def held_out_rows(dsd, config: ReportConfig) -> dict[str, list[dict]]:
    """Per split: one construction prompt per workload and its first `refinement_per_workload`
    refinement prompts (`attempts.per_workload`), each with its "index" in the split."""
    return {split: per_workload(dsd[split], config.refinement_per_workload) for split in config.splits if split in dsd}


def llm_system(model: str) -> str:
    """The system name (and file-name part) of an LLM: `llm-` and its model name, made safe."""
    return "llm-" + re.sub(r"[^A-Za-z0-9._-]+", "_", model)


def model_systems(run: Path) -> dict[str, Path]:
    return {name: run / name / "model" for name in ("sft", "rl") if (run / name / "model").is_dir()}


def gone_systems(out: Path, present: dict[str, Path]) -> dict[str, tuple[str, str]]:
    """The models a report at `out` was started with whose directories are gone now, {name: (its
    recorded path, digest)}: their attempts are read from the report's files (a report restored
    from its parts, the RL weights not kept), and anything left for them to write is an error
    (`_GoneModel`)."""
    meta = out / "run.json"
    if not meta.is_file():
        return {}
    run = read_json(meta)
    models, digests = (run.get("models"), run.get("digests")) if isinstance(run, dict) else (None, None)
    if not isinstance(models, dict) or not isinstance(digests, dict):
        return {}
    return {name: (path, digests.get(name)) for name, path in models.items()
            if name not in present and isinstance(path, str) and not Path(path).is_dir()}


def replayed_systems(replay: Path, config: ReportConfig) -> dict[str, tuple[str, str]]:
    """The models whose attempts a report at `replay` holds, {name: (path, digest)} as its
    run.json recorded them; it must have been made with `config`."""
    from dragonlab.core.rundir import completed, recorded

    meta = replay / "run.json"
    run = read_json(meta) if meta.is_file() else None
    if not (isinstance(run, dict) and isinstance(run.get("config"), dict) and isinstance(run.get("models"), dict)):
        raise InputError(f"{meta}: not a report's run.json (no config and models); --replay takes a report directory")
    theirs, ours = completed(ReportConfig, run["config"]), recorded(config)
    if theirs != ours:
        differ = sorted(k for k, v in ours.items() if theirs.get(k) != v)
        raise InputError(f"{meta} was made with other settings ({', '.join(differ)}); replay it with its own")
    names = [n for n in ("sft", "rl") if n in run["models"] and (replay / f"attempts-{n}.jsonl").is_file()]
    if not names:
        raise InputError(f"{replay} holds no model's attempts (attempts-sft.jsonl, attempts-rl.jsonl) to judge again")
    return {n: (run["models"][n], run.get("digests", {}).get(n)) for n in names}


class _GoneModel:
    """The writer of a model that is gone: asked to write, it says which model to put back."""

    def __init__(self, name: str, path: str, digest: str | None, meta: Path):
        self.name, self.path, self.digest, self.meta = name, path, digest, meta

    def write(self, prompts, *, n: int, seed: int):
        raise InputError(f"the report's {self.name} model is gone from {self.path} (recorded in {self.meta}, "
                         f"digest {str(self.digest)[:12]}...) and it has attempts left to write: put that model "
                         f"back at {self.path} to resume")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def run_report(run: str | os.PathLike, config: ReportConfig = ReportConfig(), *, llm=None, evaluator=None,
               replay: str | os.PathLike | None = None, other_machine: bool = False, progress: bool = True) -> Report:
    """Judge every system on the held-out prompts of `run/dataset`, write `run/report/` and return
    the report (report.json's content). `llm`: an `llm.ChatModel`; its attempts are the system
    `llm-<model>`, in their own file, so LLMs can join a report one at a time. `evaluator`: an
    open `Evaluator` on the dataset's target to judge with, left open (its workers are warm and
    its cache holds every kernel of the report, for what the caller judges next); by default
    one is made and closed here. `replay`: another report's directory, made with the same
    settings, whose models' attempts and turns are judged again here, the same scripts in the
    same batches (`attempts.Replay`), instead of the models writing (a report judged on a busy
    machine, or over sessions on machines of different speed, judged again on one idle machine);
    its models need not be on this machine. Its searches (`search/`, `seeded-*/`) are carried
    over as they ran; everything that is timed (attempts, turns, baselines, side by side) is
    timed again here. An unfinished report first times a calibration kernel and refuses a
    machine of another speed than the one it started on (`machine.check`, `machine.jsonl`) unless
    `other_machine`."""
    import torch

    from dragonlab.core.rundir import claim
    from dragonlab.evaluation import machine
    from dragonlab.evaluation.evaluate import EvalConfig, Evaluator
    from dragonlab.learn import dataset, models

    run = Path(run)
    out = run / "report"
    dsd, workloads = dataset.load(run / "dataset")
    rows = held_out_rows(dsd, config)
    if not rows:
        raise InputError(f"{run / 'dataset'} has none of the held-out splits {list(config.splits)}")
    target = dataset.target_of(dsd, list(rows))
    if evaluator is not None:  # a caller's evaluator judges and times as the report says
        if evaluator.target.name != target:
            raise InputError(f"the evaluator judges {evaluator.target.name}, the dataset's held-out splits {target}")
        if evaluator.config.measure != config.measure:
            raise InputError(f"the evaluator times with {evaluator.config.measure}, the report's config says "
                             f"{config.measure}: make it with EvalConfig(measure=config.measure)")
    held = list(dict.fromkeys(r["workload"] for split in rows.values() for r in split))
    # The models that write here (`present`), and every model system of the report with its path
    # and digest as run.json records them (`recorded`): a replayed report's, or a gone one's too
    if replay is not None:
        replay = Path(replay).resolve()
        present, recorded = {}, replayed_systems(replay, config)
    else:
        present = model_systems(run)
        recorded = {n: (str(p.resolve()), models.digest(p)) for n, p in present.items()} | gone_systems(out, present)
    fresh = not (out / "run.json").exists()
    # A report resumes only with the settings it was started with (its files hold k attempts each, ...)
    claim(out, config, run / "dataset", models={n: path for n, (path, _) in recorded.items()},
          digests={n: digest for n, (_, digest) in recorded.items()},
          **({"replay": str(replay)} if replay is not None else {}))
    if replay is not None and fresh:  # its searches, as it ran them; their kernels are timed again
        for d in (*replay.glob("seeded-*"), replay / "search"):
            if d.is_dir():
                shutil.copytree(d, out / d.name)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    attempts: dict[str, list[Attempt]] = {}
    turns: dict[str, list[dict]] = {}
    with (contextlib.nullcontext(evaluator) if evaluator is not None else
          Evaluator(target, EvalConfig(measure=config.measure))) as evaluator:
        if not (out / "report.json").exists():  # judging to do: on the machine the report started on
            calibration = machine.check(out / "machine.jsonl", evaluator, other_machine=other_machine)
            if progress and "ratio_to_first" in calibration:
                print(f"this machine runs the calibration kernel at {calibration['ratio_to_first']:.2f}x the speed "
                      f"of the report's first session")
        every = [r for split in rows.values() for r in split]
        for name in [n for n in ("sft", "rl") if n in recorded]:
            if replay is not None:
                writer = Replay(read_attempts(replay / f"attempts-{name}.jsonl"), rows,
                                replay / f"attempts-{name}.jsonl")
            elif name not in present:
                if progress:
                    print(f"{name}: its model is gone from {recorded[name][0]}; its attempts are read from {out}")
                writer = _GoneModel(name, *recorded[name], out / "run.json")
            else:
                model, tokenizer = models.load(present[name])
                writer = ModelWriter(model, tokenizer, temperature=config.temperature,
                                     max_new_tokens=config.max_new_tokens, rows=every, workloads=workloads,
                                     constrained=config.constrained)
            with writer:
                attempts[name] = _attempts(writer, evaluator, rows, workloads, out / f"attempts-{name}.jsonl",
                                           config, progress)
                turns[name] = _turns(writer, evaluator, rows, workloads, attempts[name],
                                     out / f"turns-{name}.jsonl", config, progress,
                                     replay=replay / f"turns-{name}.jsonl" if replay is not None else None)
        if llm is not None:
            name = llm_system(llm.model)
            attempts[name] = _attempts(llm, evaluator, rows, workloads, out / f"attempts-{name}.jsonl", config,
                                       progress)

        stored = stored_searches(run / "dataset")
        if stored is not None and progress:
            print(f"MetaSchedule baselines: the searches stored in {stored}, as far as each went")
        base = _baselines(evaluator, [workloads[k] for k in held], target, attempts, out, config, progress, stored)
        base["_together"] = _side_by_side(evaluator, [workloads[k] for k in held], attempts, base, config,
                                          out / "together.jsonl", progress)
        rl_vs_sft = None
        if "sft" in attempts and "rl" in attempts:
            rl_vs_sft = _rl_vs_sft(evaluator, workloads, attempts, config.compared_draws, out / "rl-vs-sft.jsonl",
                                   progress)

    report = replace(
        metrics(attempts, turns, base, config, held, rl_vs_sft), workload_names={k: workloads[k].name for k in held},
        run=str(run), target=target,
        models={n: str(present[n]) if n in present else recorded[n][0] for n in attempts if n in recorded},
        llm=LLMSystem(llm_system(llm.model), llm.base_url, llm.model) if llm else None,
        stored_search=str(stored) if stored is not None else None,
        sources=tuple(sorted(p.name for p in out.iterdir()
                             if p.suffix == ".jsonl" or (p.is_dir() and p.name != FIGURES))))
    write_atomic(out / "report.json", json.dumps(report.to_json(), indent=1) + "\n")
    from dragonlab.reporting.report_html import write_html, write_pngs

    write_html(report, out / "report.html")
    try:
        write_pngs(report, out / FIGURES)
    except Exception as e:  # no Chrome for kaleido: the HTML report has the same figures
        print(f"figures not exported as PNG ({one_line(e)})")
    return report


def _attempts(writer, evaluator, rows, workloads, path: Path, config: ReportConfig, progress: bool) -> list[Attempt]:
    """k attempts at each prompt, `best_of` at construction prompts."""
    out = []
    for split, split_rows in rows.items():
        for task, n in ((CONSTRUCTION, config.construction_attempts), (REFINEMENT, config.k)):
            task_rows = [r for r in split_rows if r["task"] == task]
            if task_rows:
                out += write_and_evaluate(writer, evaluator, task_rows, workloads, split=split, n=n, out=path,
                                          seed=config.seed, per_batch=max(1, 8 // n), progress=progress)
    return out


def _turns(writer, evaluator, rows, workloads, attempts: list[Attempt], path: Path,
           config: ReportConfig, progress: bool, replay: Path | None = None) -> list[dict]:
    """From each construction prompt's first attempt, `turns` rounds of refinement
    (`refine_in_turns`; one line per (prompt, turn) in `path`; `replay`: another report's turns
    file, its scripts judged again): each turn's latency, turn 0 the first attempt's."""
    first = {(a.split, a.index): a for a in attempts if a.sample == 0 and a.task == CONSTRUCTION}
    if replay is not None:
        recorded = read_turns(replay)
        wanted = {(*p, turn) for p in first for turn in range(1, config.turns + 1)}
        if not wanted <= recorded.keys():
            raise InputError(f"{replay} lacks {len(wanted - recorded.keys())} of the {len(wanted)} turns to judge again")
        done = judge_turns_again(evaluator, {k: recorded[k] for k in wanted}, workloads, path=path, progress=progress)
    else:
        row_of = {(split, r["index"]): r for split, split_rows in rows.items() for r in split_rows}
        done = refine_in_turns(writer, evaluator, {p: row_of[p] for p in first}, workloads,
                               {p: a0 if a0.evaluation.latency else None for p, a0 in first.items()},
                               turns=config.turns, path=path, seed=config.seed, progress=progress)
    out = []
    for (split, index), a0 in first.items():
        out.append({"split": split, "index": index, "turn": 0, "workload": a0.workload, "task": CONSTRUCTION,
                    "latency": a0.evaluation.latency})
        for turn in range(1, config.turns + 1):
            d = done[(split, index, turn)]
            out.append({k: d[k] for k in ("split", "index", "turn", "workload", "task")}
                       | {"latency": Evaluation.from_json(d["evaluation"]).latency})
    return out


def stored_searches(dataset_dir: str | os.PathLike) -> Path | None:
    """The corpus whose benchmark gave the dataset its splits, when it is on this machine: its
    stored searches of the benchmark's workloads are the report's MetaSchedule baselines."""
    from dragonlab.core.jsonl import read_json
    from dragonlab.search.benchmark import find

    build = Path(dataset_dir) / "build.json"
    bench = ((read_json(build) if build.is_file() else {}).get("config") or {}).get("benchmark")
    corpus = Path(bench).parent if bench else None
    return corpus if corpus is not None and find(corpus) == Path(bench) else None


def _baselines(evaluator, held: list, target: str, attempts: dict[str, list[Attempt]], out: Path,
               config: ReportConfig, progress: bool, stored: Path | None = None) -> dict[str, dict[str, dict]]:
    """{system: {workload key: {"latency", "stage", "script", ...}}} for every baseline, judged
    now or read back from baselines.jsonl. `stored`: a corpus whose searches are taken instead of
    searching (`baselines.search`)."""
    from dragonlab.core import codec
    from dragonlab.search import baselines

    path = out / "baselines.jsonl"
    done: dict[str, dict[str, dict]] = defaultdict(dict)
    if path.exists():
        for system, key, d in read_lines(path, lambda d: (d["system"], d["workload"], d)):
            done[system][key] = d

    def judge(system: str, scripts: dict[str, list[str]], extra: dict | None = None) -> None:
        todo = [(w, s) for w in held if w.key not in done[system] for s in scripts.get(w.key, [])]
        if not todo:
            return
        evaluations = evaluator.evaluate_many(todo, progress=False)
        best: dict[str, tuple] = {}
        every: dict[str, list] = defaultdict(list)
        for (w, s), e in zip(todo, evaluations):
            every[w.key].append({"script": s, "evaluation": e.to_json()})
            prev = best.get(w.key)
            if prev is None or (e.latency or math.inf) < (prev[1].latency or math.inf):
                best[w.key] = (s, e)
        for key, (s, e) in best.items():  # the kernel that counts, and every one judged
            done[system][key] = {"system": system, "workload": key, "script": s, "evaluation": e.to_json(),
                                 "judged": every[key] if len(every[key]) > 1 else None,
                                 **((extra or {}).get(key) or {})}
        append_lines(path, (done[system][key] for key in best))

    judge("unscheduled", {w.key: [baselines.unscheduled_script()] for w in held})
    judge(f"random best-of-{config.k}",
          {w.key: baselines.random_scripts(w, target, config.k, seed=config.seed + 1) for w in held})
    from dragonlab.search.defaults import default_script

    judge("dlight", {w.key: [default_script(w, target) or baselines.unscheduled_script()] for w in held})

    top = max(config.budgets)
    plain = baselines.search(held, target, top, out / "search", seed=config.seed, population=config.population,
                             measure=config.measure, stored=stored, progress=progress)
    for n in sorted(config.budgets):
        picks = {k: run.best_within(n) for k, run in plain.items()}
        judge(f"metaschedule@{n}", {k: [codec.encode(p[1])] for k, p in picks.items() if p},
              {k: {"recorded_latency": p[0]} for k, p in picks.items() if p})
    search_info = {k: {"seconds": r.seconds, "latencies": r.latencies} for k, r in plain.items()}

    seeded_by = "rl" if "rl" in attempts else "sft" if "sft" in attempts else None
    if seeded_by:
        seeds = defaultdict(list)
        for a in attempts[seeded_by]:
            if a.task == CONSTRUCTION and a.evaluation.latency:
                seeds[a.workload].append((codec.decode(a.script), a.evaluation.latencies))
        # compared with plain search at every budget: only where that search went to the largest
        trials = config.seeded_trials
        full = [w for w in held if plain[w.key].budget is None or plain[w.key].budget >= top]
        runs = baselines.search(full, target, trials, out / f"seeded-{seeded_by}", seeds=dict(seeds),
                                seed=config.seed, population=config.population, measure=config.measure,
                                progress=progress)
        picks = {k: r.best_within(trials) for k, r in runs.items()}
        judge(f"{seeded_by}-seeded metaschedule@{trials}", {k: [codec.encode(p[1])] for k, p in picks.items() if p},
              {k: {"seeded": runs[k].seeded} for k in picks})
    result = {system: dict(by_key) for system, by_key in done.items()}
    result["_search"] = search_info
    if seeded_by:  # its seconds per trial clock a stored search, which kept no wall time
        result["_seeded"] = {k: {"seconds": r.seconds, "trials": len(r.latencies) - r.seeded}  # searched
                             for k, r in runs.items()}
    return result


def _side_by_side(evaluator, held: list, attempts: dict[str, list[Attempt]], base: dict, config: ReportConfig,
                  path: Path, progress: bool, chunk: int = 8) -> dict[str, dict[str, float | None]]:
    """{workload key: {system: latency}}: per workload, each system's best-of-k construction
    kernel (the fastest correct one as judged) and every baseline's kernel but the unscheduled
    one (MetaSchedule's at every budget, the seeded search's, random best-of-k's, dlight's), timed
    again side by side (`Evaluator.time_together`, 3 rounds; a latency is the median over
    rounds). Their ratios are the report's "best-of-k vs MetaSchedule" and each baseline's
    against search: latencies judged minutes apart differed up to 5x on a 2-core VM, a slow state
    of the machine that timing in turn cancels. Appended to `path` a few workloads at a time; a
    rerun times only the workloads missing, missing a system (an LLM that joined the report, a
    baseline timed apart by an older version) or whose kernel of a system changed (its attempts
    judged again chose another best): the last line of a workload is its timing."""
    # workload -> its last line: {"latencies": {system: ...}, "scripts": {system: digest}} (older lines: no digests)
    done = dict(read_lines(path, lambda d: (d["workload"], d))) if path.exists() else {}
    scripts: dict[str, dict[str, str]] = defaultdict(dict)  # workload -> system -> script
    for name, group in attempts.items():
        for key, a in best_attempts(group, CONSTRUCTION, config.k).items():
            if a is not None:
                scripts[key][name] = a.script
    for system in (s for s in base if not s.startswith("_") and s != "unscheduled"):
        for key, d in base[system].items():
            if (d.get("evaluation") or {}).get("latencies"):
                scripts[key][system] = d["script"]
    digests = {key: {system: script_digest(script) for system, script in by.items()} for key, by in scripts.items()}

    def stale(key: str) -> bool:
        line = done.get(key, {"latencies": {}})
        if not digests[key].keys() <= line["latencies"].keys():
            return True
        timed = line.get("scripts")
        return timed is not None and any(timed.get(system) != d for system, d in digests[key].items())

    todo = [w for w in held if scripts.get(w.key) and stale(w.key)]
    with progress_bar(total=len(todo), desc="side by side", unit="workload", progress=progress) as bar:
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            unique = [list(dict.fromkeys(scripts[w.key].values())) for w in part]
            timed = evaluator.time_together([(w, u) for w, u in zip(part, unique)], progress=False)
            lines = [{"workload": w.key, "latencies": {system: lat[u.index(script)]
                                                       for system, script in scripts[w.key].items()},
                      "scripts": digests[w.key]}
                     for w, u, lat in zip(part, unique, timed)]
            append_lines(path, lines)
            done.update((d["workload"], d) for d in lines)
            bar.update(len(part))
    return {key: {system: statistics.median(t) if t else None for system, t in line["latencies"].items()}
            for key, line in done.items()}


def _rl_vs_sft(evaluator, workloads, attempts, draws: int, record: Path, progress: bool) -> ModelComparison:
    """RL against SFT on the first `draws` attempts at each prompt, paired by sample; the side by
    side timings appended to `record` as they are made (a rerun times only what it lacks)."""
    first = {name: [a for a in attempts[name] if a.sample < draws] for name in ("sft", "rl")}
    return compare_models(evaluator, workloads, first["sft"], first["rl"], record=record, progress=progress)


def read_report(path: str | os.PathLike) -> Report:
    """The report of a report directory (or its report.json), as written by `run_report`."""
    return Report.read(path)
