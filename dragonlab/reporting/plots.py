"""Figures of evaluations and of the reward, shared by the notebooks and `docs/make_figures.py`.

Every function returns a plotly `go.Figure` and computes nothing the library does not already
define: the reward's shape comes from `RewardConfig` itself, stages from `evaluate.STAGES`.

    reward_shape_figure(RewardConfig(), points=[("good", e)])  # reward vs speedup, failure ladder as lines
    stage_figure({"good": evals, "broken": more})       # where each group of scripts stopped
    latency_figure([("good", e), ("random 1", e2)])     # per-repeat latencies, reference line
    report_search_figure(read_report("runs/demo"))      # a results.Report: report_{correctness,search,scaling,latency}
"""

from __future__ import annotations

import math
from collections import Counter

import plotly.graph_objects as go

from dragonlab.evaluation.evaluate import OK, STAGES, Evaluation
from dragonlab.evaluation.reward import RewardConfig, reward
from dragonlab.reporting.metrics import search_curves
from dragonlab.reporting.results import Report

# Failing stages in ladder order (worst first), then the stage a correct kernel ends at.
_FAILURES = ("decode", "apply", "validate", "build", "run", "check")
_STAGE_COLOURS = {"decode": "#7f0000", "apply": "#b30000", "validate": "#d7301f", "build": "#ef6548",
                  "run": "#fc8d59", "check": "#fdbb84", "time": "#a6bddb", OK: "#2b8cbe"}


def reward_shape_figure(config: RewardConfig = RewardConfig(), *, suspicious_speedup: float | None = 10.0,
                        span: float = 4.0, points: list[tuple[str, Evaluation]] = ()) -> go.Figure:
    """Reward against speedup over the reference (log axis), for correct and for repaired-correct
    kernels, with each failing stage's fixed reward as a horizontal line.

    `span` widens the speedup axis beyond the saturation points (a factor on max_speedup);
    `suspicious_speedup` draws the evaluator's audit threshold (None: not drawn); `points` marks
    labelled evaluations where their reward puts them (failures and untimed kernels at speedup 1).
    """
    lo, hi = 1 / (config.max_speedup * span), config.max_speedup * span
    n = 241
    speedups = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    bonus = [config.bonus(s) for s in speedups]
    fig = go.Figure()
    fig.add_scatter(x=speedups, y=[config.correct + b for b in bonus], mode="lines", name="correct",
                    line=dict(color="#2b8cbe", width=3))
    fig.add_scatter(x=speedups, y=[config.correct - config.repaired_penalty + b for b in bonus], mode="lines",
                    name="correct, repaired (charged)", line=dict(color="#74a9cf", width=3, dash="dash"))
    # Stages that share a reward (build and run by default) share a line.
    by_value: dict[float, list[str]] = {}
    for stage in _FAILURES:
        by_value.setdefault(getattr(config, stage), []).append(stage)
    for value, stages in by_value.items():
        colour = _STAGE_COLOURS[stages[0]]
        fig.add_scatter(x=[lo, hi], y=[value, value], mode="lines", name=" / ".join(stages),
                        line=dict(color=colour, width=2), hovertemplate=f"{' / '.join(stages)}: {value:g}<extra></extra>")
        fig.add_annotation(x=math.log10(hi), y=value, text=f"stopped at {' / '.join(stages)}", showarrow=False,
                           xanchor="right", yshift=9, font=dict(size=11, color=colour))
    if points:
        xs = [min(max(e.speedup or 1.0, lo), hi) for _, e in points]
        fig.add_scatter(x=xs, y=[reward(e, config) for _, e in points], mode="markers", name="evaluated scripts",
                        text=[f"{label}: {e.stage}" + (f", repaired ({', '.join(e.repairs)})" if e.repairs else "")
                              for label, e in points],
                        hovertemplate="%{text}<br>speedup %{x:.3g}x, reward %{y:.3f}<extra></extra>",
                        marker=dict(size=10, color="black", symbol="x"))
    # Annotations on a log axis take log10 coordinates; shapes take data values.
    top = config.correct + config.bonus_weight + 0.15
    for s, text, side in ((config.max_speedup, f" bonus saturates: {config.max_speedup:g}x", "left"),
                          (1 / config.max_speedup, f"malus saturates: 1/{config.max_speedup:g}x ", "right")):
        fig.add_vline(x=s, line=dict(color="grey", dash="dot", width=1))
        fig.add_annotation(x=math.log10(s), y=top, text=text, showarrow=False, xanchor=side,
                           font=dict(size=10, color="grey"))
    if suspicious_speedup:
        fig.add_vline(x=suspicious_speedup, line=dict(color="#e6550d", dash="dash", width=1))
        fig.add_annotation(x=math.log10(suspicious_speedup), y=(config.check + config.correct) / 2, showarrow=False,
                           text=f"flagged suspicious above {suspicious_speedup:g}x<br>(the reward does not look)",
                           xanchor="right", font=dict(size=10, color="#e6550d"))
    fig.update_xaxes(type="log", range=[math.log10(lo), math.log10(hi)],
                     title="speedup over the reference (reference latency / latency)")
    fig.update_yaxes(title="reward", range=[config.decode - 0.15, config.correct + config.bonus_weight + 0.25])
    fig.update_layout(title="The shaped reward: a failure ladder, then a bounded log-speedup bonus",
                      template="plotly_white", width=960, height=540)
    return fig


