"""The replication report: its metrics on hand-made numbers, the report as data (JSON round trip),
the comparison protocol with a stand-in evaluator, the reporting modules' imports (no cycle), and
the whole report (notebook 06 under papermill) on the tiny fixtures with an LLM behind a loopback
chat server."""

import ast
import itertools
import json
import math
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from dragonlab.testing.chat_server import MODEL, serving
from dragonlab.testing.notebooks import PLOTLY, WIDGET, run_notebook

from dragonlab.cli import main
from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import read_lines
from dragonlab.evaluation.evaluate import Evaluation
from dragonlab.learn.attempts import Attempt, per_workload, read_attempts
from dragonlab.reporting.compare import Comparison, ModelComparison, compare_models
from dragonlab.reporting.metrics import fast_p, metrics, pass_at_k, search_curves, stats
from dragonlab.reporting.report import ReportConfig, held_out_rows, read_report
from dragonlab.reporting.results import Drift, LLMSystem, Match, MatchTime, Ratio, Report
from dragonlab.search.baselines import SearchRun


def test_pass_at_k_is_the_unbiased_estimator():
    assert pass_at_k(8, 0, 1) == 0.0 and pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(5, 2, 4) == 1.0  # any 4 of 5 include a correct one


def test_speedup_stats_count_incorrect_kernels_as_one():
    s = stats([4.0, None, 0.25, None])
    assert s.geomean == pytest.approx(1.0) and s.mean == pytest.approx(1.5625)
    assert s.median == pytest.approx(1.0) and s.geomean_correct == pytest.approx(1.0) and s.correct == 2
    # fast_p: correct and faster than p x the baseline; a missing baseline leaves the kernel out
    assert fast_p([1.0, 0.5, None, 1.0], [2.0, 0.55, 1.0, None], 1.2) == pytest.approx(1 / 3)
    assert fast_p([1.0, 0.5, None], [2.0, 0.55, 1.0], 1.0) == pytest.approx(2 / 3)


def test_search_runs_say_their_best_at_a_budget_and_when_they_got_there():
    run = SearchRun("w", [3.0, None, 2.0, 1.0], [["a"], None, ["c"], ["d"]], 8.0)
    assert run.best_within(1) == (3.0, ["a"]) and run.best_within(3) == (2.0, ["c"])
    assert run.trials_to_reach(2.5) == 3 and run.trials_to_reach(0.5) is None


def test_a_stored_search_is_read_as_far_as_it_went_and_not_searched_again(tmp_path):
    from dragonlab.core.workloads import matmul
    from dragonlab.search import baselines
    from dragonlab.search.records import OK, TIMEOUT, Record, RecordStore

    w = matmul(m=8, n=8, k=8)
    corpus = RecordStore(tmp_path / "corpus", create=True)  # a collection to 2 trials, then its search to 4
    corpus.append([Record(w.key, "cpu", [[f"t{i}"], []], OK, (float(5 - i),), trial=i) for i in (1, 0)])
    corpus.mark_done(w.key, "cpu", 2)
    searched = RecordStore(tmp_path / "corpus", shard="search")
    searched.append([Record(w.key, "cpu", [["t2"], []], TIMEOUT, None, "timed out", trial=2),
                     Record(w.key, "cpu", [["t3"], []], OK, (1.0,), trial=3),
                     Record(w.key, "cpu", [["t4"], []], OK, (4.0,), trial=4)])
    searched.mark_done(w.key, "cpu", 4)
    before = sorted((p.name, p.read_bytes()) for p in (tmp_path / "corpus").iterdir())
    (run,) = baselines.search([w], "cpu", 8, tmp_path / "mine", stored=tmp_path / "corpus", progress=False).values()
    assert run.latencies == [5.0, 4.0, 1.0, 4.0] and run.budget == 4  # trial order, the timeout left out
    assert run.best_within(2) == (4.0, [["t1"], []]) and run.best_within(4) == (1.0, [["t3"], []])
    assert run.best_within(8) is None  # never searched that far: no kernel at that budget
    assert sorted((p.name, p.read_bytes()) for p in (tmp_path / "corpus").iterdir()) == before
    assert not list((tmp_path / "mine").glob("records*"))  # nothing searched here


def _attempt(split, index, sample, task, workload, latency, reference=None):
    stage = "ok" if latency else "check"
    e = Evaluation(workload, "cpu", stage, None if latency else "wrong", (),
                   (latency,) * 3 if latency else None, reference if latency else None)
    return Attempt(split, index, sample, task, workload, workload, "get C", e)


def _baseline(system, latencies):
    return {k: {"system": system, "workload": k, "evaluation": {"latencies": [t] * 3 if t else None,
                                                                "stage": "ok" if t else "check"}}
            for k, t in latencies.items()}


