"""The figures draw what the library defines: the reward's own values, the evaluations' stages."""

import math

import pytest

from dragonlab.evaluation.evaluate import OK, Evaluation
from dragonlab.evaluation.reward import RewardConfig, reward
from dragonlab.reporting.plots import latency_figure, reward_shape_figure, stage_counts, stage_figure


def _ok(latency: float, reference: float, repairs=()) -> Evaluation:
    return Evaluation("1", "cpu", OK, repairs=repairs, latencies=(latency,) * 3, reference_latency=reference)


def test_reward_shape_curves_are_the_reward_itself():
    config = RewardConfig(max_speedup=8.0)
    fig = reward_shape_figure(config)
    traces = {t.name: t for t in fig.data}
    for name, repairs in (("correct", ()), ("correct, repaired (charged)", ("decisions",))):
        for x, y in zip(traces[name].x, traces[name].y):
            assert y == pytest.approx(reward(_ok(1.0 / x, 1.0, repairs), config))
    ladder = {name: t.y[0] for name, t in traces.items()}
    assert ladder["decode"] == config.decode and ladder["check"] == config.check
    assert ladder["build / run"] == config.build == config.run  # equal rewards share a line
    assert math.isclose(10 ** fig.layout.xaxis.range[1], config.max_speedup * 4)


def test_reward_shape_marks_evaluations_where_their_reward_puts_them():
    wrong = Evaluation("1", "cpu", "check", "differs")
    fig = reward_shape_figure(points=[("fast", _ok(1e-3, 4e-3)), ("wrong", wrong)])
    marks = next(t for t in fig.data if t.name == "evaluated scripts")
    assert list(marks.x) == [pytest.approx(4.0), 1.0]
    assert list(marks.y) == [pytest.approx(1.25), RewardConfig().check]


def test_stage_figure_and_counts_follow_the_pipeline_order():
    evals = [Evaluation("1", "cpu", s) for s in ("check", "decode", OK, "decode")]
    assert list(stage_counts(evals).items()) == [("decode", 2), ("check", 1), (OK, 1)]
    fig = stage_figure({"a": evals, "b": evals[:1]})
    assert [t.name for t in fig.data] == ["decode", "check", OK]
    assert list(next(t for t in fig.data if t.name == "decode").y) == [2, 0]


def test_latency_figure_skips_untimed_kernels_and_draws_the_reference():
    fig = latency_figure([("timed", _ok(2e-3, 4e-3)), ("failed", Evaluation("1", "cpu", "run"))])
    assert [t.name for t in fig.data] == ["timed"] and list(fig.data[0].y) == [2.0, 2.0, 2.0]
    assert [s.y0 for s in fig.layout.shapes] == [4.0]