def stage_counts(evaluations: list[Evaluation]) -> dict[str, int]:
    """How many evaluations stopped at each stage, in pipeline order ("ok" last)."""
    counts = Counter(e.stage for e in evaluations)
    return {s: counts[s] for s in (*STAGES, OK) if counts[s]}


def stage_figure(groups: dict[str, list[Evaluation]]) -> go.Figure:
    """Stacked bars: for each group of scripts, the stage each one stopped at."""
    fig = go.Figure()
    for stage in (*STAGES, OK):
        counts = [sum(e.stage == stage for e in evals) for evals in groups.values()]
        if any(counts):
            fig.add_bar(x=list(groups), y=counts, name=stage, marker_color=_STAGE_COLOURS[stage])
    fig.update_layout(barmode="stack", template="plotly_white", title="Where the scripts stopped",
                      yaxis_title="scripts", legend_title="stage", width=700, height=420)
    return fig


def latency_figure(labelled: list[tuple[str, Evaluation]]) -> go.Figure:
    """One box per timed kernel (its per-repeat latencies, ms), with each workload's reference
    latency as a dashed line. Evaluations without latencies are left out."""
    fig = go.Figure()
    references = set()
    for label, e in labelled:
        if not e.latencies:
            continue
        fig.add_box(y=[t * 1e3 for t in e.latencies], name=label, boxpoints="all", jitter=0.3,
                    hovertemplate=f"{label}<br>%{{y:.4g}} ms<br>speedup {e.speedup or float('nan'):.3g}x<extra></extra>")
        if e.reference_latency:
            references.add(e.reference_latency)
    for ref in sorted(references):
        fig.add_hline(y=ref * 1e3, line=dict(color="grey", dash="dash"),
                      annotation_text=f"reference {ref * 1e3:.3g} ms", annotation_position="top left")
    fig.update_yaxes(type="log", title="latency per call (ms, each repeat)")
    fig.update_layout(template="plotly_white", title="Latency and its spread over repeats", showlegend=False,
                      width=900, height=450)
    return fig


# --- the replication report (dragonlab.reporting.results.Report) ---------------------------------------

def report_correctness_figure(report: Report) -> go.Figure:
    """Per system and task, the share of attempts that stopped at each stage (the failures: a
    correct attempt stops nowhere)."""
    fig = go.Figure()
    labels, shares = [], []
    for name, system in report.systems.items():
        for row in system.summary:
            if row.task != "all":
                labels.append(f"{name}<br>{row.task}")
                shares.append({s: c / row.attempts for s, c in row.stopped_at.items()})
    for stage in (*STAGES, OK):
        ys = [share.get(stage, 0.0) for share in shares]
        if any(ys):
            fig.add_bar(x=labels, y=ys, name=stage, marker_color=_STAGE_COLOURS[stage])
    fig.update_layout(barmode="stack", template="plotly_white", title="Failed attempts, by the stage where they stopped",
                      yaxis_title="share of attempts", yaxis_tickformat=".2~%", legend_title="stage",
                      width=760, height=420)
    return fig


