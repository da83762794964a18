"""Collection throughput against plain `ms.tune_tir`, measured in the same run.

    .venv/bin/python benchmarks/collect.py [--workloads 4] [--trials 32] [--per-round 16]

Both sides tune the same quick-suite workloads for the same number of trials per workload,
with the same evolutionary search, XGBoost cost model and the same measurement settings
(EvaluatorConfig number/repeat/min_repeat_ms, 30 s limits). The one-off import of
`tvm.s_tir.tensor_intrin` (and xgboost) is paid before either side is timed.

`ms.tune_tir` runs first. A ratio (of measurements that succeeded, per minute) is printed only
when both sides measured every trial and at most 5% failed (`fair.py`): when the baseline did
not, the benchmark says so, tries it again with a build limit that covers each build process's
tensor-intrinsic import, and exits 1 if it still falls short. It refuses a busy machine (exit 3)
unless `--allow-contended`.
"""

import argparse
import sys
import tempfile
import time

import fair
import tvm.s_tir.meta_schedule as ms
import xgboost  # noqa: F401

from dragonlab.search.collect import collect
from dragonlab.search.config import CollectConfig, MeasureConfig
from dragonlab.search.records import MS_FAILURE_SECS, OK, RecordStore
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family
from dragonlab.core import tensor_intrinsics

tensor_intrinsics.load()  # the one-off import that each TuneContext would pay, outside the timings


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=4)
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--per-round", type=int, default=16)
    fair.add_arguments(p)
    args = p.parse_args()
    idle = fair.machine(args.allow_contended)
    measure = MeasureConfig()
    target = get_target("cpu")
    picks = ("matmul", "conv2d_nchw", "softmax", "batch_matmul", "layernorm", "depthwise_conv2d")
    quick = first_of_each_family("quick")
    workloads = [quick[f] for f in picks][: args.workloads]
    wanted = len(workloads) * args.trials
    print(f"{len(workloads)} workloads x {args.trials} trials, {args.per_round} per round, "
          f"EvaluatorConfig(number={measure.number}, repeat={measure.repeat}, "
          f"min_repeat_ms={measure.min_repeat_ms}), {fair.environment_note()}", flush=True)

    # The baseline first: a ratio is printed only if it measured (nearly) every trial.
    done = fair.baseline(
        "ms.tune_tir", lambda limit: _tune_tir(workloads, target, args, measure, limit),
        lambda r: None if fair.enough(r[1], r[2], wanted) else
        f"measured {r[2]} of {wanted} trials ok ({r[1]} recorded); first error: {r[3]}",
        args.baseline_build_timeout or measure.build_timeout_sec, args.retry_build_timeout)
    if done is None:
        return 1
    (base_secs, base_all, base_ok, _), timeout = done

    with tempfile.TemporaryDirectory() as d:
        store = RecordStore(d, create=True)
        start = time.perf_counter()
        collect(workloads, target, store, CollectConfig(trials=args.trials, trials_per_round=args.per_round,
                                                        measure=measure), progress=False)
        ours_secs = time.perf_counter() - start
        recs = store.records()
        ours_all, ours_ok = len(recs), sum(r.status == OK for r in recs)
        error = next((f"{r.status}: {r.error}" for r in recs if r.status != OK), None)
    if not fair.enough(ours_all, ours_ok, wanted):
        return fair.refuse_unequal(f"dragonlab collect measured {ours_ok} of {wanted} trials ok ({ours_all} recorded)",
                                   error)

    ours_rate, base_rate = ours_ok / ours_secs * 60, base_ok / base_secs * 60
    print(f"dragonlab collect: {ours_all} candidates ({ours_ok} measured ok) in {ours_secs:6.1f} s "
          f"= {ours_rate:6.1f} ok measurements/min")
    print(f"ms.tune_tir:       {base_all} candidates ({base_ok} measured ok, build limit {timeout:g} s) in "
          f"{base_secs:6.1f} s = {base_rate:6.1f} ok measurements/min")
    print(f"throughput ratio (collect / tune_tir), equal work: {ours_rate / base_rate:.2f}x"
          + ("" if idle else " (CONTENDED)"))
    return 0


def _tune_tir(workloads, target, args, measure, build_timeout: float):
    """Plain `ms.tune_tir` per workload: (seconds, records, records measured ok, the first error)."""
    recorded = ok = 0
    error = None
    start = time.perf_counter()
    for w in workloads:
        with tempfile.TemporaryDirectory() as d:
            db = ms.tune_tir(w.mod, target.tvm(), work_dir=d, max_trials_global=args.trials,
                             num_trials_per_iter=args.per_round,
                             runner=ms.runner.LocalRunner(timeout_sec=measure.run_timeout_sec,
                                                          evaluator_config=measure.evaluator()),
                             builder=ms.builder.LocalBuilder(timeout_sec=build_timeout))
            records = db.get_all_tuning_records()
            recorded += len(records)
            good = [r for r in records if r.run_secs and max(float(s) for s in r.run_secs) < MS_FAILURE_SECS]
            ok += len(good)
            if error is None and len(good) < len(records):
                error = "a candidate recorded with MetaSchedule's failure latency (1e10 s): build or run failed or timed out"
    return time.perf_counter() - start, recorded, ok, error


if __name__ == "__main__":
    sys.exit(main())
