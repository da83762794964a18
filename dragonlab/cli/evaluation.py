"""Commands that judge scripts: `evaluate`, `fuzz` and `codec check|show`.

`evaluate`'s flags are EvalConfig's fields (dragonlab.evaluation.config).
"""

from __future__ import annotations

import time
from pathlib import Path

from dragonlab.cli.options import Command, UsageError, command, config_from, require
from dragonlab.cli.search import load_all
from dragonlab.core.errors import InputError, one_line


def add_evaluate(sub, name: str, help: str):
    from dragonlab.evaluation.config import EvalConfig

    c = command(sub, name, help, configs=[EvalConfig])
    c.add_argument("--db", nargs="+", type=Path, required=True, help="record stores or database directories")
    c.add_argument("--target", default="cpu", help="the target the records are judged on")
    c.add_argument("--out", type=Path, default=None, help="write the evaluations as JSON lines (new file)")
    c.set_defaults(run=evaluate)


def evaluate(args) -> int:
    import json

    from dragonlab.core.jsonl import write_atomic
    from dragonlab.evaluation.config import EvalConfig
    from dragonlab.evaluation.evaluate import STAGES, Evaluator, evaluate_records

    config = config_from(EvalConfig, args)
    if args.out and args.out.exists():
        raise InputError(f"{args.out} exists; choose a new file")
    workloads, records = load_all(args.db)
    with Evaluator(args.target, config) as evaluator:
        result = evaluate_records(evaluator, workloads, records)
    if args.out:
        write_atomic(args.out, "".join(json.dumps(e.to_json()) + "\n" for e in result.evaluations))
    print("stopped at: " + ", ".join(f"{s} {result.stages.get(s, 0)}" for s in STAGES)
          + f"; ok {result.stages.get('ok', 0)}")
    ratio = f"{result.latency_ratio:.2f}" if result.latency_ratio is not None else "n/a"
    print(f"correct: {result.correct}/{result.total}, latency vs recorded (median ratio): {ratio}")
    return 0


def add_fuzz(sub, name: str, help: str):
    c = command(sub, name, help)
    c.add_argument("--n", type=int, default=200, help="number of mutated scripts")
    c.add_argument("--seed", type=int, default=0, help="seeds the sampled scripts and the mutations")
    c.add_argument("--target", default="cpu", help="the target the scripts are judged on")
    c.add_argument("--workers", type=int, default=None, help="worker processes (default: physical cores)")
    c.add_argument("--mutations", nargs="+", metavar="NAME", default=None,
                   help="draw only from these mutations (default: all, the red team's included)")
    c.add_argument("--red-team", action="store_true", help="draw only from the red-team mutations")
    c.set_defaults(run=fuzz)


def fuzz(args) -> int:
    import psutil

    from dragonlab.core.targets import get_target
    from dragonlab.core.workloads import first_of_each_family
    from dragonlab.evaluation.config import EvalConfig
    from dragonlab.evaluation.evaluate import STAGES, Evaluator
    from dragonlab.evaluation.fuzz import MUTATIONS, fuzz, sample_scripts
    from dragonlab.evaluation.redteam import RED_TEAM
    from dragonlab.evaluation.workers import descendants

    require("--n", args.n, "> 0")
    mutations = RED_TEAM if args.red_team else args.mutations
    unknown = sorted(set(mutations or ()) - set(MUTATIONS))
    if unknown:
        raise InputError(f"--mutations: unknown {', '.join(unknown)}; choose from {', '.join(MUTATIONS)}")
    target = get_target(args.target)
    quick = first_of_each_family("quick")
    bases = sample_scripts([quick[f] for f in ("matmul", "conv2d_nchw", "softmax", "reduce_row")],
                           target, per_workload=4, seed=args.seed)
    before = {p.pid for p in descendants()}
    with Evaluator(target, EvalConfig(workers=args.workers, time=False, timeout_sec=30)) as evaluator:
        report = fuzz(args.n, args.seed, evaluator, bases, mutations=mutations)
    time.sleep(0.5)
    leaked = [p for p in descendants() if p.pid not in before and p.is_running()
              and p.status() != psutil.STATUS_ZOMBIE]
    report.leaked_workers = len(leaked)
    print(report.table([*STAGES, "ok"]))
    clean = not (report.host_crashes or report.leaked_workers or report.unrefused or report.marker_touched)
    return 0 if clean else 1


