"""The `dragonlab` command: one subcommand per pipeline stage.

A `DragonlabError` (bad input: a malformed file, an unknown target, a bad parameter; or an
unavailable service) ends the command with one line `dragonlab: error: ...` naming what is wrong,
and exit status 2; nothing is overwritten. Anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import math
import os
import sys
import time
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.errors import DragonlabError, InputError

# Heavy imports (TVM, MetaSchedule) happen inside the commands, so `--help` is instant.


class UsageError(InputError):
    """A bad combination of flags, or a path the command cannot use."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return args.run(args) or 0
    except DragonlabError as e:  # bad input or an unavailable service; anything else is a bug
        print(f"dragonlab: error: {e}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dragonlab", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(title="commands", metavar="COMMAND")

    c = sub.add_parser("targets", help="list the named targets")
    c.set_defaults(run=_targets)

    c = sub.add_parser("workloads", help="list the workloads of a suite")
    c.add_argument("--suite", default="quick")
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(run=_workloads)

    c = sub.add_parser("collect", help="run MetaSchedule search and keep every measured candidate")
    _collect_args(c)
    c.set_defaults(run=_collect)

    rec = sub.add_parser("records", help="import, export, merge and summarise search records")
    rsub = rec.add_subparsers(title="records commands", metavar="ACTION")
    c = rsub.add_parser("import", help="read MetaSchedule JSON databases into a record store")
    c.add_argument("paths", nargs="+", type=Path, help="database directories (searched recursively)")
    c.add_argument("--out", type=Path, required=True, help="record store directory (created)")
    c.set_defaults(run=_records_import)
    c = rsub.add_parser("export", help="write a record store as a MetaSchedule JSON database")
    c.add_argument("store", type=Path)
    c.add_argument("--target", default="cpu")
    c.add_argument("--out", type=Path, required=True, help="new directory for the database")
    c.set_defaults(run=_records_export)
    c = rsub.add_parser("merge", help="merge record stores (shards) with de-duplication")
    c.add_argument("stores", nargs="+", type=Path)
    c.add_argument("--out", type=Path, required=True)
    c.set_defaults(run=_records_merge)
    c = rsub.add_parser("stats", help="counts per workload, family and target; failures; latency spread")
    c.add_argument("paths", nargs="+", type=Path, help="record stores or MetaSchedule databases")
    c.set_defaults(run=_records_stats)
    c = rsub.add_parser("seal", help="compress a store's finished files into .gz files that never change",
                        description="Compress the plain files of a record store (all of them, or one shard's "
                                    "records and progress, and the workload file) into sealed .gz files that "
                                    "every command reads as they are. A sealed file is never replaced.")
    c.add_argument("store", type=Path)
    c.add_argument("--shard", default=None, help="I/N: seal only this shard's files (and the workload file)")
    c.add_argument("--part", action="store_true",
                   help="the shard is not finished: seal what it has so far as a numbered part; collecting it "
                        "again goes on from there in new files")
    c.set_defaults(run=_records_seal)
    c = rsub.add_parser("card", help="write a record store's README.md: counts, machine, time, benchmark, rebuild")
    c.add_argument("store", type=Path)
    c.set_defaults(run=_records_card)
    rec.set_defaults(run=lambda a: rec.print_help() or 2)

    c = sub.add_parser("evaluate", help="evaluate every record of record stores or MetaSchedule databases")
    c.add_argument("--db", nargs="+", type=Path, required=True, help="record stores or database directories")
    c.add_argument("--target", default="cpu")
    c.add_argument("--workers", type=int, default=None, help="worker processes (default: physical cores)")
    c.add_argument("--checks", type=int, default=3, help="random input sets per correctness check")
    c.add_argument("--no-time", action="store_true", help="check correctness only")
    c.add_argument("--out", type=Path, default=None, help="write the evaluations as JSON lines (new file)")
    c.set_defaults(run=_evaluate)

    c = sub.add_parser("fuzz", help="feed broken and adversarial scripts to the evaluator")
    c.add_argument("--n", type=int, default=200, help="number of mutated scripts")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--target", default="cpu")
    c.add_argument("--workers", type=int, default=None)
    c.add_argument("--mutations", nargs="+", metavar="NAME", default=None,
                   help="draw only from these mutations (default: all, the red team's included)")
    c.add_argument("--red-team", action="store_true", help="draw only from the red-team mutations")
    c.set_defaults(run=_fuzz)

    cod = sub.add_parser("codec", help="check the script codec on records; show a record in every form")
    csub = cod.add_subparsers(title="codec commands", metavar="ACTION")
    c = csub.add_parser("check", help="round-trip every trace through its script and replay both on the workload",
                        description="Encode every trace, decode it, compare it with the stored trace, and replay "
                                    "both on the record's workload (structural_equal). Lists the records that are "
                                    "not exact with their first difference; ends with 'exact: N/N, chars vs "
                                    "as_python: X.XXx, vs json: Y.YYx'. Exit status 1 if any record is not exact.")
    c.add_argument("paths", nargs="+", type=Path, help="record stores or MetaSchedule databases")
    c.set_defaults(run=_codec_check)
    c = csub.add_parser("show", help="one record: its script beside as_python, then its scheduled TIR",
                        description="Print one record as its script and as Trace.as_python() side by side (one row "
                                    "per instruction), then the scheduled TIR (sch.mod.script()).")
    c.add_argument("path", type=Path, help="a record store or MetaSchedule database")
    which = c.add_mutually_exclusive_group()
    which.add_argument("--index", type=int, default=None, help="the K-th record, counting from 0 (default 0)")
    which.add_argument("--workload", default=None, help="the first record of the workload with this name or key")
    c.set_defaults(run=_codec_show)
    cod.set_defaults(run=lambda a: cod.print_help() or 2)

    _dataset_commands(sub)
    _model_commands(sub)
    _rl_commands(sub)
    _report_commands(sub)

    c = sub.add_parser("demo", help="the quick end-to-end pipeline on the CPU")
    c.add_argument("--out", type=Path, default=Path("runs/demo"))
    c.add_argument("--trials", type=int, default=16, help="MetaSchedule candidates per quick workload")
    c.add_argument("--preset", default="scratch-tiny", help="the model fine-tuned by SFT")
    c.add_argument("--sft-steps", type=int, default=200)
    c.add_argument("--rl-steps", type=int, default=6)
    c.set_defaults(run=_demo)

    c = sub.add_parser("campaign", help="every stage at one scale from a campaign file (campaigns/*.toml)",
                       description="Check a campaign on this machine without a GPU and estimate its device-hours "
                                   "(--dry-run: exit 1 if a check fails), or run it: campaigns/quick.toml runs as "
                                   "`dragonlab demo`; for the others the commands are printed (docs/scale.md).")
    c.add_argument("--config", type=Path, required=True, help="a campaign file, e.g. campaigns/paper.toml")
    c.add_argument("--dry-run", action="store_true", help="check what needs no GPU, then estimate device-hours")
    c.set_defaults(run=_campaign)
    return p


def _collect_args(c: argparse.ArgumentParser) -> None:
    c.add_argument("--suite", default="quick", help="quick | standard | paper")
    c.add_argument("--only", default=None, help="comma-separated workload names of the suite")
    c.add_argument("--target", default="cpu")
    c.add_argument("--trials", type=int, default=None, help="measured candidates per workload (default 32)")
    c.add_argument("--benchmark-search", type=Path, default=None, metavar="BENCHMARK",
                   help="search the benchmark's test and test_family workloads of the suite to the trials the "
                        "benchmark file gives each (512 or 128), continuing from their records; written as "
                        "shard 'search'")
    c.add_argument("--per-round", type=int, default=16, help="candidates per search round")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", type=Path, required=True, help="record store directory")
    c.add_argument("--shard", default=None, help="I/N: this machine's share of the workloads")
    c.add_argument("--runner", default="local", choices=["local", "rpc"])
    c.add_argument("--tracker", default=None, help="HOST:PORT of TVM's RPC tracker")
    c.add_argument("--key", default=None, help="device key at the tracker")
    c.add_argument("--repeat", type=int, default=3)
    c.add_argument("--number", type=int, default=3)
    c.add_argument("--min-repeat-ms", type=int, default=40)
    c.add_argument("--timeout", type=_positive_number, default=30.0, help="seconds per build and per run")


def _targets(args) -> int:
    from dragonlab.core.targets import get_target, target_names

    for name in target_names():
        print(f"{name:10s} {get_target(name).config}")
    return 0


def _workloads(args) -> int:
    from dragonlab.core.workloads import suite

    for w in suite(args.suite, seed=args.seed):
        print(f"{w.name:48s} {w.family:20s} {w.dtype:8s} {w.flops:>14,d} flops  key {w.key}")
    return 0


def _positive(name: str, value) -> None:
    if value is None or value <= 0:
        raise UsageError(f"{name} must be positive, got {value}")


def _positive_number(text: str) -> float:
    """An argparse type: a finite number above 0. `float` takes nan, which passes any `<= 0` check."""
    return _finite(text, "a positive", lambda x: x > 0)


def _non_negative_number(text: str) -> float:
    """An argparse type: a finite number, 0 or above."""
    return _finite(text, "a non-negative", lambda x: x >= 0)


def _finite(text: str, what: str, ok) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and ok(value)):
        raise argparse.ArgumentTypeError(f"expected {what} finite number, got {text!r}")
    return value


