"""The report's numbers: pure functions of what was judged, no evaluator, no files.

    pass_at_k(n, c, k), geomean(xs), stats(speedups), fast_p(latencies, baselines, p)
    metrics(attempts, turns, baselines, config, held, rl_vs_sft) -> results.Report
    search_curves(report)                       # {system: {budget N: Ratio}}, for the figures and tables

The definitions are in `dragonlab/reporting/report.py`'s docstring and docs/report.md.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from dragonlab.learn.attempts import Attempt, best_attempts, summary
from dragonlab.learn.prompts import CONSTRUCTION, REFINEMENT
from dragonlab.reporting.compare import ModelComparison, geomean, geomean_interval, mean_interval
from dragonlab.reporting.config import ReportConfig
from dragonlab.reporting.results import (DRIFT, PAPER, Audit, BaselineMetrics, BestOfKCurve, BestOfKPoint, Drift,
                                         Match, MatchTime, Ratio, Report, SeededSearch, Stats, SummaryRow, SystemMetrics,
                                         TaskMetrics, TimeToMatch, TurnCurve, TurnPoint, WorkloadKernel, from_json)

# --- the measures ---------------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts of which c are correct (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def stats(speedups: list[float | None], clusters: list | None = None) -> Stats:
    """Geomean, mean and median of speedups where None (incorrect) counts as 1, the geomean of the
    correct ones alone, and the geomean's bootstrap 95% interval (`clusters`: one label per
    speedup, those sharing one resampled together: a prompt's attempts)."""
    counted = [s if s else 1.0 for s in speedups]
    correct = [s for s in speedups if s]
    interval = mean_interval([math.log(s) for s in counted], clusters)
    return Stats(n=len(speedups), correct=len(correct), geomean=geomean(counted),
                 mean=sum(counted) / len(counted) if counted else None,
                 median=statistics.median(counted) if counted else None, geomean_correct=geomean(correct),
                 interval=(math.exp(interval[0]), math.exp(interval[1])) if interval else None)


def fast_p(latencies: list[float | None], baselines: list[float | None], p: float) -> float | None:
    """Share of kernels that are correct (a latency) and faster than p x their baseline."""
    pairs = [(t, b) for t, b in zip(latencies, baselines) if b]
    return sum(bool(t) and b / t > p for t, b in pairs) / len(pairs) if pairs else None


def search_curves(report: Report) -> dict[str, dict[int, Ratio]]:
    """{system: {budget: ratio}} of every system and baseline that is compared with MetaSchedule
    at N trials (not search itself, nor the seeded search: it ran at one budget)."""
    curves = dict(report.best_of_k_vs_metaschedule)
    curves.update({name: b.vs_metaschedule for name, b in report.baselines.items()
                   if name not in curves and not name.startswith(("metaschedule@", "unscheduled"))
                   and "seeded" not in name})
    return curves


# --- metrics over everything judged --------------------------------------------------------------

