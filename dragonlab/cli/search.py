"""Commands of the search stage: `targets`, `workloads`, `collect` and `records ...`.

`collect`'s flags are CollectConfig's and MeasureConfig's fields (dragonlab.search.config); the
others are the command's own. Reading several record stores or MetaSchedule databases at once is
`load_all`, which the evaluation commands use too.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
import time
from pathlib import Path

from dragonlab.cli.options import (Command, UsageError, command, config_flags, config_from, default_of, given, number,
                                   require)
from dragonlab.core.errors import InputError

# Heavy imports (TVM, MetaSchedule) happen inside the commands and the parsers that need them.


def add_targets(sub, name: str, help: str):
    command(sub, name, help).set_defaults(run=targets)


def targets(args) -> int:
    from dragonlab.core.targets import get_target, target_names

    for name in target_names():
        print(f"{name:10s} {get_target(name).config}")
    return 0


def add_workloads(sub, name: str, help: str):
    c = command(sub, name, help)
    c.add_argument("--suite", default="quick", help="quick | standard | paper")
    c.add_argument("--seed", type=int, default=0, help="seeds the suite's sampled shapes")
    c.set_defaults(run=workloads)


def workloads(args) -> int:
    from dragonlab.core.workloads import suite

    for w in suite(args.suite, seed=args.seed):
        print(f"{w.name:48s} {w.family:20s} {w.dtype:8s} {w.flops:>14,d} flops  key {w.key}")
    return 0


# --- collect -----------------------------------------------------------------------------------------

def add_collect(sub, name: str, help: str):
    from dragonlab.search.config import CollectConfig, MeasureConfig

    build, run = (default_of(MeasureConfig, f"{what}_timeout_sec") for what in ("build", "run"))
    c = command(sub, name, help, configs=[
        config_flags(CollectConfig, aliases={"trials_per_round": "--per-round"}),  # --per-round: its old name
        config_flags(MeasureConfig, skip=("build_timeout_sec", "run_timeout_sec"))])  # both are --timeout
    c.add_argument("--suite", default="quick", help="quick | standard | paper")
    c.add_argument("--only", default=None, help="comma-separated workload names of the suite")
    c.add_argument("--target", default="cpu", help="a target name (`dragonlab targets`)")
    c.add_argument("--benchmark-search", type=Path, default=None, metavar="BENCHMARK",
                   help="search the benchmark's test and test_family workloads of the suite to the trials the "
                        "benchmark file gives each (512 or 128), continuing from their records; written as "
                        "shard 'search'")
    c.add_argument("--samples", type=int, default=None, metavar="N",
                   help="instead of searching, store N postprocessed random design-space samples per workload as "
                        "unmeasured records (no build, no run: cheap structural data); written as shard 'samples'")
    c.add_argument("--out", type=Path, required=True, help="record store directory")
    c.add_argument("--shard", default=None, help="I/N: this machine's share of the workloads")
    c.add_argument("--timeout", type=number("> 0"), default=None,
                   help=f"seconds per build and per run (default: MeasureConfig's {build:g} s and {run:g} s)")
    c.set_defaults(run=collect)


def collect(args) -> int:
    from dragonlab.core.targets import get_target
    from dragonlab.core.workloads import suite
    from dragonlab.search.benchmark import load as load_benchmark
    from dragonlab.search.collect import CollectSummary, collect, machine, shard, shard_name
    from dragonlab.search.config import CollectConfig, MeasureConfig
    from dragonlab.search.records import RecordStore

    if args.benchmark_search and "trials" in given(args):
        raise UsageError("--benchmark-search takes each workload's trials from the benchmark: leave out --trials")
    if args.samples is not None:
        require("--samples", args.samples, "> 0")
        if args.benchmark_search:
            raise UsageError("--samples and --benchmark-search exclude each other")
    timeout = {} if args.timeout is None else {"build_timeout_sec": args.timeout, "run_timeout_sec": args.timeout}
    config = config_from(CollectConfig, args, measure=config_from(MeasureConfig, args, **timeout))
    bench = load_benchmark(args.benchmark_search) if args.benchmark_search else None
    target = get_target(args.target)
    workloads = suite(args.suite, seed=config.seed)
    if bench is not None:
        workloads = _judged(workloads, bench, args)
    workloads = shard(_chosen(args, workloads), args.shard)
    kind = "samples" if args.samples else "search" if bench else ""
    suffix = ".".join(p for p in (kind, shard_name(args.shard) if args.shard else "") if p)
    store = RecordStore(args.out, shard=suffix, create=True)
    if args.samples:
        return _samples(args, workloads, target, store)
    # the benchmark gives each workload its budget: one collection per budget, largest first
    budgets = ({t: [w for w in workloads if w.key in keys] for t, keys in sorted(bench.search.items(), reverse=True)}
               if bench else {config.trials: workloads})
    began, start = _now(), time.monotonic()
    summaries = []
    try:
        for budget, group in budgets.items():
            if group:
                summaries.append(CollectSummary())
                collect(group, target, store, dataclasses.replace(config, trials=budget), summary=summaries[-1])
    finally:  # a run stopped by Ctrl-C still says what it measured, and for how long
        measured = sum(s.measured for s in summaries)
        store.log_run({"started": began, "finished": _now(), "wall_s": round(time.monotonic() - start, 1),
                       "suite": args.suite, "seed": config.seed, "shard": args.shard, "target": target.name,
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


def _samples(args, workloads: list, target, store) -> int:
    """`collect --samples N`: unmeasured design-space samples instead of a search."""
    from dragonlab.search.collect import collect_samples, machine

    began, start = _now(), time.monotonic()
    written = 0
    try:
        written = collect_samples(workloads, target, store, args.samples, seed=args.seed)
    finally:
        store.log_run({"started": began, "finished": _now(), "wall_s": round(time.monotonic() - start, 1),
                       "suite": args.suite, "seed": args.seed, "shard": args.shard, "target": target.name,
                       "samples": args.samples, "written": written, "machine": machine()})
    print(f"sampled {written} unmeasured traces for {len(workloads)} workloads on {target.name} in "
          f"{(time.monotonic() - start) / 60:.1f} min -> {args.out}")
    return 0


def _chosen(args, workloads: list) -> list:
    """The suite's workloads that --only names (all without it)."""
    if not args.only:
        return workloads
    wanted = args.only.split(",")
    names = {w.name for w in workloads}
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise UsageError(f"--only: {unknown[0]!r} is not a workload of suite {args.suite!r}")
    return [w for w in workloads if w.name in wanted]


