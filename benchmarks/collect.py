"""Collection throughput against plain `ms.tune_tir`, measured in the same run.

    .venv/bin/python benchmarks/collect.py [--workloads 4] [--trials 32] [--per-round 16]

Both sides tune the same quick-suite workloads for the same number of trials per workload,
with the same evolutionary search, XGBoost cost model and the same measurement settings
(EvaluatorConfig number/repeat/min_repeat_ms, 30 s limits). The one-off import of
`tvm.s_tir.tensor_intrin` (and xgboost) is paid before either side is timed.
"""

import argparse
import sys
import tempfile
import time

import tvm.s_tir.meta_schedule as ms
import tvm.s_tir.tensor_intrin  # noqa: F401  (the one-off 16-22 s import, outside the timings)
import xgboost  # noqa: F401

from dragonlab.collect import CollectConfig, collect
from dragonlab.measure import MeasureConfig
from dragonlab.records import MS_FAILURE_SECS, OK, RecordStore
from dragonlab.targets import get_target
from dragonlab.workloads import suite


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=4)
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--per-round", type=int, default=16)
    args = p.parse_args()
    measure = MeasureConfig()
    target = get_target("cpu")
    picks = ("matmul", "conv2d_nchw", "softmax", "batch_matmul", "layernorm", "depthwise_conv2d")
    quick = suite("quick")
    workloads = [next(w for w in quick if w.family == f) for f in picks][: args.workloads]
    print(f"{len(workloads)} workloads x {args.trials} trials, {args.per_round} per round, "
          f"EvaluatorConfig(number={measure.number}, repeat={measure.repeat}, "
          f"min_repeat_ms={measure.min_repeat_ms})", flush=True)

    with tempfile.TemporaryDirectory() as d:
        store = RecordStore(d, create=True)
        start = time.perf_counter()
        collect(workloads, target, store, CollectConfig(trials=args.trials, trials_per_round=args.per_round,
                                                        measure=measure), progress=False)
        ours_secs = time.perf_counter() - start
        recs = store.records()
        ours_all, ours_ok = len(recs), sum(r.status == OK for r in recs)

    base_all = base_ok = 0
    start = time.perf_counter()
    for w in workloads:
        with tempfile.TemporaryDirectory() as d:
            db = ms.tune_tir(w.mod, target.tvm(), work_dir=d, max_trials_global=args.trials,
                             num_trials_per_iter=args.per_round,
                             runner=ms.runner.LocalRunner(timeout_sec=measure.run_timeout_sec,
                                                          evaluator_config=measure.evaluator()),
                             builder=ms.builder.LocalBuilder(timeout_sec=measure.build_timeout_sec))
            records = db.get_all_tuning_records()
            base_all += len(records)
            base_ok += sum(1 for r in records if r.run_secs and max(float(s) for s in r.run_secs) < MS_FAILURE_SECS)
    base_secs = time.perf_counter() - start

    ours_rate, base_rate = ours_all / ours_secs * 60, base_all / base_secs * 60
    print(f"dragonlab collect: {ours_all} candidates ({ours_ok} measured ok) in {ours_secs:6.1f} s "
          f"= {ours_rate:6.1f} candidates/min")
    print(f"ms.tune_tir:       {base_all} candidates ({base_ok} measured ok) in {base_secs:6.1f} s "
          f"= {base_rate:6.1f} candidates/min")
    print(f"throughput ratio (collect / tune_tir): {ours_rate / base_rate:.2f}x; "
          f"valid-measurement ratio: {(ours_ok / ours_secs) / max(base_ok / base_secs, 1e-9):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