def _hand_made_report(rl_vs_sft=None, seconds: float | None = 1.0, together: dict | None = None,
                      seeded: dict | None = None, contention: tuple[float | None, ...] = (),
                      unscheduled_in_batch: float | None = None) -> Report:
    attempts = {"m": [replace(a, seconds=seconds) for a in (
        _attempt("test", 0, 0, "construction", "a", 4.0), _attempt("test", 0, 1, "construction", "a", 2.0),
        _attempt("test", 1, 0, "construction", "b", None), _attempt("test", 1, 1, "construction", "b", 1.0),
        _attempt("test", 2, 0, "refinement", "a", 5.0, reference=10.0),
        _attempt("test", 2, 1, "refinement", "a", None))]}
    attempts["m"] = [replace(a, evaluation=replace(a.evaluation, contention=c))
                     for a, c in itertools.zip_longest(attempts["m"], contention)]
    if unscheduled_in_batch is not None:  # the construction attempts' reference, timed in their batch
        attempts["m"] = [replace(a, evaluation=replace(a.evaluation, reference_latency=unscheduled_in_batch))
                         if a.task == "construction" and a.evaluation.latency else a for a in attempts["m"]]
    base = {"unscheduled": _baseline("unscheduled", {"a": 8.0, "b": 8.0}),
            "metaschedule@2": _baseline("metaschedule@2", {"a": 2.0, "b": None}),
            "metaschedule@4": _baseline("metaschedule@4", {"a": 1.0, "b": 2.0}),
            "random best-of-2": _baseline("random best-of-2", {"a": 4.0, "b": 4.0}),
            "_search": {"a": {"seconds": 40.0, "latencies": [6.0, 3.0, 2.0, 1.0]},
                        "b": {"seconds": None, "latencies": [None, 4.0, 2.0, 0.5]}},  # a stored search
            "_seeded": {"b": {"seconds": 12.0, "trials": 3}}}
    if together is not None:
        base["_together"] = together
    if seeded is not None:
        base["m-seeded metaschedule@2"] = _baseline("m-seeded metaschedule@2", seeded)
    config = ReportConfig(k=2, budgets=(2, 4), p=(1.0, 2.0))
    turns = {"m": [{"split": "test", "index": 0, "turn": t, "workload": "a", "task": task, "latency": latency}
                   for t, task, latency in ((0, "construction", 4.0), (1, "refinement", 2.0))]}
    return metrics(attempts, turns, base, config, ["a", "b"], rl_vs_sft)


def test_metrics_on_hand_made_numbers():
    """Two workloads: the model's best-of-2 is 2x slower than search at 4 trials on one and 2x
    faster on the other (geomean 1), and it has no correct kernel at 2 trials' better one."""
    r = _hand_made_report()
    m = r.systems["m"]
    assert m.construction.correct == 0.75 and m.refinement.correct == 0.5 and m.task("all").attempts == 6
    assert m.construction.pass_at_k == {1: 0.75, 2: 1.0}
    # intervals resample prompts, a prompt's attempts together: 2 of 2 correct at one, 1 of 2 at
    # the other (0.25 would be a resample of single attempts); speedups 2x, 4x at one and 1x
    # (incorrect), 8x at the other have the same geomean, so every resample does too
    assert m.construction.correct_interval == (0.5, 1.0)
    assert m.construction.speedup_vs_unscheduled.interval == (pytest.approx(2 ** 1.5), pytest.approx(2 ** 1.5))
    assert m.construction.speedup_vs_input is None
    assert m.refinement.speedup_vs_input.geomean == pytest.approx(math.sqrt(2.0))  # 2x and 1 (incorrect)
    assert m.refinement.fast_p["input script"][2.0] == 0.0  # 10/5 = 2 is not faster than 2x
    assert m.construction.fast_p["metaschedule@4"][1.0] == pytest.approx(0.25)  # only b's 1.0 vs 2.0
    vs = r.best_of_k_vs_metaschedule["m"]
    assert vs[4].geomean_latency_ratio == pytest.approx(1.0) and vs[4].workloads == 2  # 2/1 and 1/2
    assert vs[2] == Ratio(geomean_latency_ratio=1.0, workloads=1, no_correct_kernel=0, no_search_kernel=1)
    # search reached the model's 2.0 at its 3rd trial on a (3/4 of 40 s), its 1.0 at the 4th on b
    assert r.trials_to_match["m"] == {"a": Match(trials=3, seconds=30.0, searched=4),
                                      "b": Match(trials=4, seconds=None, searched=4)}
    # Within 10% of MetaSchedule@4 (1.0 on a, 2.0 on b): the model never on a; on b its 2nd attempt
    # (1.0), after 2 s. Search's own best within 10%: a's 4th trial of 10 s each; b's 4th, clocked
    # by the seeded search at 12 s / 3 trials: 16 s. Search / model: 0 on a, 8 on b.
    t = r.time_to_match["m"]
    assert (t.reference, t.workloads, t.model_reached) == ("metaschedule@4", 2, 1)
    assert t.per_workload == {"a": MatchTime(None, None, 4, 40.0, "search"),
                              "b": MatchTime(2, 2.0, 4, 16.0, "seeded search")}
    assert (t.median_model_seconds, t.median_search_seconds, t.median_speedup) == (2.0, 28.0, 4.0)
    assert _hand_made_report(seconds=None).time_to_match["m"].workloads == 0  # attempts written untimed
    assert r.baselines["metaschedule@4"].speedup_vs_unscheduled.geomean == pytest.approx(math.sqrt(32))
    assert r.best_of_k_curve["m"].points[0].solved == 0.5
    assert r.best_of_k_curve["m"].points[-1].vs_metaschedule == vs  # best-of-j at j = k is best-of-k
    first = r.best_of_k_curve["m"].points[0].vs_metaschedule[4]  # best-of-1: 4/1 on a, none correct on b
    assert (first.geomean_latency_ratio, first.workloads, first.no_correct_kernel) == (pytest.approx(4.0), 1, 1)
    assert [p.geomean_speedup for p in r.turns["m"].points] == [2.0, 4.0, 4.0, 4.0]  # 8/4, 8/2 from turn 1 on
    assert r.seeded_search is None and set(search_curves(r)) == {"m", "random best-of-2"}
    # best-of-2 against 2 random samples: 2/4 on a, 1/4 on b; the interval resamples the two workloads
    random = r.best_of_k_vs_random["m"]
    assert random.geomean_latency_ratio == pytest.approx(math.sqrt(0.125)) and random.workloads == 2
    assert random.interval == (pytest.approx(0.25), pytest.approx(0.5))


