"""A tune result as text (the command's summary), tables and plotly figures (notebook 07), and
one self-contained HTML page (`tune.html`)."""

from __future__ import annotations

import html
import os
from pathlib import Path

import plotly.graph_objects as go

from dragonlab.core.jsonl import read_json, write_atomic
from dragonlab.reporting.report_html import fmt, table
from dragonlab.reporting.widgets import Candidate
from dragonlab.tune.config import TuneConfig
from dragonlab.tune.tuning import DRAGON, UNTUNED, TuneResult, tune_relax


def network_rows(result: TuneResult) -> list[dict]:
    """One row per build: latency, speedup over the untuned build, outputs, tuning cost."""
    untuned = result.system(UNTUNED)
    rows = []
    for s in result.systems:
        rows.append({"system": s.system, "stage": s.stage, "reason": s.reason, "latency_ms": s.latency and s.latency * 1e3,
                     "speedup": untuned.latency / s.latency if untuned and untuned.latency and s.latency else None,
                     "max_error": s.max_error, "tuning_seconds": s.seconds, "measurements": s.measurements,
                     "default_tasks": len(s.defaults) if s.system != UNTUNED else len(result.tasks)})
    return rows


def task_rows(result: TuneResult) -> list[dict]:
    """One row per task: weight, the unscheduled latency, each system's kernel."""
    return [{"task": t.name, "weight": t.weight, "unscheduled_ms": t.unscheduled and t.unscheduled * 1e3,
             **{f"{system}_ms": (v * 1e3 if v else None) for system, v in t.latencies.items()},
             "dragon_correct": f"{t.dragon_correct}/{t.dragon_attempts}"} for t in result.tasks]


def goals(result: TuneResult) -> list[str]:
    """The model's build against MetaSchedule's at equal measurements and at the larger budget."""
    config = TuneConfig(attempts=result.config["attempts"], turns=result.config.get("turns", 0),  # older runs: none
                        budget=result.config["budget"])
    small, large = (tune_relax(n) for n in config.search_budgets(len(result.tasks)))
    lines = []
    for other, bound, words in ((small, 1.0, "at least as fast as"), (large, 1.1, "within 10% of")):
        r = result.ratio(DRAGON, other)
        verdict = "no figure (a build failed)" if r is None else ("met" if r <= bound else "not met")
        lines.append(f"dragon {words} {other}: {fmt(r, 'x')} the latency ({verdict})")
    return lines


def summary_text(result: TuneResult) -> str:
    head = f"{'system':<20}{'latency':>12}{'speedup':>9}{'max err':>9}{'tuning':>10}{'measured':>10}  default tasks"
    lines = [f"{result.network} on {result.target}: {len(result.tasks)} tasks", head]
    for r in network_rows(result):
        if r["stage"] != "ok":
            lines.append(f"{r['system']:<20}  stopped at {r['stage']}: {r['reason']}")
            continue
        lines.append(f"{r['system']:<20}{r['latency_ms']:>9.4g} ms{_x(r['speedup']):>9}{r['max_error']:>9.2g}"
                     f"{_s(r['tuning_seconds']):>10}{r['measurements']:>10}  {r['default_tasks']}")
    defaults = next((s.defaults for s in result.systems if s.system == DRAGON), ())
    if defaults:
        lines.append(f"TVM's default schedule for the tasks the model wrote no correct kernel for: {', '.join(defaults)}")
    reused = (result.config or {}).get("searches_from")
    if reused:
        lines.append(f"tune_relax's kernels, measurements and tuning times are those of {reused['run']}; "
                     "every kernel and build was timed in this run")
    return "\n".join(lines + goals(result))


def _x(v) -> str:
    return f"{v:.3g}x" if v else "-"


def _s(v) -> str:
    return f"{v:.0f} s" if v is not None else "-"


def latency_figure(result: TuneResult) -> go.Figure:
    """End-to-end latency of each build, every repeat shown."""
    fig = go.Figure()
    for s in result.systems:
        if s.latencies:
            fig.add_box(y=[t * 1e3 for t in s.latencies], name=s.system, boxpoints="all")
    fig.update_layout(title=f"{result.network}: end-to-end latency per build ({result.target})",
                      yaxis_title="ms per run", showlegend=False)
    return fig


def task_figure(result: TuneResult) -> go.Figure:
    """Each task's kernel speedup over its unscheduled kernel, per system."""
    fig = go.Figure()
    for system in (s.system for s in result.systems if s.system != UNTUNED):
        fig.add_bar(x=[t.name.removeprefix(f"{result.network}_") for t in result.tasks],
                    y=[t.unscheduled / t.latencies[system] if t.unscheduled and t.latencies.get(system) else None
                       for t in result.tasks], name=system)
    fig.update_layout(title="Per-task speedup over the unscheduled kernel (missing: TVM's default schedule)",
                      barmode="group", yaxis_type="log", yaxis_title="speedup")
    return fig


def candidates(out: str | os.PathLike) -> dict[str, list[Candidate]]:
    """Per task of a tune run, each system's kernel as a script, for the comparison widget."""
    chosen = read_json(Path(out) / "chosen.json")
    by_task: dict[str, list[Candidate]] = {}
    for system, kernels in chosen.items():
        for key, script in kernels.items():
            by_task.setdefault(key, []).append(Candidate(system, script))
    return by_task


def write_html(result: TuneResult, path: str | os.PathLike) -> Path:
    net = network_rows(result)
    keys = list(net[0]) if net else []
    tasks = task_rows(result)
    task_keys = list(tasks[0]) if tasks else []
    figures = [latency_figure(result), task_figure(result)]
    parts = [f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figures)]
    body = (f"<h2>The network</h2>{table(keys, [[fmt(r[k]) for k in keys] for r in net])}"
            f"<p>{'<br>'.join(html.escape(g) for g in goals(result))}</p>"
            f"<h2>Tasks</h2>{table(task_keys, [[fmt(r[k]) for k in task_keys] for r in tasks])}"
            f"<h2>Figures</h2>{''.join(parts)}")
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>dragonlab tune: {html.escape(result.network)}"
            f"</title><style>body{{font-family:sans-serif;max-width:1100px;margin:auto}}table{{border-collapse:"
            f"collapse;margin:8px 0}}td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px}}th{{background:"
            f"#f3f3f3}}</style></head><body><h1>dragonlab tune: {html.escape(result.network)}</h1><p>target "
            f"<code>{html.escape(result.target)}</code>, model <code>{html.escape(result.config['dragon'])}</code>, "
            f"{result.config['attempts']} attempts per task"
            f"{_turns(result.config.get('turns', 0))}</p>{body}</body></html>")
    path = Path(path)
    write_atomic(path, page)
    return path


def _turns(turns: int) -> str:
    return f", then {turns} refinement turn{'s' * (turns != 1)}" if turns else ""
