"""Widgets for exploring and teaching in JupyterLab: a schedule stepper and a comparison of
several systems' kernels for one workload.

    stepper(workload, script)                        # one instruction at a time, the TIR after each
    Comparison(workloads, candidates, evaluator).widget   # side by side, diff, latencies, roofline, live edit
    candidates_from_report("runs/demo")              # the systems of a report (or a results.Report): SFT, RL, ...
    candidates_from_records("runs/demo/records")     # MetaSchedule's best per workload

Scripts are untrusted text: they are decoded here by the strict parser and applied only in a
worker process with time and memory limits (`dragonlab.evaluation.workers`), as the evaluator does; a
script that crashes TVM shows its error in the widget and the kernel lives on.
"""

from __future__ import annotations

import difflib
import html
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from dragonlab.core import codec
from dragonlab.core.allowlist import known_crash
from dragonlab.core.errors import one_line
from dragonlab.core.jsonl import read_lines
from dragonlab.core.workloads import Workload
from dragonlab.evaluation.workers import Limits, RemoteError, Worker, WorkerError
from dragonlab.reporting.results import Report

# --- applying scripts, one instruction at a time (in a worker) -----------------------------------

@dataclass(frozen=True)
class Step:
    applied: int  # instructions applied so far
    line: str  # the script line applied last ("" before the first)
    tir: str | None  # the scheduled TIR after it (None when it failed)
    error: str | None = None


def _tir_after_each(mod_json: str, plain: list, every: bool, *, progress=None) -> list:
    """In the worker: the TIR after each prefix of the instructions (or only the whole script),
    stopping at the first instruction that fails."""
    from dragonlab.evaluation.replay import worker_module

    insts, decisions = plain
    out = []
    for n in (range(len(insts) + 1) if every else [len(insts)]):
        partial = [insts[:n], [d for d in decisions if d[0] < n]]
        try:
            sch = codec.apply(partial, worker_module("", mod_json))
        except Exception as e:  # the instruction that TVM refused: said, not raised
            out.append((None, one_line(e, last=True)))  # TVM's message comes after the IR it diagnoses
            break
        out.append((sch.mod["main"].script(), None))
    return out


class Scheduler:
    """Applies scripts to workloads in one worker process (time and memory limited)."""

    def __init__(self, limits: Limits = Limits(timeout_sec=60.0)):
        self.worker = Worker(limits)

    def steps(self, workload: Workload, script: str) -> list[Step]:
        """Step 0 (the unscheduled kernel), then one Step per instruction of the script."""
        import tvm

        try:
            plain = codec.decode(script)
        except codec.CodecError as e:
            return [Step(0, "", workload.mod["main"].script(), f"decode: {e}")]
        lines = codec.encode(plain).splitlines() if plain[0] else []
        if len(lines) != len(plain[0]):  # one line per instruction is the encoder's rule; name them otherwise
            lines = [inst[0] for inst in plain[0]]
        crash = _first_crash(plain)  # TVM would kill the worker there: step up to it, then say why
        run = [plain[0][:crash], [d for d in plain[1] if d[0] < crash]] if crash is not None else plain
        texts = self._call(_tir_after_each, tvm.ir.save_json(workload.mod), run, True)
        if crash is not None and len(texts) == crash + 1 and texts[-1][1] is None:
            texts.append((None, known_crash(plain)))
        steps = [Step(i, lines[i - 1] if i else "", tir, err) for i, (tir, err) in enumerate(texts)]
        if len(steps) < len(lines) + 1 and steps[-1].error is None:  # the worker died or timed out
            steps.append(Step(len(steps), lines[len(steps) - 1], None, "the worker stopped"))
        return steps

    def scheduled(self, workload: Workload, script: str) -> tuple[str | None, str | None]:
        """(TIR of the whole script applied, error)."""
        import tvm

        try:
            plain = codec.decode(script)
        except codec.CodecError as e:
            return None, f"decode: {e}"
        if known_crash(plain):
            return None, known_crash(plain)
        (tir, err), = self._call(_tir_after_each, tvm.ir.save_json(workload.mod), plain, False)
        return tir, err

    def _call(self, fn, *args) -> list:
        try:
            return self.worker.call(fn, *args)
        except (WorkerError, RemoteError) as e:
            return [(None, f"worker: {e}")]

    def close(self) -> None:
        self.worker.close()


