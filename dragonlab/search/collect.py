"""Collection: MetaSchedule's evolutionary search, keeping every measured candidate.

This drives one `TuneContext` per workload through the same steps as MetaSchedule's task
scheduler (generate candidates, build, run, notify the search strategy, update the cost
model, commit to the database) so that it can (a) write every candidate, not just the best,
to the append-only store as soon as its batch is measured, (b) retry timeouts instead of
storing them as failures, and (c) resume a killed run: records already on disk are loaded into
the search's database and count against the trial budget. Its settings, `CollectConfig`, live in
`dragonlab.search.config` (no TVM import).
"""

from __future__ import annotations

import logging
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import tvm.s_tir.meta_schedule as ms
from tvm.s_tir import Schedule
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.schedule import Trace

from dragonlab.core.codec import to_plain
from dragonlab.core.errors import InputError, one_line
from dragonlab.core.interrupt import InterruptWatch, watch_interrupts
from dragonlab.core.progress import progress_bar
from dragonlab.core.targets import TargetSpec
from dragonlab.core.workloads import Workload
from dragonlab.search.config import CollectConfig
from dragonlab.search.explore import tune_context
from dragonlab.search.measure import Measurer, make_runner
from dragonlab.search.records import (MS_FAILURE_SECS, OK, TIMEOUT, UNMEASURED, Record, RecordStore,
                                      classify_error, trace_text)


@dataclass
class CollectSummary:
    measured: int = 0  # new records written in this run
    skipped: int = 0  # workloads already finished in the store
    timeouts: int = 0
    failed_workloads: list[str] = field(default_factory=list)  # "name: reason"
    seconds: dict[str, float] = field(default_factory=dict)  # wall time of each workload searched in this run


def shard(workloads: list[Workload], spec: str | None) -> list[Workload]:
    """Deterministic split by key: shard `i/n` takes the workloads whose key is i mod n."""
    if not spec:
        return workloads
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise InputError(f"--shard must be I/N with 0 <= I < N, got {spec!r}") from None
    if not 0 <= i < n:
        raise InputError(f"--shard must be I/N with 0 <= I < N, got {spec!r}")
    return [w for w in workloads if int(w.key) % n == i]


def machine() -> dict:
    """The machine that measures: CPU model, cores, memory, OS, and the versions that matter."""
    import os
    import platform

    import psutil
    import tvm

    from dragonlab import __version__

    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        model = None
    return {"cpu": model or platform.processor() or platform.machine(),
            "cores": psutil.cpu_count(logical=False), "threads": psutil.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30), "os": platform.platform(),
            "python": platform.python_version(), "tvm": tvm.__version__, "dragonlab": __version__,
            "load_average": round(os.getloadavg()[0], 2)}


def shard_name(spec: str) -> str:
    """The file suffix of shard `i/n`: "i-of-n" (records.i-of-n.jsonl)."""
    shard([], spec)  # validates
    return spec.replace("/", "-of-")


def collect(workloads: list[Workload], target: TargetSpec, store: RecordStore,
            config: CollectConfig = CollectConfig(), *, progress: bool = True,
            on_done: Callable[[str, float], None] | None = None,
            summary: CollectSummary | None = None) -> CollectSummary:
    """Tune each workload for `config.trials` measured candidates, appending every one to `store`.
    `on_done(key, seconds)` is called as each workload searched in this run finishes. A run that
    Ctrl-C ends raises KeyboardInterrupt; the `summary` passed in still counts what it stored."""
    quiet_metaschedule()
    store.add_workloads(workloads)
    done = store.done()
    summary = CollectSummary() if summary is None else summary
    runner = make_runner(config.runner, config.measure, tracker=config.tracker, key=config.key,
                         env=target.kernel_env)
    measurer = Measurer(config.measure, runner, device_type=target.device_type)
    bar = progress_bar(total=len(workloads) * config.trials, unit="cand", progress=progress, file=sys.stderr)
    with watch_interrupts("stopping; the batch in flight is dropped (Ctrl-C again to stop at once)") as interrupts:
        try:
            for w in workloads:
                interrupts.check()
                if done.get((w.key, target.name), 0) >= config.trials:
                    summary.skipped += 1
                    bar.update(config.trials)
                    continue
                bar.set_description(w.name)
                start = time.monotonic()
                try:
                    _collect_one(w, target, store, config, measurer, bar, summary, interrupts)
                except Exception as e:  # one broken workload must not end a long collection
                    if interrupts.requested:  # Ctrl-C's workers died with it: not the workload's fault
                        raise KeyboardInterrupt from e
                    summary.failed_workloads.append(f"{w.name}: {one_line(e)}")
                    continue
                summary.seconds[w.key] = time.monotonic() - start
                if on_done:
                    on_done(w.key, summary.seconds[w.key])
        finally:
            bar.close()
            measurer.close()
    return summary