def test_best_of_k_against_search_takes_the_kernels_timed_side_by_side():
    """Where the report timed each workload's kernels again side by side, best-of-k against
    MetaSchedule (and random's) is their ratio, not that of the latencies first judged."""
    together = {"a": {"m": 3.0, "metaschedule@2": 3.0, "metaschedule@4": 1.5, "random best-of-2": 6.0},
                "b": {"m": 1.0, "metaschedule@4": 4.0, "random best-of-2": 2.0}}
    r = _hand_made_report(together=together)
    vs = r.best_of_k_vs_metaschedule
    assert vs["m"][4].geomean_latency_ratio == pytest.approx(math.sqrt(2.0 * 0.25))  # 3/1.5 and 1/4
    assert (vs["m"][2].geomean_latency_ratio, vs["m"][2].workloads, vs["m"][2].no_search_kernel) == (1.0, 1, 1)
    assert vs["random best-of-2"][4].geomean_latency_ratio == pytest.approx(math.sqrt(4.0 * 0.5))
    # best-of-k against random best-of-k too: 3/6 on a, 1/2 on b
    assert r.best_of_k_vs_random["m"].geomean_latency_ratio == pytest.approx(0.5)
    assert r.timed_side_by_side and not _hand_made_report().timed_side_by_side
    # a baseline against search, as timed side by side too: the seeded search judged at 1.0 on both
    # workloads, timed 3.0 and 2.0 beside search's 1.5 and 4.0
    together["a"]["m-seeded metaschedule@2"], together["b"]["m-seeded metaschedule@2"] = 3.0, 2.0
    seeded = _hand_made_report(together=together, seeded={"a": 1.0, "b": 1.0}).baselines["m-seeded metaschedule@2"]
    assert seeded.vs_metaschedule[4].geomean_latency_ratio == pytest.approx(math.sqrt(2.0 * 0.5))
    judged = _hand_made_report(seeded={"a": 1.0, "b": 1.0}).baselines["m-seeded metaschedule@2"]
    assert judged.vs_metaschedule[4].geomean_latency_ratio == pytest.approx(math.sqrt(1.0 * 0.5))  # 1/1, 1/2
    # wall time to a kernel within 10% of MetaSchedule@4: search's latency taken to the clock of the
    # model's attempts through their ratio timed side by side (as judged: 1.0 on a, 2.0 on b; the
    # model got there on b only). Timed equal on a, search's is 2.0 as judged there, which the
    # model's 2nd attempt reaches; timed 2x faster than the model's 1.0 on b, none of it does.
    paired = {"a": {"m": 3.0, "metaschedule@4": 3.0}, "b": {"m": 1.0, "metaschedule@4": 0.5}}
    assert _hand_made_report(together=paired).time_to_match["m"].per_workload == {
        "a": MatchTime(2, 2.0, 4, 40.0, "search"), "b": MatchTime(None, None, 4, 16.0, "seeded search")}
    # a kernel correct when judged but not when timed again counts as no correct kernel
    together["b"]["m"] = None
    assert _hand_made_report(together=together).best_of_k_vs_metaschedule["m"][4].no_correct_kernel == 1


def test_side_by_side_timing_resumes_and_times_a_workload_again_for_a_system_that_joined(tmp_path):
    """The report's side-by-side timing: one group per workload (each script once), a line per
    workload in together.jsonl; a rerun times nothing again, unless a system (an LLM) joined or a
    system's kernel changed."""
    from dragonlab.reporting.report import _side_by_side

    class Timer:
        def __init__(self):
            self.groups = []

        def time_together(self, groups, progress=False):
            self.groups.append([(w.key, list(scripts)) for w, scripts in groups])
            return [[(len(script),) * 3 for script in scripts] for _, scripts in groups]

    class W:
        def __init__(self, key):
            self.key = key

    def attempt(workload, script, latency):
        return replace(_attempt("test", 0, 0, "construction", workload, latency), script=script)

    held = [W("a"), W("b")]
    base = {"metaschedule@2": {"a": {"script": "ms a", "evaluation": {"latencies": [1.0]}},
                               "b": {"script": "ms bb", "evaluation": {"latencies": None}}},
            "unscheduled": {"a": {"script": "", "evaluation": {"latencies": [9.0]}}},  # the reference: not timed
            "_search": {"a": {"seconds": 1.0, "latencies": [1.0]}}}
    config = ReportConfig(k=2, budgets=(2,))
    attempts = {"m": [attempt("a", "slow", 4.0), attempt("a", "ms a", 2.0), attempt("b", "m b", 1.0)]}
    timer, path = Timer(), tmp_path / "together.jsonl"
    got = _side_by_side(timer, held, attempts, base, config, path, progress=False)
    assert timer.groups == [[("a", ["ms a"]), ("b", ["m b"])]]  # the best of m on a is MetaSchedule's kernel
    assert got == {"a": {"m": 4.0, "metaschedule@2": 4.0}, "b": {"m": 3.0}}
    assert _side_by_side(timer, held, attempts, base, config, path, progress=False) == got
    assert len(timer.groups) == 1  # nothing timed again
    attempts["llm-x"] = [attempt("b", "llm's b", 2.0)]
    got = _side_by_side(timer, held, attempts, base, config, path, progress=False)
    assert timer.groups[1] == [("b", ["m b", "llm's b"])] and got["b"] == {"m": 3.0, "llm-x": 7.0}
    # every baseline is timed beside them (a report written before the seeded search and dlight were)
    base["m-seeded metaschedule@8"] = {"a": {"script": "seeded", "evaluation": {"latencies": [0.5]}}}
    got = _side_by_side(timer, held, attempts, base, config, path, progress=False)
    assert timer.groups[2] == [("a", ["ms a", "seeded"])] and got["a"]["m-seeded metaschedule@8"] == 6.0
    # m's attempts judged again choose another best on a: a is timed again, b is not
    attempts["m"][0] = attempt("a", "slow", 1.0)
    got = _side_by_side(timer, held, attempts, base, config, path, progress=False)
    assert timer.groups[3] == [("a", ["slow", "ms a", "seeded"])] and got["a"]["m"] == 4.0
    assert _side_by_side(timer, held, attempts, base, config, path, progress=False) == got and len(timer.groups) == 4