def metrics(attempts: dict[str, list[Attempt]], turns: dict[str, list[dict]], base: dict, config: ReportConfig,
            held: list[str], rl_vs_sft: ModelComparison | None) -> Report:
    """The report's numbers. `attempts` and `turns` by system; `base`: {baseline: {workload key:
    baselines.jsonl line}}, "_search": {key: {"seconds", "latencies"}} of the plain search and
    "_seeded": {key: {"seconds", "trials"}} of the seeded one;
    `held`: the held-out workload keys. Where they came from (run, target, ...) is left empty."""
    unscheduled = {k: _latency(d) for k, d in base.get("unscheduled", {}).items()}
    budgets = sorted(config.budgets)
    ms = {n: {k: _latency(d) for k, d in base.get(f"metaschedule@{n}", {}).items()} for n in budgets}
    search = base.get("_search", {})
    random_name = f"random best-of-{config.k}"
    random = {k: _latency(d) for k, d in base.get(random_name, {}).items()}
    systems, best_of_k, versus, versus_random, to_match, curves, times = {}, {}, {}, {}, {}, {}, {}
    top = max(budgets)
    # system -> workload -> the latency that best-of-k's ratios (vs search, vs random) compare: the
    # kernels timed again side by side where the report did ("_together"), else as judged
    together = base.get("_together")
    compared: dict[str, dict] = defaultdict(dict)
    if together:
        for key, by_system in together.items():
            for system, t in by_system.items():
                compared[system][key] = t
    else:
        compared |= {f"metaschedule@{n}": ms[n] for n in budgets} | {random_name: random}
    searched = {n: compared[f"metaschedule@{n}"] for n in budgets}
    for name, group in attempts.items():
        systems[name] = _system(group, unscheduled, ms, config)
        best = _best_of(group, CONSTRUCTION, config.k)
        best_of_k[name] = best
        if not together:
            compared[name] = best
        versus[name] = _versus(compared[name], searched, held)
        if random:
            versus_random[name] = _ratio(compared[name], compared[random_name], held)
        to_match[name] = _to_match(best, search)
        curves[name] = _curve(group, unscheduled, config.construction_attempts, ms, held)
        times[name] = _time_to_match(group, f"metaschedule@{top}", _goal(ms[top], best, compared, name, top, together),
                                     search, base.get("_seeded", {}))
    baselines = {}
    for system, by_key in base.items():
        if system.startswith("_"):
            continue
        lat = [_latency(by_key.get(k, {})) for k in held]
        ref = [unscheduled.get(k) for k in held]
        # against search as timed side by side, where this baseline was (all but the unscheduled)
        timed = system in compared and together is not None
        baselines[system] = BaselineMetrics(
            workloads=len(held), correct=sum(bool(t) for t in lat) / len(held),
            speedup_vs_unscheduled=stats([b / t if t and b else None for t, b in zip(lat, ref)]),
            fast_p_vs_unscheduled={p: fast_p(lat, ref, p) for p in config.p},
            vs_metaschedule={n: _ratio(compared[system], searched[n], held) if timed else
                             _ratio({k: _latency(by_key.get(k, {})) for k in held}, ms[n], held) for n in budgets},
            per_workload={k: WorkloadKernel(_latency(by_key.get(k, {})),
                                            (by_key.get(k) or {}).get("evaluation", {}).get("stage")) for k in held})
        if system == random_name:
            versus[system] = _versus(compared[system], searched, held)
    seeded, names = None, [s for s in base if "seeded" in s and not s.startswith("_")]
    if names:
        seeded = SeededSearch(names[0], config.seeded_trials,
                              {k: d.get("seeded") for k, d in base[names[0]].items()})
    return Report(config=config, paper=PAPER, held_out_workloads=len(held), systems=systems, baselines=baselines,
                  best_of_k=best_of_k, best_of_k_vs_metaschedule=versus, best_of_k_vs_random=versus_random,
                  trials_to_match=to_match,
                  turns={name: _turn_curve(rows, unscheduled, config.turns) for name, rows in turns.items()},
                  best_of_k_curve=curves, rl_vs_sft=rl_vs_sft, audit=_audit(attempts, base, unscheduled), seeded_search=seeded,
                  search_seconds={k: v.get("seconds") for k, v in search.items()}, time_to_match=times,
                  timed_side_by_side=together is not None)


def _latency(d: dict) -> float | None:
    lat = (d.get("evaluation") or {}).get("latencies")
    return statistics.median(lat) if lat else None


