"""Building and timing MetaSchedule candidates: the builder, the runners, and their limits.

Two costs of MetaSchedule's stock `LocalBuilder` dominate small tuning runs: it starts a fresh
process pool for every batch, and its default build function imports `tvm.s_tir.tensor_intrin`
in each fresh worker (16-22 s). `PooledBuilder` keeps its workers for its lifetime (dragonlab's
own, forked from a zygote that imported TVM once: `dragonlab.evaluation.workers`) and builds
with `fast_build`, which skips that import: a schedule has already been tensorized by the time
it is built, so the intrinsic registry is not needed. `PooledRunner` times in such a worker
too, with `LocalRunner`'s own functions: the stock runner's process imports TVM, and torch with
it (about 6 s of CPU), once per search.

Every wait is bounded: a build or run that exceeds its limit becomes a result whose error says
"Timeout", which collection retries and never stores as a schedule failure. The settings,
`MeasureConfig`, live in `dragonlab.search.config` (no TVM import).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import default_export
from tvm.s_tir.meta_schedule.runner import PyRunner, RPCConfig, RPCRunner, RunnerFuture, RunnerInput, RunnerResult
from tvm.s_tir.meta_schedule.runner.local_runner import (LocalRunnerFuture, default_alloc_argument,
                                                         default_run_evaluator)

from dragonlab.core.errors import InputError, UnavailableError
from dragonlab.evaluation.workers import Limits, RemoteError, WorkerError, WorkerPool, WorkerTimeout
from dragonlab.search.config import MeasureConfig, parse_tracker


class RunnerUnavailableError(UnavailableError):
    """The RPC tracker cannot be reached, or has no server for the key."""


def fast_build(mod: tvm.IRModule, target: tvm.target.Target, _params=None) -> tvm.runtime.Module:
    """MetaSchedule's default build without the tensor-intrinsic import (see module docstring)."""
    from tvm.driver import build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def _build_and_export(mod: tvm.IRModule, target: tvm.target.Target, *, progress) -> str:
    """Runs in a builder worker; returns the path of the exported library."""
    return default_export(fast_build(mod, target))


def _outcome(result, who: str, timeout_sec: float) -> tuple[object, str | None]:
    """A pooled call's (value, None), or (None, the error MetaSchedule's results carry: a
    timeout says "Timeout", which collection retries)."""
    if isinstance(result, WorkerTimeout):
        return None, f"{who}: Timeout, killed after {timeout_sec} seconds"
    if isinstance(result, (WorkerError, RemoteError)):
        return None, f"{who}: {result}"
    return result, None


@derived_object
class PooledBuilder(PyBuilder):
    """A MetaSchedule builder whose worker processes live as long as the builder."""

    def __init__(self, *, max_workers: int | None = None, timeout_sec: float = 30.0) -> None:
        super().__init__()
        self.timeout_sec = timeout_sec
        self.pool = WorkerPool(max_workers or os.cpu_count() or 1, Limits(timeout_sec=timeout_sec, memory_bytes=None))

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        return [BuilderResult(*_outcome(r, "Builder", self.timeout_sec))
                for r in self.pool.map(_build_and_export, [(b.mod, b.target) for b in build_inputs])]

    def close(self) -> None:
        self.pool.close()


def _time(artifact_path: str, device_type: str, args_info: tuple, evaluator_config, *, progress) -> list[float]:
    """Runs in a runner worker: what `LocalRunner`'s worker does with its default functions."""
    module = tvm.runtime.load_module(artifact_path)
    device = tvm.runtime.device(device_type, 0)
    args = default_alloc_argument(device, args_info, 1)
    return default_run_evaluator(module, device, evaluator_config, args)


@derived_object
class PooledRunner(PyRunner):
    """MetaSchedule's `LocalRunner` (one worker, one candidate at a time, the same timing) in a
    worker that lives as long as the runner; `env` is set in the worker's environment."""

    def __init__(self, *, timeout_sec: float, evaluator_config, env: dict[str, str] | None = None) -> None:
        super().__init__()
        self.timeout_sec = timeout_sec
        self.evaluator_config = evaluator_config
        self.pool = WorkerPool(1, Limits(timeout_sec=timeout_sec, memory_bytes=None), env=env)

    def run(self, runner_inputs: list[RunnerInput]) -> list[RunnerFuture]:
        argsets = [(str(r.artifact_path), str(r.device_type), tuple(a.as_json() for a in r.args_info),
                    self.evaluator_config) for r in runner_inputs]
        futures = []
        for r in self.pool.map(_time, argsets, timeout_sec=self.timeout_sec):
            costs, error = _outcome(r, "Runner", self.timeout_sec)
            futures.append(LocalRunnerFuture(res=None if error else [float(t) for t in costs], error_message=error))
        return futures

    def close(self) -> None:
        self.pool.close()