def test_the_bootstrap_interval_of_a_geomean_is_seeded_and_narrows_with_workloads():
    from dragonlab.reporting.compare import geomean_interval

    assert geomean_interval([0.5]) is None
    few = geomean_interval([0.5, 0.8, 1.1, 0.7])
    many = geomean_interval([0.5, 0.8, 1.1, 0.7] * 25)
    assert few == geomean_interval([0.5, 0.8, 1.1, 0.7])  # seeded
    assert few[0] < many[0] < 0.72 < many[1] < few[1]  # both hold the geomean, 0.752
    assert many[1] < 0.85  # with 100 workloads it excludes 1


def test_the_report_round_trips_through_json_in_report_json_s_shape(tmp_path):
    cmp = ModelComparison(0.1, 3, (Comparison("all", 2, 0.5, 1.0, 0.1, 0.2, 1, 1, 0, 0, 0, 1, 0.1, 1.0),))
    r = replace(_hand_made_report(cmp), workload_names={"a": "wa", "b": "wb"}, run="/runs/x", target="llvm",
                models={"m": "/runs/x/m/model"}, llm=LLMSystem("llm-x", "http://127.0.0.1:1/v1", "x"),
                sources=("attempts-m.jsonl", "search"))
    assert Report.from_json(r.to_json()) == r
    text = json.dumps(r.to_json(), indent=1)
    assert Report.from_json(json.loads(text)) == r
    # report.json keeps the shape it had as a plain dict: existing run directories still load
    d = json.loads(text)
    assert list(d) == ["config", "paper", "held_out_workloads", "systems", "baselines", "best_of_k",
                       "best_of_k_vs_metaschedule", "trials_to_match", "turns", "best_of_k_curve", "rl_vs_sft",
                       "audit", "search_seconds", "workload_names", "run", "target", "models", "llm", "sources",
                       "best_of_k_vs_random", "time_to_match", "timed_side_by_side"]
    m = d["systems"]["m"]
    assert list(m) == ["summary", "construction", "refinement", "all"] and "speedup_vs_input" not in m["construction"]
    assert m["construction"]["pass@k"] == {"1": 0.75, "2": 1.0} and "geomean correct" in m["all"]["speedup_vs_unscheduled"]
    assert m["refinement"]["fast_p"]["input script"] == {"1.0": 1.0, "2.0": 0.0}
    assert d["best_of_k_vs_metaschedule"]["m"]["2"] == {"geomean_latency_ratio": 1.0, "workloads": 1,
                                                        "no_correct_kernel": 0, "no_search_kernel": 1}
    assert d["paper"]["rl wins construction"] == "88/102" and d["config"]["budgets"] == [2, 4]
    assert d["rl_vs_sft"]["rows"][0]["wins"] == 1 and d["llm"]["model"] == "x"
    # unknown keys (a newer writer) are ignored; optional ones may be missing
    assert Report.from_json({**d, "new": 1}) == r
    assert Report.from_json({k: v for k, v in d.items() if k != "llm"}) == replace(r, llm=None)
    (tmp_path / "report.json").write_text(text)
    assert read_report(tmp_path) == read_report(tmp_path / "report.json") == r


def test_the_report_counts_attempts_timed_beside_other_work():
    from dragonlab.cli.reporting import summary_text
    from dragonlab.reporting.report_html import sections

    r = _hand_made_report(contention=(0.9, 0.1, None, 0.3))  # at or above a quarter of a core: contended
    assert r.audit.contended == {"m": 2}
    assert [row.contended for row in r.systems["m"].summary] == [2, 0, 2]  # construction, refinement, all
    assert "warning: Attempts timed while other processes kept the cores busy (m 2)" in summary_text(r)
    assert "busy (m 2)" in dict(sections(r))["Audit"]
    assert "warning" not in summary_text(_hand_made_report())
    assert Report.from_json(r.to_json()).audit.contended == {"m": 2}


def test_the_report_says_when_attempts_were_judged_at_another_speed_than_the_baselines():
    """Speedups divide by the baselines' unscheduled kernel: attempts whose batches timed that
    kernel 3x slower (another machine, a loaded one) are flagged; at 1.05x they are not."""
    from dragonlab.cli.reporting import summary_text
    from dragonlab.reporting.report_html import sections

    same = _hand_made_report(unscheduled_in_batch=8.4)  # the baselines timed it at 8.0
    assert same.audit.reference_drift["m"] == Drift(prompts=2, geomean=pytest.approx(1.05), off=0)
    assert same.audit.warnings() == [] and "warning" not in summary_text(same)
    other = _hand_made_report(unscheduled_in_batch=24.0)
    assert other.audit.reference_drift["m"] == Drift(prompts=2, geomean=pytest.approx(3.0), off=2)
    assert "warning: The unscheduled kernel, timed in the attempts' batches, ran at another speed" in summary_text(other)
    assert "m 3.00x, 2 of 2 prompts off" in dict(sections(other))["Audit"]
    assert Report.from_json(other.to_json()).audit == other.audit
    assert _hand_made_report().audit.reference_drift["m"] == Drift(prompts=0, geomean=None, off=0)