def _system(group: list[Attempt], unscheduled: dict, ms: dict, config: ReportConfig) -> SystemMetrics:
    tasks = {}
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
        fast = {"unscheduled": {p: fast_p(lat, ref, p) for p in config.p}}
        for budget, by_key in ms.items():
            fast[f"metaschedule@{budget}"] = {p: fast_p(lat, [by_key.get(a.workload) for a in g], p) for p in config.p}
        prompt = [(a.split, a.index) for a in g]
        versus_input = None
        if task == REFINEMENT:
            inputs = [a.evaluation.reference_latency if a.evaluation.latency else None for a in g]
            fast["input script"] = {p: fast_p(lat, inputs, p) for p in config.p}
            versus_input = stats([a.evaluation.speedup for a in g], prompt)
        tasks["overall" if task == "all" else task] = TaskMetrics(
            attempts=len(g), prompts=len(by_prompt), correct=sum(a.evaluation.correct for a in g) / len(g),
            correct_interval=mean_interval([float(a.evaluation.correct) for a in g], prompt),
            pass_at_k={k: sum(pass_at_k(len(v), sum(v), k) for v in by_prompt.values()) / len(by_prompt)
                       for k in (1, 2, 4, 8, 16, 32, 64) if k <= n},
            speedup_vs_unscheduled=stats([b / t if t and b else None for t, b in zip(lat, ref)], prompt),
            fast_p=fast, speedup_vs_input=versus_input)
    return SystemMetrics(summary=tuple(from_json(SummaryRow, row) for row in summary(group)), **tasks)


def _best_of(group: list[Attempt], task: str, k: int) -> dict[str, float | None]:
    """Per workload: the latency of the fastest correct kernel among the first k attempts."""
    return {key: a.evaluation.latency if a else None for key, a in best_attempts(group, task, k).items()}


def _ratio(lat: dict, ref: dict, held: list[str]) -> Ratio:
    pairs = [(lat.get(k), ref.get(k)) for k in held]
    both = [t / r for t, r in pairs if t and r]
    return Ratio(geomean_latency_ratio=geomean(both), workloads=len(both),
                 no_correct_kernel=sum(not t for t, _ in pairs), no_search_kernel=sum(not r for _, r in pairs),
                 interval=geomean_interval(both))


def _versus(best: dict, ms: dict, held: list[str]) -> dict[int, Ratio]:
    return {n: _ratio(best, by_key, held) for n, by_key in ms.items()}


def _to_match(best: dict, search: dict) -> dict[str, Match]:
    from dragonlab.search.baselines import trials_to_reach

    out = {}
    for key, t in best.items():
        info = search.get(key)
        if not t or not info:
            continue
        lat = info["latencies"]
        n = trials_to_reach(lat, t)
        secs = info["seconds"] * n / len(lat) if n and info.get("seconds") else None
        out[key] = Match(trials=n, seconds=secs, searched=len(lat))
    return out


MATCH_WITHIN = 1.1  # "a kernel within 10% of MetaSchedule at the largest budget"


def _goal(judged: dict, best: dict, compared: dict, name: str, top: int, together: dict | None) -> dict:
    """Per workload, MetaSchedule@top's latency on the clock of the model's attempts there: its
    latency times over the model's best-of-k as timed side by side, times that kernel's latency as
    judged among the attempts (minutes apart, where search's kernel was judged hours away); as
    judged (`judged`) where nothing was timed side by side, or the model had no kernel to time."""
    if not together:
        return judged
    timed, model = compared.get(f"metaschedule@{top}", {}), compared.get(name, {})
    return {k: timed[k] / model[k] * best[k] if timed.get(k) and model.get(k) and best.get(k) else t
            for k, t in judged.items()}