def _collect(args) -> int:
    from dragonlab.core.targets import get_target
    from dragonlab.core.workloads import suite
    from dragonlab.search.collect import CollectConfig, collect, machine, shard, shard_name
    from dragonlab.search.measure import MeasureConfig
    from dragonlab.search.records import RecordStore

    if args.benchmark_search and args.trials is not None:
        raise UsageError("--benchmark-search takes each workload's trials from the benchmark: leave out --trials")
    trials = args.trials if args.trials is not None else 32
    for name, value in (("trials", trials), ("per_round", args.per_round), ("repeat", args.repeat),
                        ("number", args.number)):
        _positive(f"--{name.replace('_', '-')}", value)
    bench = _load_benchmark(args.benchmark_search) if args.benchmark_search else None
    target = get_target(args.target)
    workloads = suite(args.suite, seed=args.seed)
    if bench is not None:
        known = {w.key for w in workloads}
        missing = [k for k in bench.judged() if k not in known]
        if missing:
            raise UsageError(f"--benchmark-search: {args.benchmark_search} names workload {missing[0]} "
                             f"({bench.names[missing[0]]}), which is not in suite {args.suite!r}")
        workloads = [w for w in workloads if w.key in set(bench.judged())]
    if args.only:
        wanted = args.only.split(",")
        names = {w.name for w in workloads}
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise UsageError(f"--only: {unknown[0]!r} is not a workload of suite {args.suite!r}")
        workloads = [w for w in workloads if w.name in wanted]
    workloads = shard(workloads, args.shard)
    suffix = ".".join(p for p in ("search" if bench else "", shard_name(args.shard) if args.shard else "") if p)
    store = RecordStore(args.out, shard=suffix, create=True)
    config = CollectConfig(
        trials=trials, trials_per_round=args.per_round, seed=args.seed, runner=args.runner,
        tracker=args.tracker, key=args.key,
        measure=MeasureConfig(number=args.number, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                              build_timeout_sec=args.timeout, run_timeout_sec=args.timeout))
    # the benchmark gives each workload its budget: one collection per budget, largest first
    budgets = ({t: [w for w in workloads if w.key in keys] for t, keys in sorted(bench.search.items(), reverse=True)}
               if bench else {trials: workloads})
    began, start = _now(), time.monotonic()
    summaries = []
    try:
        for budget, group in budgets.items():
            if group:
                summaries.append(collect(group, target, store, dataclasses.replace(config, trials=budget)))
    finally:  # a run stopped by Ctrl-C still says what it measured, and for how long
        measured = sum(s.measured for s in summaries)
        store.log_run({"started": began, "finished": _now(), "wall_s": round(time.monotonic() - start, 1),
                       "suite": args.suite, "seed": args.seed, "shard": args.shard, "target": target.name,
                       "trials": {str(b): len(g) for b, g in budgets.items() if g}, "measured": measured,
                       "settings": dataclasses.asdict(config) | {"trials": None}, "machine": machine()})
    minutes = (time.monotonic() - start) / 60
    skipped = sum(s.skipped for s in summaries)
    timeouts = sum(s.timeouts for s in summaries)
    print(f"collected {measured} new records for {len(workloads)} workloads on {target.name} "
          f"in {minutes:.1f} min ({skipped} already done, {timeouts} timeouts) -> {args.out}")
    failed = [line for s in summaries for line in s.failed_workloads]
    for line in failed:
        print(f"  workload failed: {line}", file=sys.stderr)
    return 1 if failed else 0


