"""The replication report: its metrics on hand-made numbers, and the whole report (notebook 06
under papermill) on the tiny fixtures with an LLM behind a loopback chat server."""

import json
import math
import os
from pathlib import Path

import nbformat
import papermill
import pytest
from chat_server import MODEL, serving
from test_notebooks_models import NOTEBOOKS, PLOTLY

from dragonlab.cli import main
from dragonlab.evaluation.evaluate import Evaluation
from dragonlab.learn.attempts import Attempt, read_attempts
from dragonlab.reporting.report import ReportConfig, fast_p, held_out_rows, metrics, pass_at_k, stats
from dragonlab.search.baselines import SearchRun


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(8, 0, 1) == 0.0 and pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 4) == 1.0  # any 4 of 5 include a correct one


def test_speedup_stats_count_incorrect_kernels_as_one():
    s = stats([4.0, None, 0.25, None])
    assert s["geomean"] == pytest.approx(1.0) and s["mean"] == pytest.approx(1.5625)
    assert s["median"] == pytest.approx(1.0) and s["geomean correct"] == pytest.approx(1.0) and s["correct"] == 2
    # fast_p: correct and faster than p x the baseline; a missing baseline leaves the kernel out
    assert fast_p([1.0, 0.5, None, 1.0], [2.0, 0.55, 1.0, None], 1.2) == pytest.approx(1 / 3)
    assert fast_p([1.0, 0.5, None], [2.0, 0.55, 1.0], 1.0) == pytest.approx(2 / 3)


def test_search_runs_say_their_best_at_a_budget_and_when_they_got_there():
    run = SearchRun("w", [3.0, None, 2.0, 1.0], [["a"], None, ["c"], ["d"]], 8.0)
    assert run.best_within(1) == (3.0, ["a"]) and run.best_within(3) == (2.0, ["c"])
    assert run.trials_to_reach(2.5) == 3 and run.trials_to_reach(0.5) is None


def _attempt(split, index, sample, task, workload, latency, reference=None):
    stage = "ok" if latency else "check"
    e = Evaluation(workload, "cpu", stage, None if latency else "wrong", (),
                   (latency,) * 3 if latency else None, reference if latency else None)
    return Attempt(split, index, sample, task, workload, workload, "get C", e)


def _baseline(system, latencies):
    return {k: {"system": system, "workload": k, "evaluation": {"latencies": [t] * 3 if t else None,
                                                                "stage": "ok" if t else "check"}}
            for k, t in latencies.items()}


def test_metrics_on_hand_made_numbers():
    """Two workloads: the model's best-of-2 is 2x slower than search at 4 trials on one and 2x
    faster on the other (geomean 1), and it has no correct kernel at 2 trials' better one."""
    attempts = {"m": [
        _attempt("test", 0, 0, "construction", "a", 4.0), _attempt("test", 0, 1, "construction", "a", 2.0),
        _attempt("test", 1, 0, "construction", "b", None), _attempt("test", 1, 1, "construction", "b", 1.0),
        _attempt("test", 2, 0, "refinement", "a", 5.0, reference=10.0),
        _attempt("test", 2, 1, "refinement", "a", None)]}
    base = {"unscheduled": _baseline("unscheduled", {"a": 8.0, "b": 8.0}),
            "metaschedule@2": _baseline("metaschedule@2", {"a": 2.0, "b": None}),
            "metaschedule@4": _baseline("metaschedule@4", {"a": 1.0, "b": 2.0}),
            "_search": {"a": {"seconds": 40.0, "latencies": [6.0, 3.0, 2.0, 1.0]},
                        "b": {"seconds": 10.0, "latencies": [None, 4.0, 2.0, 0.5]}}}
    config = ReportConfig(k=2, budgets=(2, 4), p=(1.0, 2.0))
    r = metrics(attempts, {}, base, config, ["a", "b"], None)
    m = r["systems"]["m"]
    assert m["construction"]["correct"] == 0.75 and m["refinement"]["correct"] == 0.5
    assert m["construction"]["pass@k"] == {"1": 0.75, "2": 1.0}
    assert m["refinement"]["speedup_vs_input"]["geomean"] == pytest.approx(math.sqrt(2.0))  # 2x and 1 (incorrect)
    assert m["refinement"]["fast_p"]["input script"]["2.0"] == 0.0  # 10/5 = 2 is not faster than 2x
    assert m["construction"]["fast_p"]["metaschedule@4"]["1.0"] == pytest.approx(0.25)  # only b's 1.0 vs 2.0
    vs = r["best_of_k_vs_metaschedule"]["m"]
    assert vs["4"]["geomean_latency_ratio"] == pytest.approx(1.0) and vs["4"]["workloads"] == 2  # 2/1 and 1/2
    assert vs["2"] == {"geomean_latency_ratio": 1.0, "workloads": 1, "no_correct_kernel": 0, "no_search_kernel": 1}
    # search reached the model's 2.0 at its 3rd trial on a (3/4 of 40 s), its 1.0 at the 4th on b
    assert r["trials_to_match"]["m"] == {"a": {"trials": 3, "seconds": 30.0, "searched": 4},
                                         "b": {"trials": 4, "seconds": 10.0, "searched": 4}}
    assert r["baselines"]["metaschedule@4"]["speedup_vs_unscheduled"]["geomean"] == pytest.approx(math.sqrt(32))
    assert r["best_of_k_curve"]["m"]["points"][0]["solved"] == 0.5