def add_codec(sub, name: str, help: str):
    cod = command(sub, name, help)
    csub = cod.add_subparsers(title="codec commands", metavar="ACTION")
    c = command(csub, "check", "round-trip every trace through its script and replay both on the workload",
                description="Encode every trace, decode it, compare it with the stored trace, and replay both on "
                            "the record's workload (structural_equal). Lists the records that are not exact with "
                            "their first difference; ends with 'exact: N/N, chars vs as_python: X.XXx, vs json: "
                            "Y.YYx'. Exit status 1 if any record is not exact.")
    c.add_argument("paths", nargs="+", type=Path, help="record stores or MetaSchedule databases")
    c.set_defaults(run=codec_check)
    c = command(csub, "show", "one record: its script beside as_python, then its scheduled TIR",
                description="Print one record as its script and as Trace.as_python() side by side (one row per "
                            "instruction), then the scheduled TIR (sch.mod.script()).")
    c.add_argument("path", type=Path, help="a record store or MetaSchedule database")
    which = c.add_mutually_exclusive_group()
    which.add_argument("--index", type=int, default=None, help="the K-th record, counting from 0 (default 0)")
    which.add_argument("--workload", default=None, help="the first record of the workload with this name or key")
    c.set_defaults(run=codec_show)
    cod.set_defaults(run=lambda a: cod.print_help() or 2)


def codec_check(args) -> int:
    from dragonlab.evaluation.codec_check import check_records

    workloads, records = load_all(args.paths)
    if not records:
        raise UsageError(f"no records in {', '.join(map(str, args.paths))}")
    report = check_records(workloads, records)
    for f in report.failures:
        print(f"not exact: record {f.index} ({f.workload} on {f.target}): {f.difference}")
    print(report.summary())
    return 1 if report.failures else 0


def codec_show(args) -> int:
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from dragonlab.search.explore import side_by_side

    workloads, records = load_all([args.path])
    index = _record_index(args, workloads, records)
    r = records[index]
    if r.workload not in workloads:
        raise UsageError(f"record {index}: its workload {r.workload} is not stored in {args.path}")
    w = workloads[r.workload]
    sch = Schedule(w.mod, seed=1)
    try:
        Trace.apply_json_to_schedule(r.trace, sch)
    except Exception as e:  # TVM raises many error types for a trace that does not fit the module
        raise UsageError(f"record {index}: its trace does not apply to its workload: "
                         f"{one_line(e, last=True, typed=False)}") from None
    latency = f", {r.latency * 1e3:.4f} ms" if r.latency is not None else ""
    print(f"record {index} of {len(records)}: {w.name} on {r.target} ({r.status}{latency})\n")
    print(side_by_side(sch.trace))
    print("\nscheduled TIR (sch.mod.script())")
    print(sch.mod.script())
    return 0


def _record_index(args, workloads: dict, records: list) -> int:
    """The record --workload or --index picks (the first one without either)."""
    if args.workload is not None:
        names = {key: w.name for key, w in workloads.items()}
        index = next((i for i, r in enumerate(records) if args.workload in (r.workload, names.get(r.workload))), None)
        if index is None:
            raise UsageError(f"--workload: no record of workload {args.workload!r} in {args.path}")
        return index
    index = args.index or 0
    if not 0 <= index < len(records):
        raise UsageError(f"--index {index}: {args.path} has {len(records)} records (0 to {len(records) - 1})")
    return index


COMMANDS = [
    Command("evaluate", "evaluate every record of record stores or MetaSchedule databases", add_evaluate),
    Command("fuzz", "feed broken and adversarial scripts to the evaluator", add_fuzz),
    Command("codec", "check the script codec on records; show a record in every form", add_codec),
]
