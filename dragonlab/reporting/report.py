"""The replication report: does a small task-trained model beat search and general-purpose LLMs,
and does RL beat SFT? Computed on held-out workloads, by the protocol in docs/report.md.

`run_report(run_dir)` reads `RUN/dataset` and the models `RUN/sft/model` and `RUN/rl/model`
(those present), and writes `RUN/report/`:

    attempts-<system>.jsonl   k attempts per held-out prompt (attempts.Attempt, one per line)
    turns-<system>.jsonl      multi-turn refinement from each construction prompt
    baselines.jsonl           unscheduled, random, dlight, MetaSchedule at each budget, seeded search
    search/, seeded-<system>/ the searches' record stores (every measured candidate) and wall times
    report.json               every metric, with the files it was computed from
    report.html               one self-contained page: tables, plotly figures, the paper's numbers

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
  the best of the search's first N candidates), both timed by the evaluator in this run; below
  1 the model is faster. Workloads where the system has no correct kernel are counted apart.
- Trials to match: the first N at which the search's recorded best latency is at most the
  model's best-of-k latency; its wall time is the search's, prorated by N.
- RL vs SFT: `dragonlab.reporting.compare` on the first attempt at each prompt (noise threshold measured
  by re-timing, sign test).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import append_lines, read_json, read_lines, write_atomic
from dragonlab.evaluation.evaluate import Evaluation
from dragonlab.learn.attempts import Attempt, ModelWriter, summary, write_and_evaluate
from dragonlab.learn.prompts import CONSTRUCTION, REFINEMENT, refinement_from

# The paper's self-reported figures (arXiv 2610.20980): an 8B model with LoRA, cuda targets,
# 54,116 workloads; shown beside ours with the scale noted, never mixed with them.
PAPER = {"scale": "8B model (LoRA), CUDA GPUs, 54,116 search workloads, 102 construction / 170 refinement test tasks",
         "correct construction": 0.9127, "correct refinement": 0.9201,
         "rl wins construction": "88/102", "rl wins refinement": "145/170"}


@dataclass(frozen=True)
class ReportConfig:
    k: int = field(default=8, metadata={"help": "attempts per held-out prompt (best-of-k, pass@k)"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature of every model"})
    splits: tuple[str, ...] = field(default=("test", "test_family"), metadata={"help": "held-out splits"})
    refinement_per_workload: int | None = field(default=2, metadata={"help": "refinement prompts per workload (None: all)"})
    budgets: tuple[int, ...] = field(default=(8, 32, 128, 512), metadata={"help": "MetaSchedule trial budgets"})
    turns: int = field(default=3, metadata={"help": "refinement turns after each construction attempt"})
    constrained: bool = field(default=False, metadata={"help": "constrained decoding for the local models"})
    max_new_tokens: int = field(default=768, metadata={"help": "tokens per script, at most"})
    seed: int = field(default=0, metadata={"help": "sampling and search seed"})
    p: tuple[float, ...] = field(default=(1.0, 1.2, 2.0), metadata={"help": "fast_p thresholds"})

    def __post_init__(self):
        if self.k < 1 or self.turns < 0 or not self.budgets or min(self.budgets) < 1:
            raise InputError(f"need k >= 1, turns >= 0 and budgets >= 1, got k={self.k}, turns={self.turns}, "
                             f"budgets={self.budgets}")


# --- metrics (pure) -----------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts of which c are correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def stats(speedups: list[float | None]) -> dict:
    """Geomean, mean and median of speedups where None (incorrect) counts as 1, and the geomean
    of the correct ones alone."""
    counted = [s if s else 1.0 for s in speedups]
    correct = [s for s in speedups if s]
    return {"n": len(speedups), "correct": len(correct), "geomean": geomean(counted),
            "mean": sum(counted) / len(counted) if counted else None,
            "median": statistics.median(counted) if counted else None, "geomean correct": geomean(correct)}


def fast_p(latencies: list[float | None], baselines: list[float | None], p: float) -> float | None:
    """Share of kernels that are correct (a latency) and faster than p x their baseline."""
    pairs = [(t, b) for t, b in zip(latencies, baselines) if b]
    return sum(bool(t) and b / t > p for t, b in pairs) / len(pairs) if pairs else None


# --- the run -------------------------------------------------------------------------------------

def held_out_rows(dsd, config: ReportConfig) -> dict[str, list[dict]]:
    """Per split: one construction prompt per workload (a workload's construction rows share it)
    and its first `refinement_per_workload` refinement prompts, each with its "index" in the split."""
    out = {}
    for split in config.splits:
        if split not in dsd:
            continue
        taken: dict[tuple, int] = defaultdict(int)
        rows = []
        for i, row in enumerate(dsd[split]):
            cap = 1 if row["task"] == CONSTRUCTION else config.refinement_per_workload
            if cap is None or taken[(row["task"], row["workload"])] < cap:
                taken[(row["task"], row["workload"])] += 1
                rows.append(dict(row, index=i))
        out[split] = rows
    return out


def llm_system(model: str) -> str:
    """The system name (and file-name part) of an LLM: `llm-` and its model name, made safe."""
    return "llm-" + re.sub(r"[^A-Za-z0-9._-]+", "_", model)


def model_systems(run: Path) -> dict[str, Path]:
    return {name: run / name / "model" for name in ("sft", "rl") if (run / name / "model").is_dir()}


def run_report(run: str | os.PathLike, config: ReportConfig = ReportConfig(), *, llm=None,
               progress: bool = True) -> dict:
    """Judge every system on the held-out prompts of `run/dataset`, write `run/report/` and return
    report.json's content. `llm`: an `llm.ChatModel`; its attempts are the system `llm-<model>`,
    in their own file, so LLMs can join a report one at a time."""
    import torch

    from dragonlab.core.rundir import claim
    from dragonlab.evaluation.evaluate import Evaluator
    from dragonlab.learn import dataset, models

    run = Path(run)
    out = run / "report"
    dsd, workloads = dataset.load(run / "dataset")
    rows = held_out_rows(dsd, config)
    if not rows:
        raise InputError(f"{run / 'dataset'} has none of the held-out splits {list(config.splits)}")
    target = dataset.target_of(dsd, list(rows))
    held = list(dict.fromkeys(r["workload"] for split in rows.values() for r in split))
    systems = model_systems(run)
    # A report resumes only with the settings it was started with (its files hold k attempts each, ...)
    claim(out, config, run / "dataset", models={n: str(p.resolve()) for n, p in systems.items()})
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    attempts: dict[str, list[Attempt]] = {}
    turns: dict[str, list[dict]] = {}
    with Evaluator(target) as evaluator:
        every = [r for split in rows.values() for r in split]
        for name, path in systems.items():
            model, tokenizer = models.load(path)
            with ModelWriter(model, tokenizer, temperature=config.temperature, max_new_tokens=config.max_new_tokens,
                             rows=every, workloads=workloads, constrained=config.constrained) as writer:
                attempts[name] = _attempts(writer, evaluator, rows, workloads, out / f"attempts-{name}.jsonl",
                                           config, progress)
                turns[name] = _turns(writer, evaluator, rows, workloads, attempts[name],
                                     out / f"turns-{name}.jsonl", config)
        if llm is not None:
            name = llm_system(llm.model)
            attempts[name] = _attempts(llm, evaluator, rows, workloads, out / f"attempts-{name}.jsonl", config,
                                       progress)

        base = _baselines(evaluator, [workloads[k] for k in held], target, attempts, out, config, progress)
        rl_vs_sft = None
        if "sft" in attempts and "rl" in attempts:
            rl_vs_sft = _rl_vs_sft(evaluator, workloads, rows, attempts)

    report = metrics(attempts, turns, base, config, held, rl_vs_sft)
    report["workload_names"] = {k: workloads[k].name for k in held}
    report["run"] = str(run)
    report["target"] = target
    report["models"] = {name: str(path) for name, path in systems.items()}
    report["llm"] = {"system": llm_system(llm.model), "base_url": llm.base_url, "model": llm.model} if llm else None
    report["sources"] = sorted(p.name for p in out.iterdir() if p.suffix == ".jsonl" or p.is_dir())
    write_atomic(out / "report.json", json.dumps(report, indent=1, default=_plain) + "\n")
    from dragonlab.reporting.report_html import write_html, write_pngs

    write_html(report, out / "report.html")
    try:
        write_pngs(report, out / "figures")
    except Exception as e:  # no Chrome for kaleido: the HTML report has the same figures
        print(f"figures not exported as PNG ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''})")
    return report


def _plain(x):
    if isinstance(x, (set, tuple)):
        return list(x)
    raise TypeError(f"not JSON: {type(x).__name__}")


def _attempts(writer, evaluator, rows, workloads, path: Path, config: ReportConfig, progress: bool) -> list[Attempt]:
    return [a for split, split_rows in rows.items() for a in write_and_evaluate(
        writer, evaluator, split_rows, workloads, split=split, n=config.k, out=path, seed=config.seed,
        per_batch=max(1, 8 // config.k), progress=progress)]


def _turns(writer, evaluator, rows, workloads, attempts: list[Attempt], path: Path,
           config: ReportConfig) -> list[dict]:
    """From each construction prompt's first attempt, `turns` rounds of refinement: each turn
    asks for a faster version of the best correct script so far (or, while there is none,
    tries the construction prompt again). One line per (prompt, turn) in `path`."""
    done = dict(read_lines(path, lambda d: ((d["split"], d["index"], d["turn"]), d))) if path.exists() else {}
    first = {(a.split, a.index): a for a in attempts if a.sample == 0 and a.task == CONSTRUCTION}
    out = []
    for (split, index), a0 in first.items():
        row = next(r for r in rows[split] if r["index"] == index)
        out.append({"split": split, "index": index, "turn": 0, "workload": a0.workload, "task": CONSTRUCTION,
                    "latency": a0.evaluation.latency})
        best = a0 if a0.evaluation.latency else None
        for turn in range(1, config.turns + 1):
            d = done.get((split, index, turn))
            if d is None:
                prompt = refinement_from(row["prompt"], best.script) if best else row["prompt"]
                if hasattr(writer, "add_prompts"):
                    writer.add_prompts([dict(row, prompt=prompt)], workloads)
                script = writer.write([prompt], n=1, seed=config.seed + 1000 * turn + index)[0][0]
                if hasattr(writer, "endings"):
                    writer.endings(1)
                e = evaluator.evaluate(workloads[row["workload"]], script)
                d = {"split": split, "index": index, "turn": turn, "workload": row["workload"],
                     "task": REFINEMENT if best else CONSTRUCTION, "script": script, "evaluation": e.to_json()}
                append_lines(path, [d])
            e = Evaluation.from_json(d["evaluation"])
            out.append({k: d[k] for k in ("split", "index", "turn", "workload", "task")} | {"latency": e.latency})
            if e.latency and (best is None or e.latency < best.evaluation.latency):
                best = Attempt(split, index, turn, REFINEMENT, row["workload"], row.get("name", ""), d["script"], e)
    return out


def _baselines(evaluator, held: list, target: str, attempts: dict[str, list[Attempt]], out: Path,
               config: ReportConfig, progress: bool) -> dict[str, dict[str, dict]]:
    """{system: {workload key: {"latency", "stage", "script", ...}}} for every baseline, judged
    now or read back from baselines.jsonl."""
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
    plain = baselines.search(held, target, top, out / "search", seed=config.seed, progress=progress)
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
        runs = baselines.search(held, target, top, out / f"seeded-{seeded_by}", seeds=dict(seeds),
                                seed=config.seed, progress=progress)
        picks = {k: r.best_within(top) for k, r in runs.items()}
        judge(f"{seeded_by}-seeded metaschedule@{top}", {k: [codec.encode(p[1])] for k, p in picks.items() if p},
              {k: {"seeded": runs[k].seeded} for k in picks})
    result = {system: dict(by_key) for system, by_key in done.items()}
    result["_search"] = search_info
    return result


def _rl_vs_sft(evaluator, workloads, rows, attempts) -> dict:
    from dragonlab.reporting.compare import compare, noise_threshold

    first = {name: [a for a in attempts[name] if a.sample == 0] for name in ("sft", "rl")}
    threshold, retimed = 0.0, 0
    for split, split_rows in rows.items():
        by_index = {r["index"]: r for r in split_rows}  # what noise_threshold looks attempts up in
        t, n = noise_threshold(evaluator, workloads, [a for a in first["sft"] if a.split == split], by_index)
        threshold, retimed = max(threshold, t), retimed + n
    return {"threshold": threshold, "retimed": retimed,
            "rows": [asdict(r) for r in compare(first["sft"], first["rl"], threshold)]}


# --- metrics over everything judged --------------------------------------------------------------

def metrics(attempts: dict[str, list[Attempt]], turns: dict[str, list[dict]], base: dict, config: ReportConfig,
            held: list[str], rl_vs_sft: dict | None) -> dict:
    unscheduled = {k: _latency(d) for k, d in base.get("unscheduled", {}).items()}
    budgets = sorted(config.budgets)
    ms = {n: {k: _latency(d) for k, d in base.get(f"metaschedule@{n}", {}).items()} for n in budgets}
    search = base.get("_search", {})
    out: dict = {"config": asdict(config), "paper": PAPER, "held_out_workloads": len(held), "systems": {},
                 "baselines": {}, "best_of_k": {}, "best_of_k_vs_metaschedule": {}, "trials_to_match": {}, "turns": {},
                 "best_of_k_curve": {}, "rl_vs_sft": rl_vs_sft, "audit": _audit(attempts, base)}
    for name, group in attempts.items():
        out["systems"][name] = _system(group, unscheduled, ms, config)
        best = _best_of(group, CONSTRUCTION, config.k)
        out["best_of_k"][name] = best
        out["best_of_k_vs_metaschedule"][name] = _versus(best, ms, held)
        out["trials_to_match"][name] = _to_match(best, search)
        out["best_of_k_curve"][name] = _curve(group, unscheduled, config.k)
    for name, rows in turns.items():
        out["turns"][name] = _turn_curve(rows, unscheduled, config.turns)
    for system, by_key in base.items():
        if system.startswith("_"):
            continue
        lat = [_latency(by_key.get(k, {})) for k in held]
        ref = [unscheduled.get(k) for k in held]
        out["baselines"][system] = {
            "workloads": len(held), "correct": sum(bool(t) for t in lat) / len(held),
            "speedup_vs_unscheduled": stats([b / t if t and b else None for t, b in zip(lat, ref)]),
            "fast_p_vs_unscheduled": {str(p): fast_p(lat, ref, p) for p in config.p},
            "vs_metaschedule": {str(n): _ratio({k: _latency(by_key.get(k, {})) for k in held}, ms[n], held)
                                for n in budgets},
            "per_workload": {k: {"latency": _latency(by_key.get(k, {})),
                                 "stage": (by_key.get(k) or {}).get("evaluation", {}).get("stage")} for k in held}}
        if system.startswith("random"):
            out["best_of_k_vs_metaschedule"][system] = out["baselines"][system]["vs_metaschedule"]
    seeded = [s for s in base if "seeded" in s]
    if seeded:
        top = max(budgets)
        s = {k: _latency(d) for k, d in base[seeded[0]].items()}
        out["seeded_search"] = {"system": seeded[0], "trials": top, "vs_search_alone": _ratio(s, ms[top], held),
                                "seeded_kernels": {k: d.get("seeded") for k, d in base[seeded[0]].items()}}
    out["search_seconds"] = {k: v.get("seconds") for k, v in search.items()}
    return out


def _latency(d: dict) -> float | None:
    lat = (d.get("evaluation") or {}).get("latencies")
    return statistics.median(lat) if lat else None


def _system(group: list[Attempt], unscheduled: dict, ms: dict, config: ReportConfig) -> dict:
    out = {"summary": summary(group)}
    for task in (CONSTRUCTION, REFINEMENT, "all"):
        g = [a for a in group if task in ("all", a.task)]
        if not g:
            continue
        by_prompt = defaultdict(list)
        for a in g:
            by_prompt[(a.split, a.index)].append(a.evaluation.correct)
        n = min(len(v) for v in by_prompt.values())
        lat = [a.evaluation.latency for a in g]
        ref = [unscheduled.get(a.workload) for a in g]
        m = {"attempts": len(g), "prompts": len(by_prompt), "correct": sum(a.evaluation.correct for a in g) / len(g),
             "pass@k": {str(k): sum(pass_at_k(len(v), sum(v), k) for v in by_prompt.values()) / len(by_prompt)
                        for k in (1, 2, 4, 8, 16) if k <= n},
             "speedup_vs_unscheduled": stats([b / t if t and b else None for t, b in zip(lat, ref)]),
             "fast_p": {"unscheduled": {str(p): fast_p(lat, ref, p) for p in config.p}}}
        for budget, by_key in ms.items():
            m["fast_p"][f"metaschedule@{budget}"] = {str(p): fast_p(lat, [by_key.get(a.workload) for a in g], p)
                                                     for p in config.p}
        if task == REFINEMENT:
            inputs = [a.evaluation.reference_latency if a.evaluation.latency else None for a in g]
            m["fast_p"]["input script"] = {str(p): fast_p(lat, inputs, p) for p in config.p}
            m["speedup_vs_input"] = stats([a.evaluation.speedup for a in g])
        out[task] = m
    return out


def _best_of(group: list[Attempt], task: str, k: int) -> dict[str, float | None]:
    """Per workload: the fastest correct kernel among the first k attempts at its prompts of `task`."""
    best: dict[str, float | None] = {}
    for a in group:
        if a.task != task or a.sample >= k:
            continue
        t = a.evaluation.latency
        best.setdefault(a.workload, None)
        if t and (best[a.workload] is None or t < best[a.workload]):
            best[a.workload] = t
    return best


def _ratio(lat: dict, ref: dict, held: list[str]) -> dict:
    pairs = [(lat.get(k), ref.get(k)) for k in held]
    both = [t / r for t, r in pairs if t and r]
    return {"geomean_latency_ratio": geomean(both), "workloads": len(both),
            "no_correct_kernel": sum(not t for t, _ in pairs), "no_search_kernel": sum(not r for _, r in pairs)}


def _versus(best: dict, ms: dict, held: list[str]) -> dict:
    return {str(n): _ratio(best, by_key, held) for n, by_key in ms.items()}


def _to_match(best: dict, search: dict) -> dict:
    from dragonlab.search.baselines import SearchRun

    out = {}
    for key, t in best.items():
        info = search.get(key)
        if not t or not info:
            continue
        lat = info["latencies"]
        n = SearchRun(key, lat, [None] * len(lat), info.get("seconds")).trials_to_reach(t)
        secs = info["seconds"] * n / len(lat) if n and info.get("seconds") else None
        out[key] = {"trials": n, "seconds": secs, "searched": len(lat)}
    return out


def _curve(group: list[Attempt], unscheduled: dict, k: int) -> dict:
    """Best-of-j for j = 1..k: geomean speedup (incorrect = 1) of the best correct kernel among
    the first j attempts at each construction prompt, and pass@j."""
    prompts = defaultdict(list)
    for a in sorted(group, key=lambda a: a.sample):
        if a.task == CONSTRUCTION:
            prompts[(a.split, a.index)].append(a)
    curve = []
    for j in range(1, k + 1):
        speedups, passed = [], []
        for tries in prompts.values():
            lat = [a.evaluation.latency for a in tries[:j] if a.evaluation.latency]
            ref = unscheduled.get(tries[0].workload)
            speedups.append(ref / min(lat) if lat and ref else None)
            passed.append(any(a.evaluation.correct for a in tries[:j]))
        if prompts:
            curve.append({"k": j, "geomean_speedup": stats(speedups)["geomean"],
                          "solved": sum(passed) / len(passed)})
    return {"prompts": len(prompts), "points": curve}


def _turn_curve(rows: list[dict], unscheduled: dict, turns: int) -> dict:
    """After t turns: geomean over construction prompts of the best speedup so far (incorrect = 1)."""
    by_prompt = defaultdict(dict)
    for r in rows:
        by_prompt[(r["split"], r["index"])][r["turn"]] = r
    points = []
    for t in range(turns + 1):
        speedups = []
        for per_turn in by_prompt.values():
            lat = [per_turn[i]["latency"] for i in range(t + 1) if i in per_turn and per_turn[i]["latency"]]
            ref = unscheduled.get(next(iter(per_turn.values()))["workload"])
            speedups.append(ref / min(lat) if lat and ref else None)
        if by_prompt:
            points.append({"turn": t, "geomean_speedup": stats(speedups)["geomean"],
                           "correct": sum(bool(s) for s in speedups) / len(speedups)})
    return {"prompts": len(by_prompt), "points": points}


def _audit(attempts: dict[str, list[Attempt]], base: dict) -> dict:
    """Speedups above the evaluator's threshold, and scripts that decode but do not re-encode to
    the same trace (there must be none)."""
    from dragonlab.core import codec

    suspicious, not_exact, decoded = [], [], 0
    for name, group in attempts.items():
        for a in group:
            if a.evaluation.suspicious:
                suspicious.append({"system": name, "split": a.split, "index": a.index, "sample": a.sample,
                                   "speedup": a.evaluation.speedup})
            try:
                plain = codec.decode(a.script)
            except codec.CodecError:
                continue
            decoded += 1
            if codec.decode(codec.encode(plain)) != plain:
                not_exact.append({"system": name, "split": a.split, "index": a.index, "sample": a.sample})
    for system, by_key in base.items():
        for key, d in by_key.items():
            if isinstance(d, dict) and (d.get("evaluation") or {}).get("suspicious"):
                suspicious.append({"system": system, "workload": key})
    return {"suspicious": suspicious, "decoded": decoded, "round_trip_failures": not_exact}


def search_curves(report: dict) -> dict[str, dict]:
    """{system: {budget: ratio row}} of every system and baseline that is compared with
    MetaSchedule at N trials (not search itself, nor the seeded search: it ran at one budget)."""
    curves = dict(report["best_of_k_vs_metaschedule"])
    curves.update({name: b["vs_metaschedule"] for name, b in report["baselines"].items()
                   if name not in curves and not name.startswith(("metaschedule@", "unscheduled"))
                   and "seeded" not in name})
    return curves


def read_report(path: str | os.PathLike) -> dict:
    """report.json of a report directory (or the file itself)."""
    path = Path(path)
    path = path / "report.json" if path.is_dir() else path
    return read_json(path)
