"""Attempts written and judged in a pipeline: the writer's next batch overlaps this batch's
builds, never its timing."""

import threading
import time

import pytest

from dragonlab.core.errors import InputError
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.learn.attempts import read_attempts, write_and_evaluate
from dragonlab.learn.prompts import CONSTRUCTION
from dragonlab.search.explore import forms, sample_traces


class SlowWriter:
    """Writes MetaSchedule's own sampled scripts, taking `pause` seconds a batch, and says when it wrote."""

    def __init__(self, scripts: list[str], pause: float = 1.0):
        self.scripts, self.spans, self.pause = scripts, [], pause

    def write(self, prompts, *, n, seed):
        start = time.monotonic()
        time.sleep(self.pause)
        self.spans.append((start, time.monotonic()))
        return [[self.scripts[(seed + i) % len(self.scripts)] for i in range(n)] for _ in prompts]


def test_no_kernel_is_timed_while_the_writer_writes(quick, tmp_path):
    w = quick["matmul"]
    writer = SlowWriter([forms(s.sch.trace).script for s in sample_traces(w, "cpu", n=4, seed=1)])
    rows = [{"index": i, "prompt": f"prompt {i}", "task": CONSTRUCTION, "workload": w.key, "name": w.name}
            for i in range(4)]
    out = tmp_path / "attempts.jsonl"
    timed = []
    with Evaluator("cpu", EvalConfig(workers=1)) as evaluator:
        call = evaluator.timer.call

        def timer_call(*args, **kwargs):
            assert evaluator.timing_lock.locked()
            start = time.monotonic()
            try:
                return call(*args, **kwargs)
            finally:
                timed.append((start, time.monotonic(), threading.current_thread().name))

        evaluator.timer.call = timer_call
        attempts = write_and_evaluate(writer, evaluator, rows, {w.key: w}, split="test", n=2, out=out,
                                      progress=False)
    assert [(a.index, a.sample) for a in attempts] == [(i, s) for i in range(4) for s in range(2)]
    assert all(a.evaluation.correct and a.evaluation.latency for a in attempts)
    assert read_attempts(out) and sorted((a.index, a.sample) for a in read_attempts(out)) == \
        [(a.index, a.sample) for a in attempts]
    assert timed, "nothing was timed"
    for t0, t1, _ in timed:
        for w0, w1 in writer.spans:
            assert t1 <= w0 or t0 >= w1, "a kernel was timed while the writer wrote"
    assert any(thread != threading.main_thread().name for *_, thread in timed)  # judged beside the writer


def test_a_resumed_file_gives_every_example_the_attempts_asked_for(quick, tmp_path):
    """An attempts file resumed with more attempts per example, or with an example's batch cut
    short by a kill, gets those examples written again whole (their new lines win); one written
    with more attempts than asked is refused, naming the file, and left as it was."""
    w = quick["matmul"]
    writer = SlowWriter([forms(s.sch.trace).script for s in sample_traces(w, "cpu", n=3, seed=1)], pause=0)
    rows = [{"index": i, "prompt": f"prompt {i}", "task": CONSTRUCTION, "workload": w.key, "name": w.name}
            for i in range(2)]
    out = tmp_path / "attempts.jsonl"
    with Evaluator("cpu", EvalConfig(workers=1)) as evaluator:
        def attempts(n):
            return write_and_evaluate(writer, evaluator, rows, {w.key: w}, split="test", n=n, out=out,
                                      progress=False)

        assert [(a.index, a.sample) for a in attempts(1)] == [(0, 0), (1, 0)]
        again = attempts(2)
        assert [(a.index, a.sample) for a in again] == [(i, s) for i in range(2) for s in range(2)]
        assert len(read_attempts(out)) == 2 + 4  # append-only: the first lines stay
        assert len(writer.spans) == 4  # one batch per example, each written again
        lines = out.read_text().splitlines(keepends=True)
        out.write_text("".join(lines[:-1]))  # example 1's second attempt lost to a kill
        assert [(a.index, a.sample) for a in attempts(2)] == [(i, s) for i in range(2) for s in range(2)]
        assert len(writer.spans) == 5, "only example 1 is written again"
        before = out.read_bytes()
        with pytest.raises(InputError, match=rf"{out}: example 0 of 'test' has an attempt numbered 1"):
            attempts(1)
        assert out.read_bytes() == before


def test_a_replay_writes_the_recorded_scripts_by_sample_and_refuses_another_dataset_s():
    from dragonlab.evaluation.evaluate import Evaluation
    from dragonlab.learn.attempts import Attempt, Replay

    def attempt(sample, script, workload="w", seconds=1.0):
        return Attempt("test", 3, sample, CONSTRUCTION, workload, workload, script,
                       Evaluation(workload, "cpu", "ok"), "eos", seconds)

    rows = {"test": [{"index": 3, "prompt": "p", "workload": "w", "task": CONSTRUCTION}]}
    # out of order, and sample 1 written twice (a resumed run): the last line of a sample wins
    recorded = [attempt(1, "b-old", seconds=5.0), attempt(0, "a"), attempt(1, "b", seconds=2.0)]
    replay = Replay(recorded, rows, "old/attempts.jsonl")
    assert replay.write(["p"], n=2, seed=3) == [["a", "b"]] and replay.endings(2) == [["eos", "eos"]]
    assert replay.seconds(attempt(1, "b", seconds=None)) == 2.0
    with pytest.raises(InputError, match=r"old/attempts.jsonl holds 2 of the 3 attempts to judge again at test "
                                         r"prompt 3 \(workload w\)"):
        replay.write(["p"], n=3, seed=3)
    other = Replay([attempt(0, "a", workload="v")], rows, "old/attempts.jsonl")
    with pytest.raises(InputError, match="are at another workload: a report of another dataset"):
        other.write(["p"], n=1, seed=3)