def _judged(workloads: list, bench, args) -> list:
    """The workloads the benchmark judges; each must be in the suite."""
    known = {w.key for w in workloads}
    missing = [k for k in bench.judged() if k not in known]
    if missing:
        raise UsageError(f"--benchmark-search: {args.benchmark_search} names workload {missing[0]} "
                         f"({bench.names[missing[0]]}), which is not in suite {args.suite!r}")
    return [w for w in workloads if w.key in set(bench.judged())]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# --- records ---------------------------------------------------------------------------------------

def add_records(sub, name: str, help: str):
    rec = command(sub, name, help)
    rsub = rec.add_subparsers(title="records commands", metavar="ACTION")
    c = command(rsub, "import", "read MetaSchedule JSON databases into a record store")
    c.add_argument("paths", nargs="+", type=Path, help="database directories (searched recursively)")
    c.add_argument("--out", type=Path, required=True, help="record store directory (created)")
    c.set_defaults(run=records_import)
    c = command(rsub, "export", "write a record store as a MetaSchedule JSON database")
    c.add_argument("store", type=Path)
    c.add_argument("--target", default="cpu", help="the records of this target")
    c.add_argument("--out", type=Path, required=True, help="new directory for the database")
    c.set_defaults(run=records_export)
    c = command(rsub, "merge", "merge record stores (shards) with de-duplication")
    c.add_argument("stores", nargs="+", type=Path)
    c.add_argument("--out", type=Path, required=True)
    c.set_defaults(run=records_merge)
    c = command(rsub, "stats", "counts per workload, family and target; failures; latency spread")
    c.add_argument("paths", nargs="+", type=Path, help="record stores or MetaSchedule databases")
    c.set_defaults(run=records_stats)
    c = command(rsub, "seal", "compress a store's finished files into .gz files that never change",
                description="Compress the plain files of a record store (all of them, or one shard's records "
                            "and progress, and the workload file) into sealed .gz files that every command reads "
                            "as they are. A sealed file is never replaced.")
    c.add_argument("store", type=Path)
    c.add_argument("--shard", default=None, help="I/N: seal only this shard's files (and the workload file)")
    c.add_argument("--part", action="store_true",
                   help="the shard is not finished: seal what it has so far as a numbered part; collecting it "
                        "again goes on from there in new files")
    c.set_defaults(run=records_seal)
    c = command(rsub, "check", "check stored kernels' numbers against the unscheduled kernel (resumable)",
                description="MetaSchedule times kernels without looking at their outputs, and TVM builds some "
                            "schedules into kernels that compute wrong numbers. This runs the evaluator's check "
                            "(build, run on fresh random inputs, compare every buffer with the unscheduled kernel) "
                            "on the store's ok records and appends the verdicts to STORE/checks.jsonl; every "
                            "command then reads a record found wrong as status 'wrong'. A rerun goes on with "
                            "the records not checked yet.")
    c.add_argument("store", type=Path)
    c.add_argument("--target", default="cpu", help="the records of this target")
    c.add_argument("--family", action="append", default=None, help="only workloads of this family (repeatable)")
    c.add_argument("--workload", action="append", default=None, help="only this workload, by name or key (repeatable)")
    c.add_argument("--per-workload", type=int, default=None,
                   help="only each workload's N fastest ok records (default: all)")
    c.add_argument("--workers", type=int, default=None, help="evaluator workers (default: physical cores)")
    c.add_argument("--checks", type=int, default=3, help="fresh random input sets per record")
    c.set_defaults(run=records_check)
    c = command(rsub, "card", "write a record store's README.md: counts, machine, time, benchmark, rebuild")
    c.add_argument("store", type=Path)
    c.set_defaults(run=records_card)
    rec.set_defaults(run=lambda a: rec.print_help() or 2)


