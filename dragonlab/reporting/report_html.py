"""A `Report` (report.json) as one self-contained HTML page: tables of every metric and the plotly
figures (plotly.js is inlined once, so the page opens without a network)."""

from __future__ import annotations

import html
import os
from pathlib import Path

from dragonlab.core.jsonl import write_atomic
from dragonlab.reporting import plots
from dragonlab.reporting.metrics import MATCH_WITHIN, search_curves
from dragonlab.reporting.results import DRIFT, Report


def fmt(x, kind: str = "") -> str:
    if x is None:
        return "–"
    if kind == "%":
        return f"{x:.1%}"
    if kind == "x":
        return f"{x:.3g}x"
    if kind == "ms":
        return f"{x * 1e3:.4g} ms"
    if kind == "s":
        return f"{x:.1f} s"
    if isinstance(x, float):
        return f"{x:.3g}"
    return html.escape(str(x))


def interval_text(interval: tuple[float, float] | None, kind: str = "") -> str:
    """A bootstrap 95% interval: "1.90x to 2.80x"; "-" without one."""
    return f"{fmt(interval[0], kind)} to {fmt(interval[1], kind)}" if interval else "-"


def with_interval(x, interval: tuple[float, float] | None, kind: str = "") -> str:
    """A figure and its bootstrap 95% interval: "2.31x (1.90x to 2.80x)"."""
    return fmt(x, kind) + (f" ({interval_text(interval, kind)})" if interval else "")


