"""The builder and runner that search measures with: real builds, real timings, and the errors
collection tells apart (a timeout is retried; a kernel that fails to run is a failure)."""

import shutil
from pathlib import Path

import pytest
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.s_tir.meta_schedule.runner import RunnerInput

from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family
from dragonlab.search.config import MeasureConfig
from dragonlab.search.measure import PooledBuilder, PooledRunner, make_runner
from dragonlab.search.records import RUN_ERROR, TIMEOUT, classify_error

MATMUL = first_of_each_family("quick")["matmul"]


@pytest.fixture(scope="module")
def built():
    """A matmul built by the pooled builder: (artifact path, its arguments)."""
    builder = PooledBuilder(max_workers=1)
    try:
        [result] = builder.build([BuilderInput(MATMUL.mod, get_target("cpu").tvm())])
    finally:
        builder.close()
    assert result.error_msg is None, result.error_msg
    yield result.artifact_path, ArgInfo.from_prim_func(MATMUL.mod["main"])
    shutil.rmtree(Path(result.artifact_path).parent, ignore_errors=True)


def test_the_pooled_runner_times_as_configured_and_outlives_a_failure(built, tmp_path):
    path, args = built
    measure = MeasureConfig()
    runner = make_runner("local", measure)
    try:
        missing = str(tmp_path / "missing.so")
        futures = runner.run([RunnerInput(path, "cpu", args), RunnerInput(missing, "cpu", args),
                              RunnerInput(path, "cpu", args)])
        first, failed, again = (f.result() for f in futures)
        for r in (first, again):
            assert r.error_msg is None, r.error_msg
            assert len(r.run_secs) == measure.repeat and all(0 < float(t) < 1 for t in r.run_secs)
        assert failed.run_secs is None and "missing.so" in failed.error_msg
        assert classify_error(failed.error_msg) == RUN_ERROR
        [pid] = runner.pool.pids()
        runner.run([RunnerInput(path, "cpu", args)])
        assert runner.pool.pids() == [pid]  # one worker for the runner's lifetime
    finally:
        runner.close()
    assert runner.pool.pids() == []


def test_a_run_over_its_limit_is_a_timeout_and_the_next_one_runs(built):
    path, args = built
    runner = PooledRunner(timeout_sec=0.001, evaluator_config=MeasureConfig().evaluator())  # >= 120 ms a run
    try:
        [late] = runner.run([RunnerInput(path, "cpu", args)])
        assert late.result().run_secs is None and classify_error(late.result().error_msg) == TIMEOUT
        runner.timeout_sec = 60
        [timed] = runner.run([RunnerInput(path, "cpu", args)])
        assert timed.result().error_msg is None, timed.result().error_msg
    finally:
        runner.close()