def _first_crash(plain: list) -> int | None:
    """The index of the first instruction whose decision would crash TVM (see allowlist.known_crash)."""
    insts, decisions = plain
    for n in range(1, len(insts) + 1):
        if known_crash([insts[:n], [d for d in decisions if d[0] < n]]):
            return n - 1
    return None


def _lines_html(lines: list[str], current: int) -> str:
    rows = []
    for i, line in enumerate(lines, 1):
        style = "background:#fff3b0;font-weight:bold" if i == current else ("color:#999" if i > current else "")
        rows.append(f"<div style='{style}'>{i:>3}  {html.escape(line)}</div>")
    return "<pre style='margin:0'>" + "".join(rows) + "</pre>"


def _tir_html(tir: str | None, before: str | None, error: str | None) -> str:
    """The TIR with the lines that changed since `before` highlighted."""
    if tir is None:
        return f"<pre style='color:#b30000'>{html.escape(error or 'no TIR')}</pre>"
    old = set((before or "").splitlines())
    rows = [f"<div style='background:#e3f6e3'>{html.escape(line)}</div>" if before is not None and line not in old
            else f"<div>{html.escape(line) or '&nbsp;'}</div>" for line in tir.splitlines()]
    return "<pre style='margin:0;max-height:520px;overflow:auto'>" + "".join(rows) + "</pre>"


def stepper(workload: Workload, script: str, *, scheduler: Scheduler | None = None):
    """Walk a script one instruction at a time: the script with the current line marked, and
    the TIR after it, lines changed by that instruction highlighted."""
    import ipywidgets as widgets

    own = scheduler is None
    scheduler = scheduler or Scheduler()
    try:
        steps = scheduler.steps(workload, script)
    finally:
        if own:
            scheduler.close()
    lines = [s.line for s in steps[1:]]
    slider = widgets.IntSlider(value=0, min=0, max=len(steps) - 1, description="step",
                               continuous_update=True, layout=widgets.Layout(width="420px"))
    play = widgets.Play(value=0, min=0, max=len(steps) - 1, interval=900)
    widgets.jslink((play, "value"), (slider, "value"))
    title, left, right = widgets.HTML(), widgets.HTML(), widgets.HTML()

    def show(change=None) -> None:
        i = slider.value
        s = steps[i]
        what = "the unscheduled kernel" if i == 0 else f"after <code>{html.escape(s.line)}</code>"
        title.value = f"<b>{workload.name}</b>: step {i} of {len(steps) - 1}, {what}" + (
            f" <span style='color:#b30000'>({html.escape(s.error)})</span>" if s.error else "")
        left.value = _lines_html(lines, i)
        right.value = _tir_html(s.tir, steps[i - 1].tir if i else None, s.error)

    slider.observe(show, names="value")
    show()
    left.layout = widgets.Layout(width="40%")
    right.layout = widgets.Layout(width="60%")
    return widgets.VBox([widgets.HBox([play, slider]), title, widgets.HBox([left, right])])


# --- the roofline of this machine -----------------------------------------------------------------