def _is_main() -> bool:
    """Under `accelerate launch` only the main process prints the summary."""
    from dragonlab.core.rundir import is_main

    return is_main()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _load_benchmark(path: Path):
    from dragonlab.search.benchmark import load

    return load(path)


def _records_import(args) -> int:
    from dragonlab.search.msdb import import_databases
    from dragonlab.search.records import RecordStore

    for p in args.paths:
        if not p.exists():
            raise InputError(f"{p} does not exist")
    added = import_databases(args.paths, RecordStore(args.out, create=True))
    print(f"imported {added} new records -> {args.out}")
    return 0


def _records_export(args) -> int:
    from dragonlab.search.msdb import export_database
    from dragonlab.search.records import RecordStore

    n = export_database(RecordStore(args.store), args.out, args.target)
    print(f"exported {n} records for target {args.target} -> {args.out}")
    return 0


def _records_merge(args) -> int:
    from dragonlab.search.records import RecordStore, merge

    added = merge([RecordStore(s) for s in args.stores], RecordStore(args.out, create=True))
    print(f"merged {added} new records -> {args.out}")
    return 0


def _records_seal(args) -> int:
    from dragonlab.search.collect import shard_name
    from dragonlab.search.records import RecordStore

    sealed = RecordStore(args.store).seal(shard_name(args.shard) if args.shard else None, part=args.part)
    for path in sealed:
        print(f"sealed {path} ({path.stat().st_size / 1e6:.2f} MB)")
    if not sealed:
        print(f"nothing to seal in {args.store}")
    return 0


def _records_card(args) -> int:
    from dragonlab.core.jsonl import write_atomic
    from dragonlab.search.corpus import card

    text = card(args.store)
    write_atomic(args.store / "README.md", text)
    print(f"wrote {args.store / 'README.md'}")
    return 0


def _records_stats(args) -> int:
    from dragonlab.search.records import STATUSES, stats

    workloads, records = _load_all(args.paths)
    print(format_stats(stats(workloads, records), STATUSES))
    return 0


def format_stats(s, statuses) -> str:
    def ms(x):
        return f"{x:10.4f}" if x is not None else f"{'-':>10s}"

    head = f"{'workload':40s} {'family':20s} {'target':9s} " + " ".join(f"{st:>11s}" for st in statuses)
    lines = [head + f" {'best ms':>10s} {'median ms':>10s} {'worst ms':>10s}"]
    for r in s.rows:
        lines.append(f"{r['workload'][:40]:40s} {r['family'][:20]:20s} {r['target']:9s} "
                     + " ".join(f"{r[st]:11d}" for st in statuses)
                     + f" {ms(r['best_ms'])} {ms(r['median_ms'])} {ms(r['worst_ms'])}")
    lines.append("")
    lines.append("per family:")
    for fam, counts in sorted(s.by_family.items()):
        lines.append(f"  {fam:40s} " + ", ".join(f"{st} {counts.get(st, 0)}" for st in statuses))
    total = sum(s.totals.values())
    lines.append(f"total: {total} records, {len(s.rows)} workload/target pairs, "
                 + ", ".join(f"{st} {s.totals.get(st, 0)}" for st in statuses))
    return "\n".join(lines)


def _evaluate(args) -> int:
    import json

    from dragonlab.core.jsonl import write_atomic
    from dragonlab.evaluation.evaluate import STAGES, EvalConfig, Evaluator, evaluate_records

    _positive("--checks", args.checks)
    if args.workers is not None:
        _positive("--workers", args.workers)
    if args.out and args.out.exists():
        raise InputError(f"{args.out} exists; choose a new file")
    workloads, records = _load_all(args.db)
    config = EvalConfig(workers=args.workers, checks=args.checks, time=not args.no_time)
    with Evaluator(args.target, config) as evaluator:
        result = evaluate_records(evaluator, workloads, records)
    if args.out:
        write_atomic(args.out, "".join(json.dumps(e.to_json()) + "\n" for e in result.evaluations))
    print("stopped at: " + ", ".join(f"{s} {result.stages.get(s, 0)}" for s in STAGES)
          + f"; ok {result.stages.get('ok', 0)}")
    ratio = f"{result.latency_ratio:.2f}" if result.latency_ratio is not None else "n/a"
    print(f"correct: {result.correct}/{result.total}, latency vs recorded (median ratio): {ratio}")
    return 0