def report_search_figure(report: Report) -> go.Figure:
    """Geomean latency ratio (system / MetaSchedule at N trials) against N: below 1 the system is faster."""
    fig = go.Figure()
    for name, by_budget in search_curves(report).items():
        xs = [n for n, r in by_budget.items() if r.geomean_latency_ratio]
        ys = [by_budget[n].geomean_latency_ratio for n in xs]
        if xs:
            fig.add_scatter(x=xs, y=ys, mode="lines+markers", name=name,
                            hovertemplate=name + "<br>N=%{x}: %{y:.3g}x<extra></extra>")
    fig.add_hline(y=1.0, line=dict(color="grey", dash="dash"), annotation_text="as fast as search",
                  annotation_position="bottom right")
    budgets = sorted(report.config.budgets)
    fig.update_xaxes(type="log", title="MetaSchedule trials N", tickvals=budgets, ticktext=[str(b) for b in budgets])
    fig.update_yaxes(type="log", title="latency / MetaSchedule's best at N (geomean)")
    fig.update_layout(template="plotly_white", title="Best-of-k kernels against search budgets", width=760, height=440)
    return fig


def report_scaling_figure(report: Report) -> go.Figure:
    """Test-time scaling: geomean speedup over the unscheduled kernel against best-of-k and against
    turns, each point with its bootstrap 95% interval."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("best of k attempts", "refinement turns"))
    for col, (curves, x) in enumerate(((report.best_of_k_curve, "k"), (report.turns, "turn")), start=1):
        for i, (name, curve) in enumerate(curves.items()):
            pts = curve.points
            fig.add_scatter(x=[getattr(p, x) for p in pts], y=[p.geomean_speedup for p in pts], mode="lines+markers",
                            error_y=_interval_bars(pts), name=name, legendgroup=name,
                            showlegend=col == 1 or name not in report.best_of_k_curve,
                            line_color=_PALETTE[i % len(_PALETTE)], row=1, col=col)
    ks = [p.k for curve in report.best_of_k_curve.values() for p in curve.points]
    if ks and max(ks) > 8:  # 64 attempts: powers of two on a log axis, not 64 ticks
        ticks = [2 ** i for i in range(max(ks).bit_length()) if 2 ** i <= max(ks)]
        fig.update_xaxes(title="k", type="log", tickvals=ticks, ticktext=[str(t) for t in ticks], row=1, col=1)
    else:
        fig.update_xaxes(title="k", dtick=1, row=1, col=1)
    fig.update_yaxes(title="geomean speedup vs unscheduled (incorrect = 1x)", row=1, col=1)
    fig.update_xaxes(title="turn", dtick=1, row=1, col=2)
    fig.update_layout(template="plotly_white", title="Test-time scaling (bars: bootstrap 95% intervals over prompts)",
                      width=900, height=420)
    return fig


def _interval_bars(points) -> dict | None:
    """plotly error bars from each point's `interval` around its `geomean_speedup` (none without)."""
    if not all(p.interval and p.geomean_speedup for p in points):
        return None
    return {"type": "data", "symmetric": False, "thickness": 1, "width": 2,
            "array": [p.interval[1] - p.geomean_speedup for p in points],
            "arrayminus": [p.geomean_speedup - p.interval[0] for p in points]}


def report_latency_figure(report: Report) -> go.Figure:
    """Per held-out workload (a row): each system's best kernel latency (ms, log) as a marker, so
    66 workloads and a dozen systems stay readable; missing = no correct kernel."""
    names = report.workload_names
    keys = list(names) or sorted({k for b in report.baselines.values() for k in b.per_workload})
    series = {f"{n} best-of-k": by_key for n, by_key in report.best_of_k.items()}
    series.update({n: {k: v.latency for k, v in b.per_workload.items()} for n, b in report.baselines.items()})
    rows = [_short(names.get(k, k)) for k in keys]
    fig = go.Figure()
    for i, (name, by_key) in enumerate(series.items()):
        fig.add_scatter(y=rows, x=[(by_key.get(k) or float("nan")) * 1e3 for k in keys], mode="markers", name=name,
                        marker=dict(symbol=_SYMBOLS[i % len(_SYMBOLS)], size=8, opacity=0.8),
                        hovertemplate=name + "<br>%{y}: %{x:.3g} ms<extra></extra>")
    fig.update_xaxes(type="log", title="latency (ms, median of repeats)")
    fig.update_yaxes(autorange="reversed", showgrid=True)
    fig.update_layout(template="plotly_white", title="Kernels per held-out workload", width=900,
                      height=max(420, 160 + 18 * len(keys)))
    return fig


def _short(name: str, limit: int = 48) -> str:
    return name if len(name) <= limit else name[:limit - 1] + "…"


_SYMBOLS = ("circle", "diamond", "square", "x", "triangle-up", "cross", "triangle-down", "star", "pentagon",
            "hexagon", "circle-open", "diamond-open")
_PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