@dataclass(frozen=True)
class Roofline:
    """Measured peaks of this machine: float32 FLOP/s of a large BLAS matmul (numpy) and the
    bytes/s of a large array copy. An attainable rate is min(peak, bandwidth x intensity)."""

    flops: float
    bandwidth: float

    @classmethod
    def measure(cls, *, size: int = 1024, megabytes: int = 256) -> "Roofline":
        import numpy as np

        a = np.random.default_rng(0).random((size, size), dtype=np.float32)
        a @ a  # warm up
        best = min(_timed(lambda: a @ a) for _ in range(5))
        src = np.ones(megabytes << 18, dtype=np.float32)
        dst = np.empty_like(src)
        copy = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
        return cls(2 * size ** 3 / best, 2 * src.nbytes / copy)

    def share(self, flops: float, nbytes: float, latency: float) -> float:
        """Achieved / attainable rate of a kernel doing `flops` on `nbytes` in `latency` seconds
        (memory-bound kernels with no arithmetic are measured in bytes/s)."""
        if flops <= 0:
            return nbytes / latency / self.bandwidth
        attainable = min(self.flops, self.bandwidth * flops / max(nbytes, 1))
        return flops / latency / attainable


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def work_of(workload: Workload) -> tuple[float, float]:
    """(FLOPs, bytes of the kernel's arguments) of the unscheduled kernel."""
    import math
    import re

    from tvm.s_tir.analysis import estimate_tir_flops

    from dragonlab.evaluation.replay import arg_specs_of

    nbytes = sum(math.prod(shape) * int(re.search(r"\d+", dtype).group()) // 8  # float16 -> 2, bfloat16 -> 2
                 for shape, dtype in arg_specs_of(workload.mod))
    return float(estimate_tir_flops(workload.mod)), float(nbytes)


# --- where the candidates come from --------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    system: str
    script: str


def candidates_from_records(path: str | Path, target: str = "cpu") -> dict[str, list[Candidate]]:
    """MetaSchedule's fastest measured candidate of every workload in a record store."""
    from dragonlab.search.records import OK, RecordStore

    best: dict[str, tuple[float, list]] = {}
    for r in RecordStore(path).records(target=target):
        if r.status == OK:
            t = statistics.median(r.latencies)
            if r.workload not in best or t < best[r.workload][0]:
                best[r.workload] = (t, r.trace)
    return {k: [Candidate("MetaSchedule best", codec.encode(trace))] for k, (_, trace) in best.items()}


def candidates_from_report(run: str | Path | Report) -> dict[str, list[Candidate]]:
    """Per held-out workload of a report (`dragonlab report`; a run directory or its `Report`):
    each model's fastest correct attempt (any, when none is correct) and each baseline's kernel."""
    from dragonlab.learn.attempts import read_attempts

    report = Path(run.run if isinstance(run, Report) else run) / "report"
    out: dict[str, list[Candidate]] = defaultdict(list)
    for path in sorted(report.glob("attempts-*.jsonl")):
        system = path.stem.removeprefix("attempts-")
        by_key = defaultdict(list)
        for a in read_attempts(path):
            by_key[a.workload].append(a)
        for key, group in by_key.items():
            best = min(group, key=lambda a: a.evaluation.latency or float("inf"))
            out[key].append(Candidate(system.upper() if system in ("sft", "rl") else system, best.script))
    if (report / "baselines.jsonl").exists():
        for d in read_lines(report / "baselines.jsonl"):
            if d["system"] != "unscheduled" and d.get("script") is not None:
                out[d["workload"]].append(Candidate(d["system"], d["script"]))
    return dict(out)


_COLOURS = ("#7f7f7f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")


# --- the comparison widget ------------------------------------------------------------------------