def table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def sections(report: Report) -> list[tuple[str, str]]:
    """(title, HTML) of every table of the report, in reading order (the notebook shows them too)."""
    out = []
    systems = report.systems
    names = report.workload_names
    cfg = report.config
    tasks = ("construction", "refinement")

    paper, rows = report.paper, []
    cmp = report.rl_vs_sft
    for task in tasks:
        ours = ", ".join(f"{n} {with_interval(s.task(task).correct, s.task(task).correct_interval, '%')}"
                         for n, s in systems.items() if s.task(task))
        rows.append([f"per-attempt correctness, {task}", fmt(paper.correct(task), "%"), ours or "–"])
        row = next((r for r in (cmp.rows if cmp else ()) if r.task == task), None)
        rows.append([f"RL faster than SFT, {task}", paper.rl_wins(task),
                     f"{row.wins}/{row.prompts} (p = {row.p_value:.3g})" if row else "–"])
    out.append(("The paper beside ours", table(["metric", "paper", "this run"], rows) +
                f"<p>Paper: {html.escape(paper.scale)}. This run: {report.held_out_workloads} held-out "
                f"workloads on {html.escape(report.target)}, k = {cfg.k} attempts per prompt, "
                f"{'constrained' if cfg.constrained else 'unconstrained'} decoding at temperature "
                f"{cfg.temperature}. The scales differ by orders of magnitude; the protocol is the same.</p>"))

    rows = []
    for n, s in systems.items():
        for r in s.summary:
            rows.append([n, r.task, str(r.attempts), fmt(r.correct, "%"), fmt(r.exact, "%"),
                         html.escape(", ".join(f"{k}: {v}" for k, v in r.stopped_at.items()))])
    out.append(("Per-attempt correctness and where the rest stopped",
                table(["system", "task", "attempts", "correct", "exact", "stopped at"], rows)))

    by_task = [(n, t, s.task(t)) for n, s in systems.items() for t in tasks if s.task(t)]
    ks = sorted({k for _, _, m in by_task for k in m.pass_at_k})
    rows = [[n, t] + [fmt(m.pass_at_k.get(k), "%") for k in ks] for n, t, m in by_task]
    out.append(("pass@k", table(["system", "task"] + [f"pass@{k}" for k in ks], rows)))

    rows = [[n, t, html.escape(base)] + [fmt(by_p.get(p), "%") for p in cfg.p]
            for n, t, m in by_task for base, by_p in m.fast_p.items()]
    out.append(("fast_p: correct and faster than p x the baseline (share of attempts)",
                table(["system", "task", "baseline"] + [f"p = {p}" for p in cfg.p], rows)))

    rows = []
    for n, t, m in by_task:
        for label, st in (("unscheduled", m.speedup_vs_unscheduled), ("input script", m.speedup_vs_input)):
            if st:
                rows.append([n, t, label, with_interval(st.geomean, st.interval, "x"), fmt(st.mean, "x"),
                             fmt(st.median, "x"), fmt(st.geomean_correct, "x"), f"{st.correct}/{st.n}"])
    for n, b in report.baselines.items():
        st = b.speedup_vs_unscheduled
        rows.append([n, "per workload", "unscheduled", with_interval(st.geomean, st.interval, "x"), fmt(st.mean, "x"),
                     fmt(st.median, "x"), fmt(st.geomean_correct, "x"), f"{st.correct}/{st.n}"])
    out.append(("Speedups (an incorrect kernel counts as 1x: the unscheduled kernel is kept; "
                "'geomean correct' leaves them out; bootstrap 95% intervals, a prompt's attempts resampled together)",
                table(["system", "task", "against", "geomean", "mean", "median", "geomean correct", "correct"], rows)))

    budgets = sorted(cfg.budgets)
    rows = []
    for n, by_budget in search_curves(report).items():
        cells = []
        for b in budgets:
            r = by_budget.get(b)
            cells.append(f"{with_interval(r.geomean_latency_ratio, r.interval, 'x')}; {r.workloads} wl" if r else "–")
        rows.append([html.escape(n)] + cells)
    timed = "; kernels timed again side by side" if report.timed_side_by_side else ""
    out.append((f"Model best-of-{cfg.k} vs MetaSchedule at N trials (geomean latency ratio, bootstrap 95% "
                f"interval over workloads; < 1: faster than search{timed})",
                table(["system"] + [f"N = {b}" for b in budgets], rows)))

    rows = [[html.escape(n), str(p.k)] + [fmt(p.vs_metaschedule[b].geomean_latency_ratio, "x")
                                          if b in p.vs_metaschedule else "–" for b in budgets]
            for n, curve in report.best_of_k_curve.items() for p in curve.points if p.vs_metaschedule]
    if rows:
        out.append(("Best-of-j against MetaSchedule at N trials: attempts against measurements (geomean latency "
                    "ratio over the workloads both have a kernel for; < 1: faster than search)",
                    table(["system", "j"] + [f"N = {b}" for b in budgets], rows)))

    rows = [[html.escape(n), fmt(r.geomean_latency_ratio, "x"),
             interval_text(r.interval, "x"),
             str(r.workloads), str(r.no_correct_kernel), str(r.no_search_kernel)]
            for n, r in report.best_of_k_vs_random.items()]
    if rows:
        out.append((f"Model best-of-{cfg.k} vs {cfg.k} random design-space samples (geomean latency ratio, "
                    "bootstrap 95% interval over workloads; < 1: faster than the samples)",
                    table(["system", "ratio", "95% interval", "workloads", "model: none correct",
                           "samples: none correct"], rows)))
    if report.stored_search:
        out.append(("MetaSchedule baselines", f"<p>The searches stored with the corpus "
                    f"{html.escape(report.stored_search)}, each as far as it was run.</p>"))

    rows = []
    for n, per in report.trials_to_match.items():
        for key, m in per.items():
            rows.append([n, html.escape(names.get(key, key)),
                         f"{m.trials} of {m.searched}" if m.trials else f"not within {m.searched}",
                         fmt(m.seconds, "s")])
    out.append(("Search needed to match the model's best-of-k kernel", table(
        ["system", "workload", "trials", "wall time"], rows)))

    rows = [[html.escape(n), html.escape(t.reference), f"{t.model_reached} of {t.workloads}",
             fmt(t.median_model_seconds, "s"), fmt(t.median_search_seconds, "s"), fmt(t.median_speedup, "x")]
            for n, t in report.time_to_match.items() if t.workloads]
    if rows:
        out.append((f"Wall time to a kernel within {MATCH_WITHIN - 1:.0%} of search's best, model and search on "
                    "this machine (median over workloads; the model's seconds are its writing and judging)", table(
                        ["system", "reference", "model got there", "model", "search", "search / model (0 where "
                         "the model never got there)"], rows)))

    seeded = report.seeded_search
    if seeded:
        rows = [[f"N = {n}", fmt(r.geomean_latency_ratio, "x"),
                 interval_text(r.interval, "x"), str(r.workloads)]
                for n, r in report.baselines[seeded.system].vs_metaschedule.items()]
        out.append((f"Model-seeded search: {html.escape(seeded.system)} ({seeded.trials} trials, the model's "
                    "kernels among them) against plain MetaSchedule at N trials (geomean latency ratio; "
                    "< 1: faster than search alone)",
                    table(["plain search", "ratio", "95% interval", "workloads"], rows)))

    if cmp:
        rows = [[r.task, str(r.prompts), fmt(r.correct_a, "%"), fmt(r.correct_b, "%"), fmt(r.mean_reward_a),
                 fmt(r.mean_reward_b), f"{r.wins}/{r.both_correct}", str(r.losses), str(r.ties), fmt(r.p_value),
                 "-" if r.workload_p is None else f"{r.workloads_won} / {r.workloads_lost}, p {fmt(r.workload_p)}",
                 fmt(r.ratio, "x"), interval_text(r.interval, "x")]
                for r in cmp.rows]
        draws = 1 + max((t.sample for t in cmp.timings), default=0)  # reports before compared_draws paired one
        out.append((f"RL vs SFT (the first {draws} attempt{'s' * (draws > 1)} per prompt, paired; "
                    f"noise threshold {cmp.threshold:.1%} from SFT's kernel against itself on {cmp.retimed} pairs, "
                    "timed side by side with RL's)", table(
                        ["task", "pairs", "SFT correct", "RL correct", "SFT reward", "RL reward", "RL faster",
                         "RL slower", "ties", "sign test p", "workloads won / lost", "geomean RL/SFT latency",
                         "95% interval"], rows)))

    audit = report.audit
    out.append(("Audit", f"<p>{audit.decoded} decoded scripts re-encoded; round-trip failures: "
                f"{len(audit.round_trip_failures)}. Speedups above the evaluator's threshold (flagged, "
                f"kept): {len(audit.suspicious)}. {html.escape(' '.join(audit.warnings()))}</p>" + (table(
                    ["entry"], [[html.escape(str(s))] for s in audit.suspicious]) if audit.suspicious else "") +
                (table(["system", "construction prompts", "unscheduled kernel in the attempts' batches / in the "
                        "baselines' (geomean)", f"prompts off by more than {DRIFT}x"],
                       [[n, d.prompts, f"{d.geomean:.3f}" if d.geomean else "-", d.off]
                        for n, d in audit.reference_drift.items()]) if audit.reference_drift else "")))
    out.append(("Sources", "<p>Every number above is computed from these files of "
                f"<code>{html.escape(report.run)}/report/</code>: " +
                ", ".join(f"<code>{html.escape(s)}</code>" for s in report.sources) + ".</p>"))
    return out