def check_tracker(host: str, port: int, key: str, *, timeout_sec: float = 10.0) -> int:
    """Number of servers registered under `key`; raises if there are none.

    MetaSchedule's RPC runner waits forever for a key that no server serves, so collection
    asks the tracker first, with a bounded wait.
    """
    try:
        socket.create_connection((host, port), timeout=timeout_sec).close()
    except OSError as e:
        raise RunnerUnavailableError(f"no RPC tracker at {host}:{port} ({e})") from None
    summary = tvm.rpc.connect_tracker(host, port).summary()
    servers = sum(1 for s in summary.get("server_info", []) if s.get("key", "").split(":")[-1] == key)
    if not servers:
        keys = sorted({s.get("key", "").split(":")[-1] for s in summary.get("server_info", [])})
        raise RunnerUnavailableError(f"the tracker at {host}:{port} has no server for key {key!r} "
                                     f"(keys: {', '.join(keys) or 'none'})")
    return servers


def make_runner(kind: str, config: MeasureConfig, *, tracker: str | None = None, key: str | None = None,
                env: dict[str, str] | None = None):
    """`local` times on this machine, in a worker whose environment gets `env` (a target's
    `kernel_env`: the evaluator's workers get the same); `rpc` through TVM's tracker (remote CPUs or
    GPUs, each server with its own environment). Close a local runner when done with it."""
    if kind == "local":
        return PooledRunner(timeout_sec=config.run_timeout_sec, evaluator_config=config.evaluator(), env=env)
    if kind == "rpc":
        if not tracker or not key:
            raise InputError("the rpc runner needs --tracker HOST:PORT and --key KEY")
        host, port = parse_tracker(tracker)
        servers = check_tracker(host, port, key)
        rpc = RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                        session_timeout_sec=int(config.run_timeout_sec))
        return RPCRunner(rpc_config=rpc, evaluator_config=config.evaluator(), max_workers=servers)
    raise InputError(f"unknown runner {kind!r}; use 'local' or 'rpc'")


def run_bounded(runner, inputs: list[RunnerInput], timeout_sec: float) -> list[RunnerResult]:
    """Run through any MetaSchedule runner, giving up on results not back in time.

    The local runner has finished when run() returns; RPC futures may never finish (a key with
    no server), so they are polled against a deadline of `timeout_sec` per input.
    """
    if not inputs:
        return []
    futures = runner.run(inputs)
    deadline = time.monotonic() + timeout_sec * (len(inputs) + 1)
    out = []
    for f in futures:
        while not f.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        if f.done():
            r = f.result()
            out.append(RunnerResult(r.run_secs, r.error_msg))
        else:
            out.append(RunnerResult(None, "Runner: Timeout, no result before the deadline"))
    return out


class Measurer:
    """Build, then run, a batch of candidates; retries timeouts; never waits unboundedly. It
    closes the runner it is given when it closes."""

    def __init__(self, config: MeasureConfig, runner, *, device_type: str = "cpu"):
        self.config = config
        self.runner = runner
        self.device_type = device_type
        self.builder = PooledBuilder(max_workers=config.builder_workers, timeout_sec=config.build_timeout_sec)

    def measure(self, mods: list[tvm.IRModule], args_infos: list, target) -> list[RunnerResult]:
        """One RunnerResult per module, in order; errors mentioning "Timeout" survived all retries."""
        results: list[RunnerResult | None] = [None] * len(mods)
        todo = list(range(len(mods)))
        for attempt in range(self.config.retries + 1):
            builds = self.builder.build([BuilderInput(mods[i], target) for i in todo])
            built = [(i, b.artifact_path) for i, b in zip(todo, builds) if b.error_msg is None]
            for i, b in zip(todo, builds):
                if b.error_msg is not None:
                    results[i] = RunnerResult(None, b.error_msg)
            runs = run_bounded(self.runner, [RunnerInput(path, self.device_type, args_infos[i]) for i, path in built],
                               self.config.run_timeout_sec)
            for (i, path), r in zip(built, runs):
                results[i] = r
                shutil.rmtree(Path(path).parent, ignore_errors=True)
            todo = [i for i in todo if results[i].error_msg and "Timeout" in results[i].error_msg]
            if not todo:
                break
        return results  # type: ignore[return-value]

    def close(self) -> None:
        self.builder.close()
        if isinstance(self.runner, PooledRunner):
            self.runner.close()