class Comparison:
    """Pick a workload (filter by family and shape) and see, side by side, the unscheduled TIR and
    each system's script with its scheduled TIR; a diff of any two; latencies with their spread
    and each kernel's share of this machine's roofline; an edit box that evaluates a script live."""

    def __init__(self, workloads: dict[str, Workload], candidates: dict[str, list[Candidate]], evaluator, *,
                 roofline: Roofline | None = None, scheduler: Scheduler | None = None):
        import ipywidgets as widgets

        self.workloads = {k: w for k, w in workloads.items() if k in candidates} or dict(workloads)
        self.candidates = candidates
        self.evaluator = evaluator
        self.roofline = roofline or Roofline.measure()
        self.scheduler = scheduler or Scheduler()
        self.rows: dict[str, dict] = {}  # system -> {"script", "evaluation", "tir", "error"}
        families = sorted({w.family for w in self.workloads.values()})
        self.family = widgets.Dropdown(options=["all"] + families, description="family")
        self.shape = widgets.Text(placeholder="e.g. m64 or c32", description="shape")
        self.workload = widgets.Dropdown(description="workload", layout=widgets.Layout(width="520px"))
        self.panels = widgets.HBox(layout=widgets.Layout(overflow="auto"))
        self.left = widgets.Dropdown(description="diff")
        self.right = widgets.Dropdown(description="against")
        self.diff = widgets.HTML()
        self.figure = widgets.Output()
        self.editor = widgets.Textarea(layout=widgets.Layout(width="100%", height="180px"))
        self.run_button = widgets.Button(description="Evaluate", button_style="primary", icon="play")
        self.verdict = widgets.HTML()
        self.family.observe(self._filter, names="value")
        self.shape.observe(self._filter, names="value")
        self.workload.observe(lambda _: self.show(), names="value")
        self.left.observe(lambda _: self._diff(), names="value")
        self.right.observe(lambda _: self._diff(), names="value")
        self.run_button.on_click(lambda _: self.evaluate_edit())
        self.widget = widgets.VBox([
            widgets.HBox([self.family, self.shape]), self.workload, self.panels,
            widgets.HBox([self.left, self.right]), self.diff, self.figure,
            widgets.HTML("<b>Edit a script and evaluate it</b> (decoded by the strict parser, built and run in "
                         "worker processes)"), self.editor, widgets.HBox([self.run_button, self.verdict])])
        self._filter()

    # selection
    def _filter(self, change=None) -> None:
        text = self.shape.value.strip().lower()
        options = [(w.name, k) for k, w in sorted(self.workloads.items(), key=lambda kv: kv[1].name)
                   if self.family.value in ("all", w.family) and text in w.name.lower()]
        self.workload.options = options
        if options and self.workload.value not in [k for _, k in options]:
            self.workload.value = options[0][1]

    def show(self) -> None:
        """Evaluate every candidate of the selected workload and redraw everything."""
        key = self.workload.value
        if key is None:
            return
        w = self.workloads[key]
        systems = [Candidate("unscheduled", "")] + self.candidates.get(key, [])
        evaluations = self.evaluator.evaluate_many([(w, c.script) for c in systems], progress=False)
        self.rows = {}
        for c, e in zip(systems, evaluations):
            tir, err = (w.mod["main"].script(), None) if not c.script else self.scheduler.scheduled(w, c.script)
            self.rows[c.system] = {"script": c.script, "evaluation": e, "tir": tir, "error": err}
        self.panels.children = [self._panel(name, row) for name, row in self.rows.items()]
        names = list(self.rows)
        self.left.options, self.right.options = names, names
        self.left.value, self.right.value = names[0], names[-1]
        self.editor.value = self.rows[names[-1]]["script"]
        self.verdict.value = ""
        self._diff()
        self._plot()

    def _panel(self, name: str, row: dict):
        import ipywidgets as widgets

        e = row["evaluation"]
        verdict = (f"{e.latency * 1e6:.3g} us" if e.latency else f"stopped at {e.stage}") + \
            (f", {e.speedup:.2f}x" if e.speedup and name != "unscheduled" else "")
        head = widgets.HTML(f"<b>{html.escape(name)}</b><br>{html.escape(verdict)}")
        script = widgets.Textarea(value=row["script"] or "(no instructions)", disabled=True,
                                  layout=widgets.Layout(width="100%", height="150px"))
        tir = widgets.HTML(_tir_html(row["tir"], None, row["error"]))
        return widgets.VBox([head, script, tir], layout=widgets.Layout(min_width="330px", width="330px",
                                                                       border="1px solid #ddd", padding="4px"))

    def _diff(self) -> None:
        a, b = self.rows.get(self.left.value), self.rows.get(self.right.value)
        if not a or not b:
            self.diff.value = ""
            return
        table = difflib.HtmlDiff(wrapcolumn=110).make_table(
            (a["tir"] or a["error"] or "").splitlines(), (b["tir"] or b["error"] or "").splitlines(),
            self.left.value, self.right.value, context=True, numlines=2)
        self.diff.value = f"<div style='font-size:11px;max-height:420px;overflow:auto'>{table}</div>"

    def figure_of(self):
        """Latency per repeat (box per system, us) and each kernel's share of the roofline."""
        from plotly.subplots import make_subplots

        flops, nbytes = work_of(self.workloads[self.workload.value])
        fig = make_subplots(rows=1, cols=2, column_widths=[0.62, 0.38],
                            subplot_titles=("latency per repeat (us)", "share of the roofline"))
        timed = [(name, row["evaluation"]) for name, row in self.rows.items() if row["evaluation"].latencies]
        for i, (name, e) in enumerate(timed):
            colour = _COLOURS[i % len(_COLOURS)]
            fig.add_box(y=[t * 1e6 for t in e.latencies], name=name, boxpoints="all", marker_color=colour,
                        row=1, col=1)
            fig.add_bar(x=[name], y=[self.roofline.share(flops, nbytes, e.latency)], marker_color=colour,
                        showlegend=False, row=1, col=2)
        if timed:  # a log axis with room above and below the extreme boxes
            import math

            lo = min(min(e.latencies) for _, e in timed) * 1e6
            hi = max(max(e.latencies) for _, e in timed) * 1e6
            fig.update_yaxes(range=[math.log10(lo / 1.4), math.log10(hi * 1.4)], row=1, col=1)
        fig.update_yaxes(type="log", dtick="D2", row=1, col=1)
        fig.update_yaxes(tickformat=".1%", row=1, col=2)
        fig.update_layout(template="plotly_white", showlegend=False, height=380, width=900,
                          title=f"{self.workloads[self.workload.value].name}: {flops:.3g} FLOPs, "
                                f"{nbytes / 1e3:.3g} kB; peak {self.roofline.flops / 1e9:.3g} GFLOP/s, "
                                f"{self.roofline.bandwidth / 1e9:.3g} GB/s (measured)")
        return fig

    def _plot(self) -> None:
        # The figure goes into the Output widget's state, not through `with self.figure:`. Under
        # papermill, capturing output there makes nbclient send widget updates to the kernel on
        # the shell channel while it waits on that channel for the cell's reply, and it could
        # miss the reply: notebooks 00 and 06 hung at this widget, one time in three under load.
        bundle = self.figure_of()._repr_mimebundle_()  # what fig.show() would display, by plotly's renderer
        self.figure.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)

    def evaluate_edit(self) -> None:
        """Judge the edit box's script; it joins the comparison as "edited"."""
        w = self.workloads[self.workload.value]
        e = self.evaluator.evaluate(w, self.editor.value)
        tir, err = self.scheduler.scheduled(w, self.editor.value) if e.stage != "decode" else (None, e.reason)
        self.rows["edited"] = {"script": self.editor.value, "evaluation": e, "tir": tir, "error": err}
        if e.correct and e.latency:
            speedup = f", {e.speedup:.2f}x the unscheduled kernel" if e.speedup else ""
            self.verdict.value = f"<span style='color:#2b8cbe'>correct: {e.latency * 1e6:.3g} us{speedup}</span>"
        else:
            self.verdict.value = f"<span style='color:#b30000'>stopped at {e.stage}: {html.escape(e.reason or '')}</span>"
        self.panels.children = [self._panel(name, row) for name, row in self.rows.items()]
        self.left.options = self.right.options = list(self.rows)
        self.right.value = "edited"
        self._diff()
        self._plot()

    def close(self) -> None:
        self.scheduler.close()