def figures(report: Report) -> dict:
    return {"outcomes": plots.report_correctness_figure(report), "search": plots.report_search_figure(report),
            "scaling": plots.report_scaling_figure(report), "latency": plots.report_latency_figure(report)}


def write_pngs(report: Report, folder: str | os.PathLike, *, scale: float = 2) -> list[Path]:
    """The figures as PNG files (`folder/<name>.png`), for slides and docs. kaleido renders them
    in a Chrome: the system's chromium is found on PATH (or set BROWSER_PATH)."""
    import plotly.io as pio

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    figs = figures(report)
    paths = [folder / f"{name}.png" for name in figs]
    # one Chrome for all; each at its own layout size (write_images alone draws every one at 700 x 500)
    pio.write_images(list(figs.values()), paths, scale=scale, width=[f.layout.width for f in figs.values()],
                     height=[f.layout.height for f in figs.values()])
    return paths


def write_html(report: Report, path: str | os.PathLike) -> Path:
    figs = figures(report)
    parts = [f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs.values())]
    body = "".join(f"<h2>{html.escape(t)}</h2>{h}" for t, h in sections(report))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>dragonlab report: "
            f"{html.escape(report.run)}</title><style>body{{font-family:sans-serif;max-width:1000px;margin:auto}}"
            f"table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ccc;padding:3px 8px;"
            f"font-size:13px}}th{{background:#f3f3f3}}</style></head><body>"
            f"<h1>dragonlab replication report</h1><p>run <code>{html.escape(report.run)}</code>, target "
            f"<code>{html.escape(report.target)}</code></p>{body}<h2>Figures</h2>{''.join(parts)}</body></html>")
    path = Path(path)
    write_atomic(path, page)
    return path