def _fuzz(args) -> int:
    import psutil

    from dragonlab.core.targets import get_target
    from dragonlab.core.workloads import suite
    from dragonlab.evaluation.evaluate import STAGES, EvalConfig, Evaluator
    from dragonlab.evaluation.fuzz import MUTATIONS, fuzz, sample_scripts
    from dragonlab.evaluation.redteam import RED_TEAM

    _positive("--n", args.n)
    mutations = RED_TEAM if args.red_team else args.mutations
    unknown = sorted(set(mutations or ()) - set(MUTATIONS))
    if unknown:
        raise InputError(f"--mutations: unknown {', '.join(unknown)}; choose from {', '.join(MUTATIONS)}")
    target = get_target(args.target)
    quick = {w.family: w for w in reversed(suite("quick"))}  # first of each family
    bases = sample_scripts([quick[f] for f in ("matmul", "conv2d_nchw", "softmax", "reduce_row")],
                           target, per_workload=4, seed=args.seed)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    with Evaluator(target, EvalConfig(workers=args.workers, time=False, timeout_sec=30)) as evaluator:
        report = fuzz(args.n, args.seed, evaluator, bases, mutations=mutations)
    time.sleep(0.5)
    leaked = [p for p in me.children(recursive=True) if p.pid not in before and p.is_running()
              and p.status() != psutil.STATUS_ZOMBIE]
    report.leaked_workers = len(leaked)
    print(report.table([*STAGES, "ok"]))
    clean = not (report.host_crashes or report.leaked_workers or report.unrefused or report.marker_touched)
    return 0 if clean else 1


def _load_all(paths: list[Path]) -> tuple[dict, list]:
    from dragonlab.search.msdb import load

    workloads, records = {}, []
    for p in paths:
        if not p.exists():
            raise InputError(f"{p} does not exist")
        ws, rs = load(p)
        workloads.update(ws)
        records.extend(rs)
    return workloads, records


def _codec_check(args) -> int:
    from dragonlab.evaluation.codec_check import check_records

    workloads, records = _load_all(args.paths)
    if not records:
        raise UsageError(f"no records in {', '.join(map(str, args.paths))}")
    report = check_records(workloads, records)
    for f in report.failures:
        print(f"not exact: record {f.index} ({f.workload} on {f.target}): {f.difference}")
    print(report.summary())
    return 1 if report.failures else 0


def _codec_show(args) -> int:
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from dragonlab.search.explore import side_by_side

    workloads, records = _load_all([args.path])
    if args.workload is not None:
        names = {key: w.name for key, w in workloads.items()}
        index = next((i for i, r in enumerate(records) if args.workload in (r.workload, names.get(r.workload))), None)
        if index is None:
            raise UsageError(f"--workload: no record of workload {args.workload!r} in {args.path}")
    else:
        index = args.index or 0
        if not 0 <= index < len(records):
            raise UsageError(f"--index {index}: {args.path} has {len(records)} records (0 to {len(records) - 1})")
    r = records[index]
    if r.workload not in workloads:
        raise UsageError(f"record {index}: its workload {r.workload} is not stored in {args.path}")
    w = workloads[r.workload]
    sch = Schedule(w.mod, seed=1)
    try:
        Trace.apply_json_to_schedule(r.trace, sch)
    except Exception as e:  # TVM raises many error types for a trace that does not fit the module
        raise UsageError(f"record {index}: its trace does not apply to its workload: "
                         f"{str(e).strip().splitlines()[-1]}") from None
    latency = f", {r.latency * 1e3:.4f} ms" if r.latency is not None else ""
    print(f"record {index} of {len(records)}: {w.name} on {r.target} ({r.status}{latency})\n")
    print(side_by_side(sch.trace))
    print("\nscheduled TIR (sch.mod.script())")
    print(sch.mod.script())
    return 0


def _demo(args) -> int:
    """The quick pipeline as a papermill batch of the notebooks: collect the quick suite and build
    the datasets (03), check the codec on every record, fine-tune (04), RL (05), and the report
    (06). The executed notebooks stay in OUT/notebooks; every stage resumes or reuses what an
    earlier run left in OUT."""
    import papermill

    notebooks = Path(__file__).resolve().parents[2] / "notebooks"
    if not notebooks.is_dir():
        raise UsageError(f"{notebooks} is missing: the demo runs from a source checkout (pip install -e .)")
    out = args.out.resolve()
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TQDM_DISABLE", "1")  # the notebooks' own progress output, not one line per update
    data, sft, rl = out / "dataset", out / "sft", out / "rl"
    steps = [
        ("03_dataset", {"records": str(out / "records"), "trials": args.trials, "families": None, "resume": True,
                        "out": str(data), "holdout_family": "softmax"}),
        ("codec check", ["codec", "check", str(out / "records")]),
        ("04_sft", {"data": str(data), "run": str(sft), "preset": args.preset, "max_steps": args.sft_steps,
                    "split": "test", "n": 1, "limit": 4}),
        ("05_rl", {"data": str(data), "sft_run": str(sft), "run": str(rl), "max_steps": args.rl_steps,
                   "num_generations": 4, "prompts_per_step": 2, "splits": ["test", "test_family"], "limit": 2}),
        ("06_evaluate", {"run": str(out), "k": 8, "budgets": [8, 16, 32], "turns": 2, "refinement_per_workload": 1,
                         "constrained": True}),
    ]
    start, times = time.monotonic(), []
    log = out / "demo.log"
    print(f"kernel and TVM messages -> {log}", flush=True)
    with _stderr_of_children_to(log):
        for i, (name, what) in enumerate(steps):
            began = time.monotonic()
            print(f"\n[{i + 1}/{len(steps)}] {name} {_eta(times, [n for n, _ in steps[i:]])}", flush=True)
            if isinstance(what, list):
                print(f"$ dragonlab {' '.join(what)}", flush=True)
                code = main(what)
                if code:
                    return code
            else:
                target = out / "notebooks" / f"{name}.ipynb"
                print(f"notebooks/{name}.ipynb -> {target}", flush=True)
                papermill.execute_notebook(
                    str(notebooks / f"{name}.ipynb"), str(target), parameters=what, kernel_name="python3",
                    cwd=str(out), execution_timeout=3600,  # a cell that hangs fails the demo
                    progress_bar={"desc": name, "disable": False, "file": sys.stderr, "dynamic_ncols": True})
            times.append((name, time.monotonic() - began))
            print(f"   {name}: {times[-1][1]:.0f} s (total {_minutes(time.monotonic() - start)})", flush=True)
    from dragonlab.reporting.report import read_report

    print("\n" + summary_text(read_report(out / "report")))
    print(f"\ndemo finished in {_minutes(time.monotonic() - start)} ({', '.join(f'{n} {t:.0f} s' for n, t in times)})")
    print(f"report: {out / 'report' / 'report.html'}; executed notebooks: {out / 'notebooks'}")
    return 0


