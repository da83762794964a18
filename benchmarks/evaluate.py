"""Evaluation throughput against MetaSchedule's LocalBuilder + LocalRunner, in the same run.

    .venv/bin/python benchmarks/evaluate.py [--per-workload 8] [--repeats 2]

Candidates are post-processed samples of four quick workloads' design spaces. Both sides time
every candidate with the same EvaluatorConfig (number, repeat, min_repeat_ms); the evaluator
also applies, validates and checks each one against the unscheduled kernel on 3 input sets,
which MetaSchedule's pair does not do. `--repeats 2` submits every candidate twice, as GRPO
does when a generation group repeats a script; the evaluator's cache answers the repeats, while
MetaSchedule builds and runs them again. Both sides start cold (worker start-up included).
"""

import argparse
import sys
import time

import tvm.s_tir.meta_schedule as ms
import tvm.s_tir.tensor_intrin  # noqa: F401  (the host's one-off import, outside the timings)

from dragonlab.codec import apply
from dragonlab.evaluate import EvalConfig, Evaluator
from dragonlab.fuzz import sample_scripts
from dragonlab.measure import MeasureConfig
from dragonlab.targets import get_target
from dragonlab.workloads import suite


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-workload", type=int, default=8)
    p.add_argument("--repeats", type=int, default=1)
    args = p.parse_args()
    target = get_target("cpu")
    measure = MeasureConfig()
    quick = {w.family: w for w in reversed(suite("quick"))}  # first of each family
    items = sample_scripts([quick[f] for f in ("matmul", "conv2d_nchw", "softmax", "layernorm")], target,
                           per_workload=args.per_workload, seed=0) * args.repeats
    print(f"{len(items)} candidates ({len(items) // args.repeats} unique), "
          f"EvaluatorConfig(number={measure.number}, repeat={measure.repeat}, min_repeat_ms={measure.min_repeat_ms})")

    start = time.perf_counter()
    with Evaluator(target, EvalConfig(measure=measure)) as evaluator:
        evaluations = evaluator.evaluate_many(items, progress=False)
    ours = time.perf_counter() - start
    correct = sum(e.correct for e in evaluations)

    mods = [apply(script, w.mod).mod for w, script in items]  # the same kernels, for MetaSchedule
    start = time.perf_counter()
    builder = ms.builder.LocalBuilder(timeout_sec=measure.build_timeout_sec)
    runner = ms.runner.LocalRunner(timeout_sec=measure.run_timeout_sec, evaluator_config=measure.evaluator())
    built = builder.build([ms.builder.BuilderInput(m, target.tvm()) for m in mods])
    inputs = [ms.runner.RunnerInput(b.artifact_path, "cpu", ms.arg_info.ArgInfo.from_prim_func(w.mod["main"]))
              for b, (w, _) in zip(built, items) if b.error_msg is None]
    timed = [f.result() for f in runner.run(inputs)]
    base = time.perf_counter() - start
    measured = sum(r.error_msg is None for r in timed)

    ours_rate, base_rate = len(items) / ours * 60, len(items) / base * 60
    print(f"dragonlab Evaluator:              {len(items)} evaluated ({correct} correct) in {ours:6.1f} s "
          f"= {ours_rate:6.1f} /min")
    print(f"LocalBuilder + LocalRunner:       {len(items)} submitted ({measured} timed) in {base:6.1f} s "
          f"= {base_rate:6.1f} /min")
    print(f"throughput ratio (evaluator / MetaSchedule): {ours_rate / base_rate:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