def collect_samples(workloads: list[Workload], target: TargetSpec, store: RecordStore, n: int, *, seed: int = 0,
                    progress: bool = True) -> int:
    """Cheap structural data: `n` postprocessed random samples of each workload's design spaces,
    stored as `unmeasured` records (traces MetaSchedule would have measured, never latencies),
    without a build or a run; a trace drawn twice is stored once. A workload already sampled is
    skipped, so a killed run resumes.
    Returns how many records were written."""
    from dragonlab.search.explore import sample_traces

    store.add_workloads(workloads)
    done = store.done()
    todo = [w for w in workloads if done.get((w.key, target.name), 0) < n]
    written = 0
    with progress_bar(total=len(workloads), initial=len(workloads) - len(todo), unit="workload", desc="samples",
                      progress=progress, file=sys.stderr) as bar, \
            watch_interrupts("stopping after this workload's samples") as interrupts:
        for w in todo:
            interrupts.check()
            first = random.Random(f"{seed}/{w.key}/{target.name}/samples").randrange(1, 2**31 - 1 - 50 * n)
            traces = {}  # one record per distinct trace: a small design space repeats itself
            for sample in sample_traces(w, target.tvm(), n=n, seed=first):
                plain = to_plain(sample.sch.trace)
                traces.setdefault(trace_text(plain), plain)
            store.append([Record(w.key, target.name, plain, UNMEASURED, trial=i, source="sample")
                          for i, plain in enumerate(traces.values())])
            store.mark_done(w.key, target.name, n)
            written += len(traces)
            bar.update()
    return written


def _collect_one(w: Workload, target: TargetSpec, store: RecordStore, config: CollectConfig,
                 measurer: Measurer, bar, summary: CollectSummary, interrupts: InterruptWatch) -> None:
    tvm_target = target.tvm()
    existing = store.records(target=target.name, workload=w.key)
    counted = [r for r in existing if r.status != TIMEOUT]
    bar.update(min(len(counted), config.trials))
    remaining = config.trials - len(counted)
    next_round = max((r.round for r in existing if r.round is not None), default=-1) + 1
    next_trial = max((r.trial for r in existing if r.trial is not None), default=-1) + 1

    database = ms.database.MemoryDatabase()
    token = database.commit_workload(w.mod)
    args_info = ArgInfo.from_prim_func(w.mod["main"])
    for r in existing:  # resume: the search starts from what was measured before the kill
        if r.status == OK:
            database.commit_tuning_record(ms.database.TuningRecord(
                _trace_of(r.trace, w), token, list(r.latencies), tvm_target, args_info))
    seen = {r.identity for r in existing}

    if remaining > 0:
        rand_state = random.Random(f"{config.seed}/{w.key}/{target.name}/{next_round}").randrange(1, 2**31 - 1)
        strategy = ms.search_strategy.EvolutionarySearch(population_size=config.population)
        ctx = tune_context(w.mod, tvm_target, seed=rand_state, search_strategy=strategy, task_name=w.name,
                           num_threads=config.search_threads)
        cost_model = ms.cost_model.CostModel.create("xgb", num_tuning_cores=ctx.num_threads)
        # MetaSchedule counts a timeout as a trial, this loop does not: room for as many again
        ctx.pre_tuning(max_trials=2 * remaining, num_trials_per_iter=min(config.trials_per_round, remaining),
                       design_spaces=ctx.generate_design_space(), database=database, cost_model=cost_model)
        while remaining > 0:
            candidates = ctx.generate_measure_candidates()
            if not candidates:
                break
            # After a resume the search proposes schedules measured before the kill again: MetaSchedule
            # knows only what it picked itself. Those are not measured and, left out of the notice
            # below, do not count against its trial budget; it never proposes one twice.
            # Two candidates of one batch with one trace are measured once, too.
            fresh = []
            for c in candidates:
                trace = to_plain(c.sch.trace)
                identity = (w.key, target.name, trace_text(trace))
                if identity not in seen and len(fresh) < remaining:
                    seen.add(identity)  # every candidate measured becomes a record, timeouts included
                    fresh.append((c, trace))
            if not fresh:
                continue
            candidates, traces = [c for c, _ in fresh], [t for _, t in fresh]
            results = measurer.measure([c.sch.mod for c in candidates],
                                       [c.args_info for c in candidates], tvm_target)
            interrupts.check()  # Ctrl-C also killed the workers: their batch says nothing of its schedules
            ctx.notify_runner_results(candidates, results)
            cost_model.update(ctx, candidates, results)
            new = []
            for c, trace, res in zip(candidates, traces, results):
                rec = _record(w, target, trace, res, next_round, next_trial)
                next_trial += 1
                if rec.status != TIMEOUT:  # a timeout says nothing about the schedule
                    database.commit_tuning_record(ms.database.TuningRecord(
                        c.sch.trace, token, list(rec.latencies or [MS_FAILURE_SECS]), tvm_target, c.args_info))
                new.append(rec)
            store.append(new)  # one batch = one append: a kill loses at most the batch in flight
            measured = sum(r.status != TIMEOUT for r in new)
            summary.measured += len(new)
            summary.timeouts += len(new) - measured
            remaining -= measured
            bar.update(measured)
            next_round += 1
        ctx.post_tuning()
    store.mark_done(w.key, target.name, config.trials)


def _record(w: Workload, target: TargetSpec, trace: list, result, round_: int, trial: int) -> Record:
    if result.error_msg is None:
        secs = tuple(float(s) for s in result.run_secs)
        return Record(w.key, target.name, trace, OK, secs, None, round_, trial)
    status = classify_error(result.error_msg)
    reason = " ".join(result.error_msg.split())[:300]
    return Record(w.key, target.name, trace, status, None, reason, round_, trial)


def _trace_of(plain_trace: list, w: Workload) -> Trace:
    sch = Schedule(w.mod)
    Trace.apply_json_to_schedule(plain_trace, sch)
    return sch.trace


def quiet_metaschedule() -> None:
    """MetaSchedule logs every round at INFO; the progress bar already says it."""
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