def test_the_page_and_figures_read_a_report():
    from dragonlab.reporting.report_html import figures, sections

    r = replace(_hand_made_report(), workload_names={"a": "wa", "b": "wb"}, run="/runs/x", target="llvm")
    tables = dict(sections(r))
    assert "<td>m</td><td>construction</td><td>75.0%</td><td>100.0%</td>" in tables["pass@k"]
    assert "round-trip failures: 0" in tables["Audit"] and "/runs/x/report/" in tables["Sources"]
    figs = figures(r)
    search = {t.name: (list(t.x), list(t.y)) for t in figs["search"].data}
    assert search == {"m": ([2, 4], [pytest.approx(1.0), pytest.approx(1.0)]),
                      "random best-of-2": ([2, 4], [pytest.approx(2.0), pytest.approx(math.sqrt(8))])}
    random = tables["Model best-of-2 vs 2 random design-space samples (geomean latency ratio, bootstrap 95% interval "
                    "over workloads; < 1: faster than the samples)"]
    assert "<td>m</td><td>0.354x</td><td>0.25x to 0.5x</td><td>2</td>" in random
    assert [t.name for t in figs["latency"].data][:1] == ["m best-of-k"] and list(figs["latency"].data[0].y) == ["wa", "wb"]
    # best-of-1: 2x on a, none correct on b (1x): geomean sqrt(2), the two prompts resampled: 1x to 2x
    first = figs["scaling"].data[0]
    assert (first.y[0], first.error_y.array[0], first.error_y.arrayminus[0]) == (
        pytest.approx(math.sqrt(2)), pytest.approx(2 - math.sqrt(2)), pytest.approx(math.sqrt(2) - 1))
    assert "<td>2.83x (2.83x to 2.83x)</td>" in tables[next(t for t in tables if t.startswith("Speedups"))]


class _SideBySide:
    """An evaluator whose kernels, timed side by side, take `latencies[(workload, script)]` seconds,
    A's second slot `noise[workload]` times A's first."""

    def __init__(self, latencies: dict, noise: dict):
        self.latencies, self.noise, self.groups = latencies, noise, []

    def time_together(self, groups, rounds=3, progress=False):
        self.groups.append(groups)
        return [[(self.latencies[(w, s)] * (self.noise[w] if i == 2 else 1),) * rounds for i, s in enumerate(scripts)]
                for w, scripts in groups]


def test_compare_models_times_both_kernels_side_by_side_and_measures_the_noise_against_a_itself():
    sft = [_attempt("test", 0, 0, "construction", "a", 4.0), _attempt("test", 1, 0, "construction", "b", 2.0),
           _attempt("val", 0, 0, "refinement", "c", 4.0), _attempt("val", 1, 0, "refinement", "d", 1.0)]
    rl = [_attempt("test", 0, 0, "construction", "a", 2.0), _attempt("test", 1, 0, "construction", "b", 9.0),
          _attempt("val", 0, 0, "refinement", "c", None), _attempt("val", 1, 0, "refinement", "d", 1.0)]
    rl = [replace(x, script="get C\nloops b0 >3") for x in rl]
    # the judged latencies above are not what decides: the kernels timed side by side are
    timed = {("a", "get C"): 4.0, ("a", "get C\nloops b0 >3"): 3.0, ("b", "get C"): 2.0,
             ("b", "get C\nloops b0 >3"): 2.1, ("d", "get C"): 1.0, ("d", "get C\nloops b0 >3"): 1.5}
    evaluator = _SideBySide(timed, {"a": 1.0, "b": 1.1, "d": 0.95})
    result = compare_models(evaluator, {k: k for k in "abcd"}, sft, rl, rounds=2)
    (groups,) = evaluator.groups  # one call, only where both are correct, A's kernel twice
    assert groups == [(w, ["get C", "get C\nloops b0 >3", "get C"]) for w in "abd"]
    assert result.retimed == 3 and result.threshold == pytest.approx(0.1)  # the largest of 0%, 10%, 5%
    construction, refinement, overall = result.rows
    assert (construction.wins, construction.ties, construction.losses) == (1, 1, 0)  # 0.75x wins, 1.05x ties
    assert (refinement.losses, refinement.only_a, overall.both_correct) == (1, 1, 3)
    assert "noise threshold 10.0%: SFT's kernel against itself, timed side by side with RL's on 3" \
        in result.text("SFT", "RL")
    assert ModelComparison.from_json(result.to_json()) == result
    older = {k: v for k, v in result.to_json().items() if k != "timings"}  # written before timings were kept
    assert ModelComparison.from_json(older).timings == ()


