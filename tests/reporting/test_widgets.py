"""The stepper and the comparison widget: what they compute, driven as a user would (no browser;
tests/reporting/test_browser.py renders them in JupyterLab)."""

import json
import pytest

from dragonlab.core import codec
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.reporting.widgets import Candidate, Comparison, Roofline, Scheduler, stepper
from dragonlab.search.explore import sample_traces


@pytest.fixture(scope="module")
def matmul_script(quick):
    return codec.encode(sample_traces(quick["matmul"], "cpu", n=1, seed=2)[0].sch.trace)


@pytest.fixture(scope="module")
def scheduler():
    s = Scheduler()
    yield s
    s.close()


def test_steps_go_from_the_unscheduled_kernel_to_the_scheduled_one(quick, matmul_script, scheduler):
    w = quick["matmul"]
    steps = scheduler.steps(w, matmul_script)
    assert len(steps) == len(matmul_script.splitlines()) + 1
    assert steps[0].tir == w.mod["main"].script() and steps[0].line == ""
    assert [s.line for s in steps[1:]] == matmul_script.splitlines()
    assert steps[-1].tir == codec.apply(matmul_script, w.mod).mod["main"].script()
    assert all(s.error is None for s in steps)
    assert len({s.tir for s in steps}) > 3  # the kernel changes as instructions apply


def test_a_bad_script_stops_the_steps_with_the_reason(quick, matmul_script, scheduler):
    w = quick["matmul"]
    steps = scheduler.steps(w, "get C\nloops b0 >3\nfuse l9 l1")
    assert steps[0].error and "line 3" in steps[0].error  # a decode error: nothing applied
    insts, decisions = codec.decode(matmul_script)
    tile = next(i for i, inst in enumerate(insts) if inst[0] == "SamplePerfectTile")
    zero = [[i, [0] + v[1:] if i == tile else v] for i, v in decisions]  # SIGFPE in TVM: refused
    steps = scheduler.steps(w, codec.encode([insts, zero]))
    assert len(steps) == tile + 2 and "zero factor" in steps[-1].error and steps[-1].tir is None
    assert steps[-2].error is None and steps[-2].tir
    assert scheduler.scheduled(w, matmul_script)[1] is None  # the worker is still there


def test_the_stepper_widget_walks_the_script(quick, matmul_script):
    box = stepper(quick["matmul"], matmul_script)
    slider = box.children[0].children[1]
    title, panes = box.children[1], box.children[2]
    assert slider.max == len(matmul_script.splitlines())
    assert "unscheduled" in title.value
    slider.value = 3
    line = matmul_script.splitlines()[2]
    assert "step 3" in title.value and "background:#fff3b0" in panes.children[0].value
    assert line.split()[0] in panes.children[0].value


def test_roofline_share_is_achieved_over_attainable():
    r = Roofline(flops=1e10, bandwidth=1e9)
    assert r.share(1e9, 1e6, 1.0) == pytest.approx(0.1)  # compute-bound: 1e9 FLOP/s of 1e10
    assert r.share(1e6, 1e6, 1e-3) == pytest.approx(1.0)  # intensity 1: attainable 1e9 FLOP/s
    assert r.share(0, 1e6, 1e-2) == pytest.approx(0.1)  # no arithmetic: bytes/s of the bandwidth


def test_the_comparison_judges_every_system_and_an_edited_script(quick, matmul_script, monkeypatch):
    import plotly.io as pio

    monkeypatch.setattr(pio.renderers, "default", "plotly_mimetype")  # what a kernel's renderer gives
    w = quick["matmul"]
    candidates = {w.key: [Candidate("search", matmul_script), Candidate("broken", "get C\nfuse")]}
    with Evaluator("cpu", EvalConfig(workers=1)) as evaluator:
        c = Comparison({w.key: w, quick["softmax"].key: quick["softmax"]}, candidates, evaluator,
                       roofline=Roofline(1e11, 3e10))
        try:
            assert c.workload.options == ((w.name, w.key),)  # only workloads with candidates
            assert list(c.rows) == ["unscheduled", "search", "broken"] and len(c.panels.children) == 3
            assert c.rows["search"]["evaluation"].correct and c.rows["broken"]["evaluation"].stage == "decode"
            assert "stopped at decode" in c.panels.children[2].children[0].value
            assert c.left.value == "unscheduled" and c.right.value == "broken"
            c.right.value = "search"
            assert "<table" in c.diff.value and "for" in c.diff.value
            fig = c.figure_of()
            assert {t.name for t in fig.data if t.type == "box"} == {"unscheduled", "search"}
            # The figure is the Output widget's state, never captured output: under papermill,
            # captured output made nbclient write to the shell channel it awaited a reply on.
            [shown] = c.figure.outputs
            assert c.workloads[c.workload.value].name in json.dumps(shown["data"])
            assert all(0 < t.y[0] < 2 for t in fig.data if t.type == "bar")

            c.editor.value = matmul_script + "\nann b0 my_annotation 1"
            c.evaluate_edit()
            assert "stopped at " in c.verdict.value and "edited" in c.rows
            c.editor.value = matmul_script
            c.evaluate_edit()
            assert "correct" in c.verdict.value and c.right.value == "edited"
            c.shape.value = "no such shape"
            assert c.workload.options == ()
        finally:
            c.close()