# Seconds each demo stage took on an idle 2-core machine (README): the estimate's proportions.
DEMO_SECONDS = {"03_dataset": 526, "codec check": 12, "04_sft": 242, "05_rl": 76, "06_evaluate": 746}


def _eta(done: list[tuple[str, float]], left: list[str]) -> str:
    """"about N min left": the reference times of the stages left, scaled by how this machine
    did on the stages done so far."""
    ref_done = sum(DEMO_SECONDS.get(n, 0) for n, _ in done)
    scale = sum(t for _, t in done) / ref_done if ref_done else 1.0
    return f"(about {_minutes(scale * sum(DEMO_SECONDS.get(n, 0) for n in left))} left)"


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


@contextlib.contextmanager
def _stderr_of_children_to(path: Path):
    """Point file descriptor 2 at `path` so that processes started inside (notebook kernels, TVM's
    C++ logging, worker processes) write their warnings there; this process's `sys.stderr` (the
    progress bars, errors) stays on the terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    terminal, old = os.fdopen(os.dup(saved), "w", buffering=1), sys.stderr
    sys.stderr = terminal
    try:
        yield
    finally:
        terminal.flush()
        sys.stderr = old
        os.dup2(saved, 2)
        os.close(saved)
        terminal.close()


def _campaign(args) -> int:
    from dragonlab.cli import campaign

    c = campaign.load(args.config)
    if args.dry_run:
        start = time.monotonic()
        checks = campaign.dry_run(c)
        print(campaign.format_checks(c, checks, time.monotonic() - start))
        print(campaign.format_estimate(c, campaign.estimate(c, checks), checks))
        return 0 if all(check.ok for check in checks) else 1
    demo = campaign.demo_options(c)
    if demo is None:
        print("\n".join(campaign.plan(c)))
        raise UsageError(f"{args.config}: only --dry-run is implemented for this campaign; the commands above are "
                         "what it would run (a campaign runs from here only as `dragonlab demo`: campaigns/quick.toml "
                         "with other out, trials or steps)")
    return _demo(argparse.Namespace(**demo))


def _dataset_commands(sub) -> None:
    # Options left out take DatasetConfig's defaults (given in the help; importing the
    # config here would import TVM and make --help slow).
    ds = sub.add_parser("dataset", help="build construction and refinement datasets from search records")
    dsub = ds.add_subparsers(title="dataset commands", metavar="ACTION")
    c = dsub.add_parser("build", help="prompt/completion examples split by workload, saved as a DatasetDict",
                        description="Construction (kernel -> one of its top-k scripts) and refinement (kernel + "
                                    "script -> a script faster by the margin) examples from the ok records, split "
                                    "by workload key, written atomically to a new directory with a dataset card.")
    c.add_argument("--records", nargs="+", type=Path, required=True, help="record stores or MetaSchedule databases")
    c.add_argument("--out", type=Path, required=True, help="new directory for the dataset")
    c.add_argument("--top-k", type=int, help="construction completions per workload and target (default 4)")
    c.add_argument("--margin", type=float, help="refinement: output latency <= input x (1 - margin) (default 0.10)")
    c.add_argument("--pairs-per-workload", type=int,
                   help="refinement pairs per workload and target, at most (default 16)")
    c.add_argument("--seed", type=int, help="seeds the split and the pair sampling (default 0)")
    c.add_argument("--holdout-family", help="an op family held out as the test_family split (default none)")
    c.add_argument("--prompt-form", choices=("compact", "tvmscript"), help="how the kernel is shown (default compact)")
    c.add_argument("--scripts", choices=("design", "full"),
                   help="design: scripts stop where post-processing starts; full: whole traces (default design)")
    c.add_argument("--validation", type=float, help="share of workloads in validation (default 0.1)")
    c.add_argument("--test", type=float, help="share of workloads in test (default 0.1)")
    c.add_argument("--benchmark", type=Path,
                   help="a benchmark file whose splits the dataset takes (default: the benchmark.json shipped "
                        "beside the records, if any)")
    c.add_argument("--no-benchmark", action="store_true", help="split by hash even if the records ship a benchmark")
    c.set_defaults(run=_dataset_build)
    c = dsub.add_parser("stats", help="examples and token lengths (mean/max) per split and task")
    c.add_argument("path", type=Path, help="a directory written by `dataset build`")
    c.set_defaults(run=_dataset_stats)
    ds.set_defaults(run=lambda a: ds.print_help() or 2)


def _model_commands(sub) -> None:
    # Defaults left out here are SFTConfig's and the preset's (importing them would make --help slow).
    c = sub.add_parser("sft", help="supervised fine-tuning on a dataset's construction and refinement examples",
                       description="Fine-tune a preset (scratch-tiny, scratch-small, smollm2-135m-lora) or a local "
                                   "Hugging Face checkpoint (with LoRA) with trl's SFTTrainer, loss on completions "
                                   "only. Rerunning with the same settings resumes from the last checkpoint.")
    c.add_argument("--preset", default="scratch-small", help="preset name or local checkpoint directory")
    c.add_argument("--data", type=Path, required=True, help="a directory written by `dataset build`")
    c.add_argument("--out", type=Path, required=True, help="run directory (new, or the same run to resume)")
    c.add_argument("--max-steps", type=int, help="optimizer steps (default: the preset's)")
    c.add_argument("--learning-rate", type=_positive_number, help="peak learning rate (default: the preset's)")
    c.add_argument("--batch-size", type=int, help="examples per step (default: the preset's)")
    c.add_argument("--max-length", type=int, help="tokens per example; longer ones are dropped (default 2048)")
    c.add_argument("--eval-steps", type=int, help="judge validation attempts every N steps (default 0: off)")
    c.add_argument("--eval-examples", type=int, help="validation examples judged each time (default 16)")
    c.add_argument("--save-steps", type=int, help="checkpoint every N steps (default 100)")
    c.add_argument("--logging-steps", type=int, help="log the loss every N steps (default 10)")
    c.add_argument("--report-to", choices=("none", "tensorboard"),
                   help="also log the curves to TensorBoard (event files under OUT/tensorboard; default none)")
    c.add_argument("--seed", type=int, help="default 0")
    c.add_argument("--constrained-eval", action="store_true", default=None,
                   help="judge the validation attempts with constrained decoding")
    c.add_argument("--threads", type=int, help="torch threads (default 1; on an otherwise idle machine, its "
                                                "cores: 2 threads trained scratch-small 1.9x faster on 2 cores)")
    c.set_defaults(run=_sft)

    c = sub.add_parser("attempts", help="a model's attempts at a dataset split, judged by the evaluator",
                       description="Generate N scripts per example of a split, evaluate each one, append them to "
                                   "--out as JSON lines (a rerun resumes), and print per-task correctness with the "
                                   "stage where the failures stopped.")
    c.add_argument("--model", type=Path, required=True, help="a model directory (sft's OUT/model or any checkpoint)")
    c.add_argument("--data", type=Path, required=True, help="a directory written by `dataset build`")
    c.add_argument("--split", default="test")
    c.add_argument("--n", type=int, default=4, help="attempts per example")
    c.add_argument("--temperature", type=_non_negative_number, default=0.8, help="0 = greedy")
    c.add_argument("--limit", type=int, default=None, help="only the first N examples")
    c.add_argument("--max-new-tokens", type=int, default=768)
    c.add_argument("--out", type=Path, required=True, help="attempts file (JSON lines; appended)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--constrained", action="store_true",
                   help="constrained decoding: every script decodes and applies (docs/constrained.md)")
    c.set_defaults(run=_attempts)


def _rl_commands(sub) -> None:
    c = sub.add_parser("rl", help="GRPO with the shaped reward, from an SFT run",
                       description="Reinforcement learning with trl's GRPOTrainer: scripts sampled in groups, "
                                   "judged by the evaluator, rewarded by RewardConfig (correctness first, a "
                                   "latency bonus only for correct kernels). Rerunning the same command resumes.")
    c.add_argument("--from", dest="source", type=Path, required=True, help="an SFT run directory or a model directory")
    c.add_argument("--data", type=Path, required=True, help="a directory written by `dataset build`")
    c.add_argument("--out", type=Path, required=True, help="run directory (new, or the same run to resume)")
    c.add_argument("--max-steps", type=int, help="optimizer steps (default 60)")
    c.add_argument("--learning-rate", type=_positive_number, help="default 1e-4")
    c.add_argument("--num-generations", type=int, help="scripts per prompt, the GRPO group (default 4)")
    c.add_argument("--prompts-per-step", type=int, help="default 2")
    c.add_argument("--beta", type=_non_negative_number, help="KL coefficient (default 0.04; 0 = no reference model)")
    c.add_argument("--temperature", type=_positive_number, help="rollout temperature (default 1.0)")
    c.add_argument("--save-steps", type=int, help="checkpoint every N steps (default 20)")
    c.add_argument("--logging-steps", type=int, help="log the reward's components every N steps (default 1)")
    c.add_argument("--report-to", choices=("none", "tensorboard"),
                   help="also log the curves to TensorBoard (event files under OUT/tensorboard; default none)")
    c.add_argument("--generation", choices=("transformers", "vllm"),
                   help="who generates rollouts: the model (default) or trl's vLLM engine (CUDA GPUs, vllm installed)")
    c.add_argument("--runner", choices=("local", "rpc"), help="where correct kernels are timed (default local)")
    c.add_argument("--tracker", help="HOST:PORT of TVM's RPC tracker (--runner rpc)")
    c.add_argument("--key", help="device key at the tracker (--runner rpc)")
    c.add_argument("--seed", type=int, help="default 0")
    c.add_argument("--constrained", action="store_true", default=None,
                   help="constrained decoding of the rollouts (every script decodes and applies)")
    c.set_defaults(run=_rl)

    c = sub.add_parser("compare", help="two models' kernels on held-out prompts: faster beyond measured noise?",
                       description="One attempt per prompt and model under a fixed seed, judged by one evaluator; "
                                   "a noise threshold measured by re-timing the first model's correct kernels; "
                                   "wins, losses and ties where both are correct, with a sign test.")
    c.add_argument("--a", type=Path, required=True, help="the baseline model directory (e.g. runs/demo/sft/model)")
    c.add_argument("--b", type=Path, required=True, help="the challenger model directory (e.g. runs/demo/rl/model)")
    c.add_argument("--data", type=Path, required=True)
    c.add_argument("--split", nargs="+", default=["test", "test_family"], help="held-out splits")
    c.add_argument("--temperature", type=_non_negative_number, default=0.8)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--limit", type=int, default=None, help="only the first N examples of each split")
    c.add_argument("--constrained", action="store_true", help="constrained decoding for both models")
    c.add_argument("--out", type=Path, required=True, help="directory for both models' attempts (appended)")
    c.set_defaults(run=_compare)


def _report_commands(sub) -> None:
    # Defaults left out here are ReportConfig's (importing it would make --help slow).
    c = sub.add_parser("report", help="the replication report: models against search, dlight, random and LLMs",
                       description="On the held-out prompts of RUN/dataset: k attempts per prompt by each model "
                                   "(RUN/sft/model, RUN/rl/model) and an optional LLM endpoint, multi-turn "
                                   "refinement, MetaSchedule search at several budgets (plain and model-seeded), "
                                   "random design-space samples and dlight's defaults, all judged by one "
                                   "evaluator; writes RUN/report/report.json and report.html. Rerunning resumes.")
    c.add_argument("--run", dest="run_dir", type=Path, required=True, help="a run directory holding dataset/ and sft/ (rl/)")
    c.add_argument("--k", type=int, help="attempts per held-out prompt (default 8)")
    c.add_argument("--budgets", type=int, nargs="+", help="MetaSchedule trial budgets (default 8 32 128 512)")
    c.add_argument("--turns", type=int, help="refinement turns after each construction attempt (default 3)")
    c.add_argument("--refinement-per-workload", type=int, help="refinement prompts per held-out workload (default 2)")
    c.add_argument("--splits", nargs="+", help="held-out splits (default test test_family)")
    c.add_argument("--temperature", type=_non_negative_number, help="default 0.8")
    c.add_argument("--max-new-tokens", type=int, help="default 768")
    c.add_argument("--seed", type=int, help="default 0")
    c.add_argument("--constrained", action="store_true", default=None, help="constrained decoding for the models")
    c.add_argument("--llm-base-url", help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    c.add_argument("--llm-model", help="the model name the endpoint serves")
    c.add_argument("--llm-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    c.add_argument("--llm-endpoint", choices=("chat", "completions"), default="chat",
                   help="chat (default); completions: the dataset prompt alone, for a served dragonlab model")
    c.set_defaults(run=_report)


def _report(args) -> int:
    from dragonlab.reporting.report import ReportConfig, run_report

    if bool(args.llm_base_url) != bool(args.llm_model):
        raise UsageError("--llm-base-url and --llm-model go together")
    options = ("k", "budgets", "turns", "refinement_per_workload", "splits", "temperature", "max_new_tokens", "seed",
               "constrained")
    given = {name: getattr(args, name) for name in options if getattr(args, name) is not None}
    for name in ("budgets", "splits"):
        if name in given:
            given[name] = tuple(given[name])
    try:
        config = ReportConfig(**given)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not (args.run_dir / "dataset").is_dir():
        raise UsageError(f"{args.run_dir}/dataset does not exist (a run directory holds dataset/, sft/ and rl/)")
    llm = None
    if args.llm_base_url:
        from dragonlab.learn.llm import ChatModel

        llm = ChatModel(args.llm_base_url, args.llm_model, api_key_env=args.llm_key_env, endpoint=args.llm_endpoint,
                        temperature=config.temperature)
    start = time.monotonic()
    report = run_report(args.run_dir, config, llm=llm)
    print(summary_text(report))
    print(f"report in {time.monotonic() - start:.0f} s -> {args.run_dir / 'report' / 'report.html'}")
    return 0


def summary_text(report: dict) -> str:
    """A few lines of report.json for the terminal."""
    lines = []
    for name, s in report["systems"].items():
        cells = [f"{t} {s[t]['correct']:.1%}" for t in ("construction", "refinement") if t in s]
        lines.append(f"{name}: per-attempt correctness {', '.join(cells)}")
    for name, by_budget in report["best_of_k_vs_metaschedule"].items():
        cells = [f"N={n}: {r['geomean_latency_ratio']:.3g}x ({r['workloads']} wl)" if r["geomean_latency_ratio"]
                 else f"N={n}: -" for n, r in by_budget.items()]
        label = name if "best-of" in name else f"{name} best-of-{report['config']['k']}"
        lines.append(f"{label} latency / MetaSchedule at N: {', '.join(cells)}")
    return "\n".join(lines)


def _rl(args) -> int:
    from dragonlab.learn.rl import RLConfig, train

    options = ("max_steps", "learning_rate", "num_generations", "prompts_per_step", "beta", "temperature",
               "save_steps", "logging_steps", "seed", "constrained", "report_to", "generation", "runner", "tracker",
               "key")
    config = RLConfig(**{name: getattr(args, name) for name in options if getattr(args, name) is not None})
    start = time.monotonic()
    run = train(args.source, args.data, args.out, config)
    rewards = [d["reward"] for d in run.log if "reward" in d]
    resumed = f", resumed from step {run.resumed_from}" if run.resumed_from else ""
    tail = rewards[-10:]
    if not _is_main():
        return 0
    print(f"GRPO for {run.steps} steps in {time.monotonic() - start:.0f} s{resumed}; mean reward of the last "
          f"{len(tail)} steps {sum(tail) / max(1, len(tail)):.3f} -> {run.model_dir}")
    return 0


def _compare(args) -> int:
    import json

    import torch

    from dragonlab.core.jsonl import write_atomic
    from dragonlab.evaluation.evaluate import Evaluator
    from dragonlab.learn import dataset, models
    from dragonlab.learn.attempts import format_summary, sample_and_evaluate, summary
    from dragonlab.reporting.compare import compare, format_comparison, noise_threshold

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dsd, workloads = dataset.load(args.data)
    splits = [s for s in args.split if s in dsd]
    if not splits:
        raise UsageError(f"the dataset has none of the splits {args.split} (it has {', '.join(dsd)})")
    target = dataset.target_of(dsd, splits)
    args.out.mkdir(parents=True, exist_ok=True)
    judged = {}
    with Evaluator(target) as evaluator:
        for name, path in (("a", args.a), ("b", args.b)):
            model, tokenizer = models.load(path)
            judged[name] = [a for split in splits for a in sample_and_evaluate(
                model, tokenizer, evaluator, dsd, workloads, split=split, n=1, temperature=args.temperature,
                limit=args.limit, out=args.out / f"attempts-{name}.jsonl", seed=args.seed,
                constrained=args.constrained)]
            print(f"{name} = {path}\n{format_summary(summary(judged[name]))}\n")
        rows = {s: [dict(r, index=i) for i, r in enumerate(dsd[s])] for s in splits}
        threshold, retimed = 0.0, 0
        for split in splits:
            t, k = noise_threshold(evaluator, workloads, [x for x in judged["a"] if x.split == split], rows[split])
            threshold, retimed = max(threshold, t), retimed + k
    table = compare(judged["a"], judged["b"], threshold)
    print(f"noise threshold {threshold:.1%}: the 95th percentile of |change| over {retimed} kernels timed twice")
    print(format_comparison(table))
    write_atomic(args.out / "comparison.json", json.dumps({"a": str(args.a), "b": str(args.b), "splits": splits,
                                                           "retimed": retimed, "rows": [r.__dict__ for r in table]},
                                                          indent=1) + "\n")
    return 0


def _sft(args) -> int:
    from dragonlab.learn.sft import SFTConfig, train

    options = ("preset", "max_steps", "learning_rate", "batch_size", "max_length", "eval_steps", "eval_examples",
               "save_steps", "logging_steps", "seed", "constrained_eval", "threads", "report_to")
    config = SFTConfig(**{name: getattr(args, name) for name in options if getattr(args, name) is not None})
    start = time.monotonic()
    run = train(args.data, args.out, config)
    losses = [d["loss"] for d in run.log if "loss" in d]
    resumed = f", resumed from step {run.resumed_from}" if run.resumed_from else ""
    if not _is_main():
        return 0
    print(f"trained {config.preset} for {run.steps} steps in {time.monotonic() - start:.0f} s{resumed}; "
          f"final loss {losses[-1] if losses else float('nan'):.3f} -> {run.model_dir}")
    return 0


def _attempts(args) -> int:
    import os

    import torch

    from dragonlab.evaluation.evaluate import Evaluator
    from dragonlab.learn import dataset, models
    from dragonlab.learn.attempts import format_summary, sample_and_evaluate, summary

    _positive("--n", args.n)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dsd, workloads = dataset.load(args.data)
    model, tokenizer = models.load(args.model)
    with Evaluator(dataset.target_of(dsd, [args.split])) as evaluator:
        attempts = sample_and_evaluate(model, tokenizer, evaluator, dsd, workloads, split=args.split, n=args.n,
                                       temperature=args.temperature, limit=args.limit,
                                       max_new_tokens=args.max_new_tokens, out=args.out, seed=args.seed,
                                       constrained=args.constrained)
    print(format_summary(summary(attempts)))
    return 0


def _dataset_build(args) -> int:
    from dragonlab.learn.dataset import DatasetConfig, build_dataset, format_summary, summary

    options = ("top_k", "margin", "pairs_per_workload", "seed", "holdout_family", "prompt_form", "scripts",
               "validation", "test")
    given = {name: getattr(args, name) for name in options if getattr(args, name) is not None}
    for name in ("top_k", "pairs_per_workload"):
        if name in given:
            _positive(f"--{name.replace('_', '-')}", given[name])
    if "margin" in given and not 0 < given["margin"] < 1:
        raise UsageError(f"--margin must be between 0 and 1 (exclusive), got {given['margin']}")
    for name in ("validation", "test"):
        if name in given and not 0 <= given[name] < 1:
            raise UsageError(f"--{name} must be a share in [0, 1), got {given[name]}")
    given.update(_benchmark_option(args, given))
    config = DatasetConfig(**given)
    start = time.monotonic()
    built = build_dataset(args.records, args.out, config)
    total = sum(len(rows) for rows in built.examples.values())
    print(format_summary(summary(built.examples)))
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(built.skipped.items())) or "none"
    print(f"{total} examples from {len(built.workloads)} workloads in {time.monotonic() - start:.1f} s "
          f"(records not used: {skipped}) -> {args.out}")
    return 0


def _benchmark_option(args, given: dict) -> dict:
    """The benchmark file to split by: --benchmark, else the one shipped beside the records."""
    from dragonlab.search.benchmark import find, load

    if args.no_benchmark:
        if args.benchmark:
            raise UsageError("--benchmark and --no-benchmark exclude each other")
        return {}
    path = args.benchmark or next((p for p in map(find, args.records) if p), None)
    if path is None:
        return {}
    if "holdout_family" in given or "validation" in given or "test" in given:
        if args.benchmark:
            raise UsageError("--benchmark fixes the splits: leave out --holdout-family, --validation and --test")
        return {}  # the user asked for hashed splits of a corpus that ships a benchmark
    load(path)  # a malformed file fails here, naming the field, before any work
    print(f"splits: the benchmark {path} (--no-benchmark to split by hash)")
    return {"benchmark": str(path)}


def _dataset_stats(args) -> int:
    from dragonlab.learn.dataset import format_summary, load, summary

    print(format_summary(summary(load(args.path)[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