def test_a_killed_comparison_keeps_the_pairs_it_timed_and_a_rerun_times_only_the_rest(tmp_path):
    from dragonlab.reporting.compare import time_pairs

    sft = [_attempt("test", i, 0, "construction", w, 1.0) for i, w in enumerate("abcde")]
    rl = [replace(x, script="get C\nloops b0 >3") for x in sft]
    timed = {(w, s): t for w in "abcde" for s, t in (("get C", 2.0), ("get C\nloops b0 >3", 1.0))}
    keys = {w: w for w in "abcde"}

    class Killed(_SideBySide):
        def time_together(self, groups, rounds=3, progress=False):
            if len(self.groups) == 2:
                raise KeyboardInterrupt  # killed while timing the third chunk
            return super().time_together(groups, rounds, progress)

    record = tmp_path / "rl-vs-sft.jsonl"
    with pytest.raises(KeyboardInterrupt):
        time_pairs(Killed(timed, dict.fromkeys("abcde", 1.0)), keys, sft, rl, record=record, chunk=2)
    assert len(record.read_text().splitlines()) == 4  # two chunks of two pairs, on disk
    again = _SideBySide(timed, dict.fromkeys("abcde", 1.0))
    first = time_pairs(again, keys, sft, rl, record=record, chunk=2)
    assert [[w for w, _ in g] for g in again.groups] == [["e"]]  # only the pair it lacked
    assert [t.index for t in first] == [0, 1, 2, 3, 4] and {t.change for t in first} == {math.log(0.5)}
    # a line counts for its pair only while both scripts are the ones it timed
    rl[1] = replace(rl[1], script="get C\nloops b0 >4")
    timed[("b", "get C\nloops b0 >4")] = 4.0
    again.groups.clear()
    second = time_pairs(again, keys, sft, rl, record=record, chunk=2)
    assert [[w for w, _ in g] for g in again.groups] == [["b"]] and second[1].change == pytest.approx(math.log(2))
    # compare_models with the record reads it all back: nothing is timed
    again.groups.clear()
    assert compare_models(again, keys, sft, rl, record=record).rows[-1].losses == 1 and again.groups == []
    # a record that is not one names itself and its line
    record.write_text(record.read_text() + '{"split": "test"}\n')
    with pytest.raises(ValueError, match=r"rl-vs-sft.jsonl:7: KeyError"):
        time_pairs(again, keys, sft, rl, record=record)


def test_a_clustered_bootstrap_resamples_a_prompt_s_attempts_together():
    from dragonlab.reporting.compare import geomean_interval, mean_interval

    assert mean_interval([1.0, 0.0], ["p", "p"]) is None  # one prompt: nothing to resample
    # 8 prompts of 8 attempts each; a prompt is either all correct or all wrong
    values = [float(i % 2) for i in range(8) for _ in range(8)]
    prompts = [i for i in range(8) for _ in range(8)]
    apart, together = mean_interval(values), mean_interval(values, prompts)
    assert apart[0] < 0.5 < apart[1] and together[0] < 0.5 < together[1]
    assert together[1] - together[0] > 2 * (apart[1] - apart[0])  # 8 draws, not 64
    low, high = geomean_interval([0.5, 0.8, 1.1, 0.7])
    assert (math.log(low), math.log(high)) == pytest.approx(mean_interval([math.log(x) for x in (0.5, 0.8, 1.1, 0.7)]))


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The dragonlab modules `path` imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            while name.startswith("dragonlab.") and name not in known:
                name = name.rpartition(".")[0]
            if name in known and name != module:
                out.add(name)
    return out


def test_the_reporting_modules_import_without_a_cycle():
    root = Path(__file__).resolve().parents[2]
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (root / "dragonlab").rglob("*.py")}
    graph = {m: _imports(p, m, set(files)) for m, p in files.items()}
    for start in [m for m in graph if m.startswith("dragonlab.reporting.")]:
        stack, seen = [(start, (start,))], set()
        while stack:
            module, path = stack.pop()
            for nxt in graph[module]:
                assert nxt != start, f"import cycle: {' -> '.join(path + (nxt,))}"
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + (nxt,)))
    assert "dragonlab.reporting.report" not in graph["dragonlab.reporting.plots"] | graph["dragonlab.reporting.report_html"]


def test_held_out_rows_take_one_construction_prompt_per_workload():
    rows = [{"task": "construction", "workload": "a"}] * 3 + [{"task": "refinement", "workload": "a"}] * 3 + \
           [{"task": "construction", "workload": "b"}]
    picked = held_out_rows({"test": rows}, ReportConfig(splits=("test", "test_family"), refinement_per_workload=2))
    assert [(r["task"], r["workload"], r["index"]) for r in picked["test"]] == [
        ("construction", "a", 0), ("refinement", "a", 3), ("refinement", "a", 4), ("construction", "b", 6)]
    assert [(r["task"], r["index"]) for r in per_workload(rows, None)] == [
        ("construction", 0), ("refinement", 3), ("refinement", 4), ("refinement", 5), ("construction", 6)]


@pytest.fixture
def run_dir(tmp_path, data, tiny):
    """A run directory with the tiny model as both SFT and RL (the report needs models, not good
    ones), RL's a copy (a test changes its weights)."""
    run = tmp_path / "run"
    for name in ("sft", "rl"):
        (run / name).mkdir(parents=True)
    (run / "sft" / "model").symlink_to(tiny[0].model_dir)
    shutil.copytree(tiny[0].model_dir, run / "rl" / "model")
    (run / "dataset").symlink_to(data)
    return run


def _judged(run: Path) -> dict[str, str]:
    """What a report holds as judged: its record files (but the sessions' machine lines)."""
    return {p.name: p.read_text() for p in (run / "report").glob("*.jsonl") if p.name != "machine.jsonl"}


def _renders_in_chromium(page: Path, figures: int, tmp_path: Path) -> None:
    """The report page opened from disk in Debian's Chromium draws every figure (no network: plotly.js
    is inlined). The screenshot is kept in $DRAGONLAB_ARTIFACTS when set."""
    from dragonlab.testing import browser as lab_browser

    if lab_browser.chromium() is None or lab_browser.playwright_missing():
        pytest.skip("no Chromium or playwright: `make test` installs both")
    shot = Path(os.environ.get("DRAGONLAB_ARTIFACTS", tmp_path)) / "report_page.png"
    rendered = lab_browser.render_report(page, shot, figures=figures)
    assert rendered.figures == figures >= 4 and rendered.tables >= 8 and shot.stat().st_size > 20_000