def test_held_out_rows_take_one_construction_prompt_per_workload():
    rows = [{"task": "construction", "workload": "a"}] * 3 + [{"task": "refinement", "workload": "a"}] * 3 + \
           [{"task": "construction", "workload": "b"}]
    picked = held_out_rows({"test": rows}, ReportConfig(splits=("test", "test_family"), refinement_per_workload=2))
    assert [(r["task"], r["workload"], r["index"]) for r in picked["test"]] == [
        ("construction", "a", 0), ("refinement", "a", 3), ("refinement", "a", 4), ("construction", "b", 6)]


@pytest.fixture
def run_dir(tmp_path, data, tiny):
    """A run directory with the tiny model as both SFT and RL (the report needs models, not good ones)."""
    run = tmp_path / "run"
    for name in ("sft", "rl"):
        (run / name).mkdir(parents=True)
        (run / name / "model").symlink_to(tiny[0].model_dir)
    (run / "dataset").symlink_to(data)
    return run


def _renders_in_chromium(page: Path, figures: int, tmp_path: Path) -> None:
    """The report page opened from disk in Debian's Chromium draws every figure (no network: plotly.js
    is inlined). The screenshot is kept in $DRAGONLAB_ARTIFACTS when set."""
    import lab_browser

    if lab_browser.chromium() is None or lab_browser.playwright_missing():
        pytest.skip("no Chromium or playwright: `make test` installs both")
    shot = Path(os.environ.get("DRAGONLAB_ARTIFACTS", tmp_path)) / "report_page.png"
    rendered = lab_browser.render_report(page, shot, figures=figures)
    assert rendered.figures == figures >= 4 and rendered.tables >= 8 and shot.stat().st_size > 20_000


def test_the_report_notebook_fills_every_row_and_resumes(run_dir, data, notebook_kernel, monkeypatch, tmp_path):
    import datasets

    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    answers = {row["prompt"]: row["completion"] for row in datasets.load_from_disk(str(data))["train"]}
    with serving() as llm:  # an LLM that answers each prompt with the dataset's reference script, fenced
        llm.contents = lambda k, body: f"```\n{answers.get(body['messages'][1]['content'], 'no idea')}\n```"
        parameters = {"run": str(run_dir), "k": 2, "budgets": [2, 4], "turns": 1, "refinement_per_workload": 1,
                      "splits": ["train"], "constrained": False, "llm_base_url": llm.base_url, "llm_model": MODEL}
        out = tmp_path / "06.ipynb"
        papermill.execute_notebook(str(NOTEBOOKS / "06_evaluate.ipynb"), str(out), parameters=parameters,
                                   kernel_name=notebook_kernel, cwd=str(tmp_path), progress_bar=False)
        served = len(llm.requests)

        report = json.loads((run_dir / "report" / "report.json").read_text())
        llm_name = f"llm-{MODEL}"
        assert set(report["systems"]) == {"sft", "rl", llm_name}
        for name, system in report["systems"].items():
            assert {"construction", "refinement"} <= set(system), name
        assert report["systems"][llm_name]["construction"]["correct"] == 1.0  # the references, judged for real
        assert report["systems"][llm_name]["refinement"]["correct"] == 1.0
        assert {"unscheduled", "random best-of-2", "dlight", "metaschedule@2", "metaschedule@4",
                "rl-seeded metaschedule@4"} == set(report["baselines"])
        for budget in ("2", "4"):  # model best-of-k vs MetaSchedule at N: filled for the LLM's correct kernels
            assert report["best_of_k_vs_metaschedule"][llm_name][budget]["workloads"] == 2
            assert report["best_of_k_vs_metaschedule"][llm_name][budget]["geomean_latency_ratio"] > 0
        assert [r["task"] for r in report["rl_vs_sft"]["rows"]] == ["construction", "refinement", "all"]
        assert report["audit"]["round_trip_failures"] == [] and report["audit"]["decoded"] > 0
        assert set(report["turns"]) == {"sft", "rl"} and report["seeded_search"]["vs_search_alone"]["workloads"] == 2
        html = (run_dir / "report" / "report.html").read_text()
        assert html.count("<table") >= 8 and "Plotly.newPlot" in html and "The paper beside ours" in html
        outputs = [o for c in nbformat.read(out, 4).cells for o in c.get("outputs", [])]
        assert sum(PLOTLY in o.get("data", {}) for o in outputs) >= 4
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)

        # Rerun from the command line: everything is read back, nothing asked or judged again.
        lines = {p.name: p.read_text() for p in (run_dir / "report").glob("*.jsonl")}
        args = ["report", "--run", str(run_dir), "--k", "2", "--budgets", "2", "4", "--turns", "1",
                "--refinement-per-workload", "1", "--splits", "train", "--llm-base-url", llm.base_url,
                "--llm-model", MODEL]
        assert main(args) == 0
        assert {p.name: p.read_text() for p in (run_dir / "report").glob("*.jsonl")} == lines
        assert len(llm.requests) == served
        assert len(read_attempts(run_dir / "report" / f"attempts-{llm_name}.jsonl")) == 2 * 2 * 2  # workloads x tasks x k
        # Other settings would mix with what is there: refused, nothing written.
        assert main(args[:3] + ["--k", "3"] + args[5:]) == 2
        assert {p.name: p.read_text() for p in (run_dir / "report").glob("*.jsonl")} == lines
    _renders_in_chromium(run_dir / "report" / "report.html", html.count("Plotly.newPlot"), tmp_path)  # last: may skip
