"""Worker start-up: workers forked from a zygote against a fresh interpreter per worker, in the same run.

    .venv/bin/python benchmarks/workers.py [--rounds 3] [--crashes 4]

Two pieces of equal work, each done by both sides in turn, `--rounds` times (median reported):

- *a cold evaluator*: open an `Evaluator` on the CPU, judge two post-processed samples of the
  first quick matmul (apply, validate, build, run, check, time), close it. What a notebook cell,
  a `dragonlab attempts` run or a test pays before its first verdict.
- *crash recovery*: a sandboxed worker runs a call that dies of SIGSEGV, `--crashes` times, each
  followed by a call that answers: every answer needs a new worker. What a kernel that crashes
  its worker costs the next script.

Wall seconds and CPU seconds of the child processes (the workers, and the zygote with the
workers it reaped) for each side; the ratio is fresh / zygote. A ratio is printed only when
both sides finished the work: every verdict `ok`, every crash reported as one. Refuses a busy
machine (exit 3) unless `--allow-contended`.
"""

import argparse
import resource
import statistics
import time

import fair

from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family
from dragonlab.evaluation import workers
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.evaluation.fuzz import sample_scripts
from dragonlab.evaluation.workers import Limits, Worker, WorkerCrashed
from dragonlab.testing import worker_jobs


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(work) -> tuple[float, float, bool]:
    """(wall seconds, children's CPU seconds, whether the work was all done)."""
    wall, cpu = time.perf_counter(), children_cpu()
    done = work()
    return time.perf_counter() - wall, children_cpu() - cpu, done


def cold_evaluator(items) -> bool:
    with Evaluator("cpu", EvalConfig()) as evaluator:
        return all(e.stage == "ok" for e in evaluator.evaluate_many(items, progress=False))


def crash_recovery(crashes: int) -> bool:
    worker = Worker(Limits(timeout_sec=60), sandbox=True)
    try:
        done = True
        for i in range(crashes):
            try:
                worker.call(worker_jobs.crash)
                done = False
            except WorkerCrashed:
                pass
            done &= worker.call(worker_jobs.echo, i) == i
        return done
    finally:
        worker.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--crashes", type=int, default=4)
    fair.add_load_argument(p)
    args = p.parse_args()
    idle = fair.machine(args.allow_contended)
    if not workers.ZYGOTES:
        print("no zygotes on this platform (or DRAGONLAB_ZYGOTES=0): nothing to compare", flush=True)
        return 1
    # Cold means cold: every evaluator starts its own zygote, none waits for the next round's.
    workers.LINGER_SEC = 0.0
    matmul = first_of_each_family("quick")["matmul"]
    items = sample_scripts([matmul], get_target("cpu"), per_workload=2, seed=0)
    print(f"{args.rounds} rounds; a cold evaluator judging {len(items)} samples of {matmul.name}; "
          f"{args.crashes} crashes of a sandboxed worker; {fair.environment_note()}", flush=True)
    pieces = {"cold evaluator": lambda: cold_evaluator(items), "crash recovery": lambda: crash_recovery(args.crashes)}
    status = 0
    for name, work in pieces.items():
        runs = {"zygote": [], "fresh": []}
        for _ in range(args.rounds):
            for side in runs:  # in turn, so that a slow spell of the machine falls on both
                workers.ZYGOTES = side == "zygote"
                runs[side].append(measured(work))
        workers.ZYGOTES = True
        for side, results in runs.items():
            print(f"{name}, {side}: {statistics.median(r[0] for r in results):.2f} s wall, "
                  f"{statistics.median(r[1] for r in results):.2f} s CPU in child processes (median of "
                  f"{len(results)}; all done: {all(r[2] for r in results)})", flush=True)
        if not all(r[2] for results in runs.values() for r in results):
            status = fair.refuse_unequal(f"{name}: a side did not finish its work", None)
            continue
        wall, cpu = ({side: statistics.median(r[i] for r in results) for side, results in runs.items()} for i in (0, 1))
        print(f"{name}: fresh / zygote {wall['fresh'] / wall['zygote']:.2f}x wall, "
              f"{cpu['fresh'] / cpu['zygote']:.2f}x CPU" + ("" if idle else " (CONTENDED)"), flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