def test_an_evaluator_that_times_otherwise_than_the_report_says_is_refused_before_anything_is_written(data,
                                                                                                         tmp_path):
    """The report's latencies are its evaluator's: one handed to `run_report` must time as the
    config's `measure` says, and judge the dataset's target."""
    from dragonlab.evaluation.evaluate import EvalConfig, Evaluator
    from dragonlab.reporting.report import run_report
    from dragonlab.search.config import MeasureConfig

    run = tmp_path / "run"
    run.mkdir()
    (run / "dataset").symlink_to(data)
    config = ReportConfig(splits=("train",), measure=MeasureConfig(min_repeat_ms=1))
    with Evaluator("cpu") as evaluator:
        with pytest.raises(InputError, match=r"the evaluator times with MeasureConfig\(.*min_repeat_ms=40.*\), the "
                                             r"report's config says MeasureConfig\(.*min_repeat_ms=1"):
            run_report(run, config, evaluator=evaluator, progress=False)
    with Evaluator("cuda-sm80", EvalConfig(measure=config.measure)) as evaluator:
        with pytest.raises(InputError, match="the evaluator judges cuda-sm80, the dataset's held-out splits cpu"):
            run_report(run, config, evaluator=evaluator, progress=False)
    assert sorted(p.name for p in run.iterdir()) == ["dataset"]


