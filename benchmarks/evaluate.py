"""Evaluation throughput against MetaSchedule's LocalBuilder + LocalRunner, in the same run.

    .venv/bin/python benchmarks/evaluate.py [--batches 4] [--per-workload 2] [--repeats 1] [--families ...]

Candidates are post-processed samples of the design spaces of the first quick workload of each
of `--families` (default: matmul, conv2d_nchw, softmax, layernorm), submitted in
`--batches` batches, as an RL loop submits one generation group after another. Both sides start
cold (worker start-up included) and keep their objects across batches: one Evaluator; one
LocalBuilder and one LocalRunner. Both time every candidate with the same EvaluatorConfig
(number, repeat, min_repeat_ms); the evaluator also applies, validates and checks each one
against the unscheduled kernel on 3 input sets, and times the unscheduled kernels once per
batch, which MetaSchedule's pair does not do. `--repeats 2` submits every candidate twice, as
GRPO does when a group repeats a script; the evaluator's cache answers the repeats, while
MetaSchedule builds and runs them again.

MetaSchedule's side runs first. A ratio is printed only when both sides timed every candidate
(`fair.py`): when the baseline did not, the benchmark says what failed, tries it again with a
build limit that covers each build process's tensor-intrinsic import, and exits 1 if it still
falls short. It refuses a busy machine (exit 3) unless `--allow-contended`.

Where the difference comes from: LocalBuilder starts a fresh process pool for every build()
call, and each of its processes imports TVM's tensor intrinsics (about 20 s on this machine)
before its first build; the evaluator's workers pay that once and are reused.
"""

import argparse
import sys
import time

import fair
import tvm.s_tir.meta_schedule as ms

from dragonlab.core.codec import apply
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.evaluation.fuzz import sample_scripts
from dragonlab.search.config import MeasureConfig
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family


FAMILIES = ["matmul", "conv2d_nchw", "softmax", "layernorm"]


def main() -> int:
    quick = first_of_each_family("quick")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--per-workload", type=int, default=2, help="candidates per workload and batch")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--families", nargs="+", default=FAMILIES, choices=sorted(quick),
                   metavar="FAMILY", help="the quick suite's families, the first workload of each")
    fair.add_arguments(p)
    args = p.parse_args()
    idle = fair.machine(args.allow_contended)
    target = get_target("cpu")
    measure = MeasureConfig()
    workloads = [quick[f] for f in args.families]
    batches = [sample_scripts(workloads, target, per_workload=args.per_workload, seed=b) * args.repeats
               for b in range(args.batches)]
    total = sum(map(len, batches))
    print(f"{args.batches} batches of {len(batches[0])} candidates ({len(batches[0]) // args.repeats} unique), "
          f"EvaluatorConfig(number={measure.number}, repeat={measure.repeat}, min_repeat_ms={measure.min_repeat_ms}), "
          f"{fair.environment_note()}", flush=True)

    # The baseline first: a ratio is printed only if it timed every candidate.
    done = fair.baseline(
        "LocalBuilder + LocalRunner", lambda limit: _metaschedule(batches, target, measure, limit),
        lambda r: None if r[2] == total else f"timed {r[2]} of {total} candidates; first error: {r[3]}",
        args.baseline_build_timeout or measure.build_timeout_sec, args.retry_build_timeout)
    if done is None:
        return 1
    (base, base_total, timed, _), timeout = done

    ours, correct, timed_ours, error = [], 0, 0, None
    start = time.perf_counter()
    with Evaluator(target, EvalConfig(measure=measure)) as evaluator:
        for items in batches:
            evaluations = evaluator.evaluate_many(items, progress=False)
            correct += sum(e.correct for e in evaluations)
            timed_ours += sum(e.latency is not None for e in evaluations)
            error = error or next((f"{e.stage}: {e.reason}" for e in evaluations if e.latency is None), None)
            ours.append(time.perf_counter() - start - sum(ours))
    ours_total = time.perf_counter() - start
    if timed_ours < total:
        return fair.refuse_unequal(f"the evaluator timed {timed_ours} of {total} candidates", error)

    print("seconds per batch:")
    print("  dragonlab Evaluator:        " + " ".join(f"{s:6.1f}" for s in ours))
    print("  LocalBuilder + LocalRunner: " + " ".join(f"{s:6.1f}" for s in base))
    ours_rate, base_rate = total / ours_total * 60, total / base_total * 60
    print(f"dragonlab Evaluator:        {total} evaluated ({correct} correct, {timed_ours} timed) in "
          f"{ours_total:6.1f} s = {ours_rate:6.1f} /min")
    print(f"LocalBuilder + LocalRunner: {total} submitted ({timed} timed, build limit {timeout:g} s) in "
          f"{base_total:6.1f} s = {base_rate:6.1f} /min")
    print(f"throughput ratio (evaluator / MetaSchedule), equal work: {ours_rate / base_rate:.2f}x"
          + ("" if idle else " (CONTENDED)"))
    return 0


def _metaschedule(batches, target, measure, build_timeout: float):
    """MetaSchedule's LocalBuilder + LocalRunner on the same kernels: (seconds per batch, total
    seconds, candidates timed, the first error)."""
    modules = [[apply(script, w.mod).mod for w, script in items] for items in batches]  # the same kernels
    seconds, timed, error = [], 0, None
    start = time.perf_counter()
    builder = ms.builder.LocalBuilder(timeout_sec=build_timeout)
    runner = ms.runner.LocalRunner(timeout_sec=measure.run_timeout_sec, evaluator_config=measure.evaluator())
    for items, mods in zip(batches, modules):
        built = builder.build([ms.builder.BuilderInput(m, target.tvm()) for m in mods])
        error = error or next((f"build: {_first_line(b.error_msg)}" for b in built if b.error_msg), None)
        inputs = [ms.runner.RunnerInput(b.artifact_path, "cpu", ms.arg_info.ArgInfo.from_prim_func(w.mod["main"]))
                  for b, (w, _) in zip(built, items) if b.error_msg is None]
        results = [f.result() for f in runner.run(inputs)]
        timed += sum(r.error_msg is None for r in results)
        error = error or next((f"run: {_first_line(r.error_msg)}" for r in results if r.error_msg), None)
        seconds.append(time.perf_counter() - start - sum(seconds))
    total = time.perf_counter() - start
    del builder, runner  # shut MetaSchedule's process pools down while the interpreter is whole
    return seconds, total, timed, error


def _first_line(message: str) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return (lines[0] if lines else "")[:200]


if __name__ == "__main__":
    sys.exit(main())