def _time_to_match(group: list[Attempt], reference: str, goal: dict, search: dict, seeded: dict) -> TimeToMatch:
    """Per workload with a `reference` kernel (`goal`: its latency, timed by the evaluator): the wall
    seconds the model spent on its construction attempts, in order, up to the first kernel within
    MATCH_WITHIN of it; and the seconds search took to a candidate within MATCH_WITHIN of its own
    best (by the latencies its runner recorded, `search`: {key: {"latencies", "seconds"}}),
    prorated from its seconds per trial, or from the seeded search's (`seeded`: {key: {"seconds",
    "trials"}}) where the search was a stored one, which kept no wall time."""
    from dragonlab.search.baselines import trials_to_reach

    tries: dict[str, list[Attempt]] = defaultdict(list)
    for a in sorted(group, key=lambda a: (a.split, a.index, a.sample)):
        if a.task == CONSTRUCTION:
            tries[a.workload].append(a)
    per = {}
    for key, attempts in tries.items():
        info, seeded_info = search.get(key) or {}, seeded.get(key) or {}
        lat = info.get("latencies") or []
        if not goal.get(key) or not any(lat) or any(a.seconds is None for a in attempts):
            continue
        if info.get("seconds"):
            clock, per_trial = "search", info["seconds"] / len(lat)
        elif seeded_info.get("seconds") and seeded_info.get("trials"):
            clock, per_trial = "seeded search", seeded_info["seconds"] / seeded_info["trials"]
        else:
            continue
        spent, model = 0.0, None
        for i, a in enumerate(attempts):
            spent += a.seconds
            if a.evaluation.latency and a.evaluation.latency <= MATCH_WITHIN * goal[key]:
                model = i + 1
                break
        trials = trials_to_reach(lat, MATCH_WITHIN * min(t for t in lat if t))
        per[key] = MatchTime(model, spent if model else None, trials, trials * per_trial, clock)
    reached = [m for m in per.values() if m.model_seconds]
    return TimeToMatch(
        reference=reference, within=MATCH_WITHIN, workloads=len(per), model_reached=len(reached),
        median_model_seconds=statistics.median(m.model_seconds for m in reached) if reached else None,
        median_search_seconds=statistics.median(m.search_seconds for m in per.values()) if per else None,
        median_speedup=statistics.median(m.search_seconds / m.model_seconds if m.model_seconds else 0.0
                                         for m in per.values()) if per else None,
        per_workload=per)


def _curve(group: list[Attempt], unscheduled: dict, k: int, ms: dict, held: list[str]) -> BestOfKCurve:
    """Best-of-j for j = 1..k: geomean speedup (incorrect = 1) of the best correct kernel among
    the first j attempts at each construction prompt, and pass@j; for j a power of two and k,
    best-of-j against MetaSchedule at each budget (`ms`: {N: {key: latency}})."""
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
            versus = _versus(_best_of(group, CONSTRUCTION, j), ms, held) if j & (j - 1) == 0 or j == k else {}
            speed = stats(speedups)
            curve.append(BestOfKPoint(k=j, geomean_speedup=speed.geomean, solved=sum(passed) / len(passed),
                                      vs_metaschedule=versus, interval=speed.interval))
    return BestOfKCurve(prompts=len(prompts), points=tuple(curve))


def _turn_curve(rows: list[dict], unscheduled: dict, turns: int) -> TurnCurve:
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
            speed = stats(speedups)
            points.append(TurnPoint(turn=t, geomean_speedup=speed.geomean, interval=speed.interval,
                                    correct=sum(bool(s) for s in speedups) / len(speedups)))
    return TurnCurve(prompts=len(by_prompt), points=tuple(points))


def _audit(attempts: dict[str, list[Attempt]], base: dict, unscheduled: dict) -> Audit:
    """Speedups above the evaluator's threshold, scripts that decode but do not re-encode to the
    same trace (there must be none), and attempts timed beside other work."""
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
    contended = {name: sum(a.evaluation.contended for a in group) for name, group in attempts.items()}
    return Audit(suspicious=tuple(suspicious), decoded=decoded, round_trip_failures=tuple(not_exact),
                 contended=contended,
                 reference_drift={name: _drift(group, unscheduled) for name, group in attempts.items()})


def _drift(group: list[Attempt], unscheduled: dict) -> Drift:
    """Per construction prompt, the median of its attempts' in-batch unscheduled latency over the
    baselines' latency of that kernel."""
    per_prompt = defaultdict(list)
    for a in group:
        if a.task == CONSTRUCTION and a.evaluation.reference_latency and unscheduled.get(a.workload):
            per_prompt[(a.split, a.index)].append(a.evaluation.reference_latency / unscheduled[a.workload])
    ratios = [statistics.median(r) for r in per_prompt.values()]
    return Drift(prompts=len(ratios), geomean=geomean(ratios) if ratios else None,
                 off=sum(not 1 / DRIFT <= r <= DRIFT for r in ratios))