def test_the_report_notebook_fills_every_row_and_resumes(run_dir, data, notebook_kernel, monkeypatch, tmp_path,
                                                         capsys):
    import datasets

    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    answers = {row["prompt"]: row["completion"] for row in datasets.load_from_disk(str(data))["train"]}
    with serving() as llm:  # an LLM that answers each prompt with the dataset's reference script, fenced
        llm.contents = lambda k, body: f"```\n{answers.get(body['messages'][1]['content'], 'no idea')}\n```"
        # Kernels timed in repeats of 1 ms, not 40: timing was a third of this test's CPU
        parameters = {"run": str(run_dir), "k": 2, "best_of": 3, "budgets": [2, 4], "seeded_budget": 2,
                      "population": 64, "min_repeat_ms": 1, "turns": 1, "refinement_per_workload": 1,
                      "splits": ["train"], "constrained": False, "llm_base_url": llm.base_url, "llm_model": MODEL}
        ran = run_notebook("06_evaluate", parameters, notebook_kernel, tmp_path)
        served = len(llm.requests)

        report = read_report(run_dir / "report")
        assert Report.from_json(report.to_json()) == report
        assert report.to_json() == json.loads((run_dir / "report" / "report.json").read_text())
        llm_name = f"llm-{MODEL}"
        assert set(report.systems) == {"sft", "rl", llm_name} and report.llm.system == llm_name
        for name, system in report.systems.items():
            assert system.construction and system.refinement, name
            # best_of 3 attempts at each construction prompt, k = 2 at refinement ones
            assert max(system.construction.pass_at_k) == 2 and max(system.refinement.pass_at_k) == 2
            assert system.construction.attempts == 3 * system.construction.prompts
            assert [p.k for p in report.best_of_k_curve[name].points] == [1, 2, 3]
        assert report.systems[llm_name].construction.correct == 1.0  # the references, judged for real
        assert report.systems[llm_name].refinement.correct == 1.0
        assert {"unscheduled", "random best-of-2", "dlight", "metaschedule@2", "metaschedule@4",
                "rl-seeded metaschedule@2"} == set(report.baselines)
        for budget in (2, 4):  # model best-of-k vs MetaSchedule at N: filled for the LLM's correct kernels
            assert report.best_of_k_vs_metaschedule[llm_name][budget].workloads == 2
            assert report.best_of_k_vs_metaschedule[llm_name][budget].geomean_latency_ratio > 0
        # ... from their kernels timed again side by side, three rounds each
        assert report.timed_side_by_side
        together = list(read_lines(run_dir / "report" / "together.jsonl"))
        assert len(together) == 2 and all(len(d["latencies"][llm_name]) == 3 and
                                          len(d["latencies"]["metaschedule@4"]) == 3 for d in together)
        assert [r.task for r in report.rl_vs_sft.rows] == ["construction", "refinement", "all"]
        # every attempt paired, sample by sample (compared_draws 4 > best_of 3 and k 2): 2 workloads' prompts
        assert [r.prompts for r in report.rl_vs_sft.rows] == [2 * 3, 2 * 2, 10]
        assert report.audit.round_trip_failures == () and report.audit.decoded > 0
        assert set(report.turns) == {"sft", "rl"} and report.seeded_search.trials == 2
        seeded = report.baselines[report.seeded_search.system].vs_metaschedule  # at 2 trials, against 2 and 4
        assert set(seeded) == {2, 4} and all(r.workloads == 2 for r in seeded.values())
        # every system's attempts are timed, and the plain search (run here) kept its wall time
        assert {n: (t.workloads, t.reference) for n, t in report.time_to_match.items()} == {
            n: (2, "metaschedule@4") for n in report.systems}
        html = (run_dir / "report" / "report.html").read_text()
        assert html.count("<table") >= 8 and "Plotly.newPlot" in html and "The paper beside ours" in html
        assert ran.count(PLOTLY) >= 4 and ran.count(WIDGET) >= 1
        # ... and the page's figures as PNG files, drawn by kaleido in Chromium where there is one. The
        # reruns below draw the same figures again (about 7 s each): their exports are counted instead.
        from dragonlab.reporting import report_html
        from dragonlab.testing import browser as lab_browser

        pngs = sorted((run_dir / "report" / "figures").glob("*.png"))
        if lab_browser.chromium() is not None:
            assert [p.stem for p in pngs] == sorted(report_html.figures(report)) and all(
                p.stat().st_size > 20_000 for p in pngs)
        exports = []
        monkeypatch.setattr(report_html, "write_pngs", lambda report, folder: exports.append(folder))

        # Rerun from the command line: everything is read back, nothing asked or judged again.
        lines = _judged(run_dir)
        args = ["report", "--run", str(run_dir), "--k", "2", "--best-of", "3", "--budgets", "2", "4",
                "--seeded-budget", "2", "--population", "64", "--min-repeat-ms", "1", "--turns", "1",
                "--refinement-per-workload", "1", "--splits", "train", "--llm-base-url", llm.base_url,
                "--llm-model", MODEL]
        assert main(args) == 0
        assert _judged(run_dir) == lines
        assert len(llm.requests) == served
        written = read_attempts(run_dir / "report" / f"attempts-{llm_name}.jsonl")
        assert len(written) == 2 * (3 + 2)  # workloads x (best_of + k)
        # Other settings would mix with what is there: refused, nothing written.
        assert main(args[:3] + ["--k", "3"] + args[5:]) == 2
        assert _judged(run_dir) == lines
        # Another RL model at the same path (retrained, or restored on another machine): refused too.
        weights = run_dir / "rl" / "model" / "model.safetensors"
        original = weights.read_bytes()
        weights.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        assert main(args) == 2
        assert "digests.rl: " in capsys.readouterr().err
        weights.write_bytes(original)
        assert _judged(run_dir) == lines
        # The RL weights gone (a report restored from its parts): its attempts are read back and
        # the report computed again; with an attempt missing, the error names the model to put back.
        # (An unfinished report checks the machine first: beside the other test process the
        # calibration read 2.06x the notebook's, so these resumes say the machine may differ.)
        resume = [*args, "--other-machine"]
        kept = tmp_path / "rl-model"
        (run_dir / "rl" / "model").rename(kept)
        (run_dir / "report" / "report.json").unlink()
        assert main(resume) == 0
        assert read_report(run_dir / "report").to_json() == report.to_json()
        assert exports == [run_dir / "report" / "figures"] * 2  # the rerun's and this one's
        assert _judged(run_dir) == lines
        # An unfinished report resumed on a machine of another speed: refused before judging.
        sessions = run_dir / "report" / "machine.jsonl"
        recorded = sessions.read_text()
        assert len(recorded.splitlines()) == 2  # the first run's session, and this one's
        first = json.loads(recorded.splitlines()[0])
        sessions.write_text(json.dumps({**first, "calibration": first["calibration"] / 10}) + "\n")
        (run_dir / "report" / "report.json").unlink()
        assert main(args) == 2
        assert "this machine runs the calibration kernel in" in capsys.readouterr().err
        sessions.write_text(recorded)
        rl_attempts = run_dir / "report" / "attempts-rl.jsonl"
        rl_attempts.write_text("".join(lines["attempts-rl.jsonl"].splitlines(keepends=True)[:-1]))
        assert main(resume) == 2
        assert f"rl model is gone from {(run_dir / 'rl' / 'model').resolve()}" in capsys.readouterr().err
        assert len(llm.requests) == served

    # Judged again in another run directory (--replay): the same scripts in the same batches, the
    # models not needed; the searches carried over, every kernel timed again. A replayed report
    # short of attempts, or made with other settings, is refused.
    again = tmp_path / "again"
    again.mkdir()
    (again / "dataset").symlink_to(data)
    replay = ["report", "--run", str(again), *args[3:args.index("--llm-base-url")], "--replay", str(run_dir / "report")]
    assert main(replay) == 2
    assert f"{rl_attempts} holds 1 of the 2 attempts to judge again at train prompt" in capsys.readouterr().err
    rl_attempts.write_text(lines["attempts-rl.jsonl"])
    assert main([*replay[:3], "--k", "3", *replay[5:]]) == 2
    assert "other settings (k)" in capsys.readouterr().err
    shutil.rmtree(again / "report")
    assert main(replay) == 0
    for name in ("sft", "rl"):
        before, after = (read_attempts(d / "report" / f"attempts-{name}.jsonl") for d in (run_dir, again))
        assert [(a.split, a.index, a.sample, a.script, a.seconds) for a in after] == [
            (a.split, a.index, a.sample, a.script, a.seconds) for a in before]
        assert [a.evaluation.correct for a in after] == [a.evaluation.correct for a in before]
        assert all(a.evaluation.latencies != b.evaluation.latencies for a, b in zip(after, before) if a.evaluation.correct)
        turns_before, turns_after = (list(read_lines(d / "report" / f"turns-{name}.jsonl")) for d in (run_dir, again))
        assert [d["script"] for d in turns_after] == [d["script"] for d in turns_before]
    for d in ("search", "seeded-rl"):
        assert sorted(p.name for p in (again / "report" / d).iterdir()) == sorted(
            p.name for p in (run_dir / "report" / d).iterdir())
    unscheduled = [{d["workload"]: d["evaluation"]["latencies"] for d in read_lines(r / "report" / "baselines.jsonl")
                    if d["system"] == "unscheduled"} for r in (run_dir, again)]
    assert unscheduled[0].keys() == unscheduled[1].keys() and all(
        unscheduled[0][k] != unscheduled[1][k] for k in unscheduled[0])
    replayed = read_report(again / "report")
    assert set(replayed.systems) == {"sft", "rl"} and replayed.models["rl"] == str((run_dir / "rl" / "model").resolve())
    _renders_in_chromium(run_dir / "report" / "report.html", html.count("Plotly.newPlot"), tmp_path)  # last: may skip