def records_import(args) -> int:
    from dragonlab.search.msdb import import_databases
    from dragonlab.search.records import RecordStore

    for p in args.paths:
        if not p.exists():
            raise InputError(f"{p} does not exist")
    added = import_databases(args.paths, RecordStore(args.out, create=True))
    print(f"imported {added} new records -> {args.out}")
    return 0


def records_export(args) -> int:
    from dragonlab.search.msdb import export_database
    from dragonlab.search.records import RecordStore

    n = export_database(RecordStore(args.store), args.out, args.target)
    print(f"exported {n} records for target {args.target} -> {args.out}")
    return 0


def records_merge(args) -> int:
    from dragonlab.search.records import RecordStore, merge

    added = merge([RecordStore(s) for s in args.stores], RecordStore(args.out, create=True))
    print(f"merged {added} new records -> {args.out}")
    return 0


def records_seal(args) -> int:
    from dragonlab.search.collect import shard_name
    from dragonlab.search.records import RecordStore

    sealed = RecordStore(args.store).seal(shard_name(args.shard) if args.shard else None, part=args.part)
    for path in sealed:
        print(f"sealed {path} ({path.stat().st_size / 1e6:.2f} MB)")
    if not sealed:
        print(f"nothing to seal in {args.store}")
    return 0


def records_check(args) -> int:
    from dragonlab.core.workloads import lookup
    from dragonlab.evaluation.config import EvalConfig
    from dragonlab.evaluation.evaluate import Evaluator, check_store
    from dragonlab.search.records import RecordStore

    for flag in ("--per-workload", "--workers", "--checks"):
        require(flag, getattr(args, flag[2:].replace("-", "_")), "> 0")
    store = RecordStore(args.store)
    workloads = list(store.workloads().values())
    chosen = [w for w in workloads if args.family is None or w.family in args.family]
    if args.family and not chosen:
        raise InputError(f"--family: no workload of {', '.join(args.family)} in {args.store}")
    if args.workload:
        chosen = [lookup(name, chosen) for name in args.workload]
    with Evaluator(args.target, EvalConfig(workers=args.workers, checks=args.checks, time=False)) as evaluator:
        counts = check_store(evaluator, store, workloads=[w.key for w in chosen], per_workload=args.per_workload)
    print(f"checked {sum(counts.values())} records of {len(chosen)} workloads: "
          + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none left to check")
          + f" -> {args.store / 'checks.jsonl'}")
    return 0


def records_card(args) -> int:
    from dragonlab.core.jsonl import write_atomic
    from dragonlab.search.corpus import card

    text = card(args.store, dataset=_dataset_section(args.store))
    write_atomic(args.store / "README.md", text)
    print(f"wrote {args.store / 'README.md'}")
    return 0


def _dataset_section(store: Path) -> str:
    """What `dragonlab dataset build --records STORE` makes of the store, with default settings
    and the splits of the benchmark beside it (built in memory, not saved)."""
    from dragonlab.learn import dataset
    from dragonlab.learn.dataset_config import DatasetConfig
    from dragonlab.search.benchmark import find

    bench = find(store)
    workloads, records, sources = dataset.load_records([store])
    built = dataset.build(workloads, records, DatasetConfig(benchmark=str(bench) if bench else None), sources=sources)
    split = "the benchmark's splits" if bench else "splits by workload hash"
    return (f"`dragonlab dataset build --records {store} --out DIR`, default settings and {split}, gives these "
            "construction and refinement examples (one construction prompt has up to 4 completions, its "
            "workload's fastest scripts):\n\n" + "\n".join(dataset.split_table(built)))


def records_stats(args) -> int:
    from dragonlab.search.records import STATUSES, stats

    workloads, records = load_all(args.paths)
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


def load_all(paths: list[Path]) -> tuple[dict, list]:
    """The workloads and records of record stores and MetaSchedule databases, together."""
    from dragonlab.search.msdb import load

    workloads, records = {}, []
    for p in paths:
        if not p.exists():
            raise InputError(f"{p} does not exist")
        ws, rs = load(p)
        workloads.update(ws)
        records.extend(rs)
    return workloads, records


COMMANDS = [
    Command("targets", "list the named targets", add_targets),
    Command("workloads", "list the workloads of a suite", add_workloads),
    Command("collect", "run MetaSchedule search and keep every measured candidate", add_collect),
    Command("records", "import, export, merge and summarise search records", add_records),
]
