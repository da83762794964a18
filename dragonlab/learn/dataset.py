"""Datasets: construction and refinement examples from search records, split by workload.

Every example is a prompt and a completion (`dragonlab.learn.prompts` spells the prompts); the
completion is always a script, `codec.encode` of a measured trace (by default of its design part,
below):

- **construction**: the unscheduled kernel -> one of the `top_k` fastest scripts of its
  workload and target;
- **refinement**: the kernel and a script -> a script of the same workload and target that ran
  faster by at least `margin` (`output_latency <= input_latency * (1 - margin)`). Inputs are
  drawn from every latency quantile (`strata` bins by rank), and within a bin across the
  range of improvements, so both small and large speedups appear; at most
  `pairs_per_workload` pairs per workload and target.

A script is, by default (`scripts="design"`), the trace's design part: the instructions before
EnterPostproc (`codec.design_part`). What follows is what the target's post-processors write,
a function of the design part and the target (tested on every collected trace); MetaSchedule's
search drops it and runs the post-processors again, and so does the evaluator. A model that had
to write it would spend its capacity predicting the post-processors' loop arithmetic.
`scripts="full"` keeps whole traces.

Only status "ok" records are data. A script that any record of the same workload and target
says failed (build_error, run_error, failed, wrong) is dropped altogether: a trace that ran once and
failed once is not a trustworthy answer. Records with the same trace are one script whose
latency is the median of all their repeats. Every script is checked to round-trip:
`codec.decode(script) == codec.to_plain(trace)`; one that does not is skipped and counted.

Splits are by workload key (the structural hash), so no workload is on two sides:
`sha256("{seed}/{key}")` read as a fraction in [0, 1) puts a workload in validation below
`validation`, in test below `validation + test`, else in train. All workloads of
`holdout_family` go to `test_family` instead. With a `benchmark` file (`dragonlab.search.benchmark`;
a shipped corpus has one beside its records) the splits are the benchmark's instead: its test,
test_family and validation workloads, and every other workload in train, except a workload of a
held-out family that the benchmark does not list (a shape from another suite): it is left out.
The result depends only on the set of records and the config, not on their order.

With `examples="samples"` the data are the `unmeasured` records instead: postprocessed random
samples of the design spaces (`dragonlab collect --samples`), valid schedules that nobody timed.
They make construction examples only (no latency orders them, so `top_k` of each workload are
taken in a seeded order) and no refinement: a pre-training set that teaches how a schedule's
decisions follow from the kernel's shapes, over many more shapes than search can afford to measure.

`save` writes a Hugging Face `DatasetDict` (`save_to_disk`, plus one Parquet file per split
under `data/`), the workloads the examples refer to (`workloads.jsonl`), the build's config
and counts (`build.json`) and a dataset card (`README.md`), into a temporary directory that is
renamed into place: the output appears whole or not at all, and an existing non-empty
directory is never overwritten. Empty splits are left out of the DatasetDict (`datasets`
cannot load an empty split back); the card lists them with 0 examples.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import random
import shutil
import statistics
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dragonlab.core import codec
from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import append_lines, read_json
from dragonlab.core.workloads import Workload
from dragonlab.learn.dataset_config import DatasetConfig
from dragonlab.learn.prompts import CONSTRUCTION, REFINEMENT, TASKS, construction_prompt, kernel_text, refinement_prompt
from dragonlab.search import benchmark
from dragonlab.search.benchmark import Benchmark
from dragonlab.search.records import (BUILD_ERROR, FAILED, OK, RUN_ERROR, TIMEOUT, UNMEASURED, WRONG, Record,
                                      RecordStore, trace_text)

SPLITS = ("train", "validation", "test", "test_family")
FAILURES = (BUILD_ERROR, RUN_ERROR, FAILED, WRONG)

# Columns of every split, in order; input_* and speedup are null for construction examples.
COLUMNS = {"task": "string", "prompt": "string", "completion": "string", "workload": "string", "name": "string",
           "family": "string", "target": "string", "input_script": "string", "input_latency": "float64",
           "output_latency": "float64", "speedup": "float64", "rank": "int32"}


@dataclass(frozen=True)
class Example:
    task: str  # CONSTRUCTION or REFINEMENT
    prompt: str
    completion: str  # a script: codec.encode of an ok record's trace
    workload: str  # Workload.key
    name: str
    family: str
    target: str
    input_script: str | None  # refinement: the script in the prompt
    input_latency: float | None  # seconds; refinement only
    output_latency: float | None  # seconds, median of the completion's repeats; None for a sample
    speedup: float | None  # input_latency / output_latency; refinement only
    rank: int  # the completion's place among its workload's scripts, 0 = fastest


@dataclass(frozen=True)
class Script:
    """One distinct ok (or unmeasured) trace of a (workload, target): its script and pooled latency."""
    text: str
    latency: float | None  # seconds: median over every repeat of every record with this trace; None unmeasured
    records: int


@dataclass
class Built:
    examples: dict[str, list[Example]]  # split -> examples, every split of SPLITS present
    config: DatasetConfig
    workloads: dict[str, Workload]  # the workloads the examples refer to, by key
    split_of: dict[str, str]  # workload key -> split
    skipped: Counter  # records that became no data, by reason
    sources: list[dict] = field(default_factory=list)  # per records path: counts by status
    budget: dict = field(default_factory=dict)  # measured candidates per workload and target

    def counts(self) -> dict[str, Counter]:
        return {s: Counter(e.task for e in self.examples[s]) for s in SPLITS}


def load_records(paths: list[str | os.PathLike]) -> tuple[dict[str, Workload], list[Record], list[dict]]:
    """Workloads and records of record stores or MetaSchedule databases, and a summary per path."""
    from dragonlab.search.msdb import load

    workloads: dict[str, Workload] = {}
    records: list[Record] = []
    sources = []
    for p in map(Path, paths):
        if not p.exists():
            raise InputError(f"{p} does not exist")
        ws, rs = load(p)
        workloads.update(ws)
        records.extend(rs)
        source = {"path": str(p), "records": len(rs), "statuses": dict(sorted(Counter(r.status for r in rs).items()))}
        if RecordStore(p).files("progress") if p.is_dir() else False:  # a store says each collection's budget
            source["trials"] = dict(sorted(Counter(RecordStore(p).done().values()).items()))
        sources.append(source)
    return workloads, records, sources


def split_of(key: str, family: str, config: DatasetConfig, bench: Benchmark | None = None) -> str:
    """The split of a workload: a function of its key, its family and the config (and its
    benchmark, `load`ed from `config.benchmark`) only."""
    if bench is not None:
        return bench.split_of(key) or "train"
    if config.holdout_family is not None and family == config.holdout_family:
        return "test_family"
    digest = hashlib.sha256(f"{config.seed}/{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < config.validation:
        return "validation"
    return "test" if u < config.validation + config.test else "train"


def scripts_by_group(workloads: dict[str, Workload], records: list[Record],
                     skipped: Counter | None = None, *, design: bool = False,
                     unmeasured: bool = False) -> dict[tuple[str, str], list[Script]]:
    """(workload key, target) -> its usable scripts, fastest first (ties broken by text).

    Usable: status ok (with `unmeasured`, status unmeasured instead: latency None, ordered by
    text), the workload is known, the trace encodes and round-trips exactly, and no
    record of the same trace on the same workload and target failed. `skipped` counts the rest.
    With `design`, a script is a trace's design part (`codec.design_part`): records whose traces
    share it built the same kernel, so their latencies are pooled.
    """
    cut = codec.design_part if design else (lambda plain: plain)
    skipped = Counter() if skipped is None else skipped
    latencies: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[tuple, Counter] = defaultdict(Counter)
    failing: dict[tuple, set[str]] = defaultdict(set)
    plains: dict[str, list] = {}  # canonical trace text -> the plain trace
    usable = UNMEASURED if unmeasured else OK
    for r in records:
        group = (r.workload, r.target)
        if r.workload not in workloads:
            skipped["workload not stored"] += 1
            continue
        if r.status != usable:
            skipped[f"status {r.status}"] += 1
            if r.status in FAILURES:
                try:
                    failing[group].add(trace_text(cut(codec.to_plain(r.trace))))
                except codec.CodecError:
                    pass  # a trace that cannot even be read can equal no script
            continue
        try:
            plain = cut(codec.to_plain(r.trace))
        except codec.CodecError:
            skipped["not encodable"] += 1
            continue
        text = trace_text(plain)
        plains.setdefault(text, plain)
        latencies[group][text].extend(r.latencies or ())
        counts[group][text] += 1
    out: dict[tuple[str, str], list[Script]] = {}
    for group in sorted(latencies):
        scripts = []
        for key, lats in latencies[group].items():
            n = counts[group][key]
            if key in failing[group]:
                skipped["also recorded as failing"] += n
                continue
            try:
                text = codec.encode(plains[key])
                exact = codec.decode(text) == plains[key]
            except codec.CodecError:
                skipped["not encodable"] += n
                continue
            if not exact:
                skipped["does not round-trip"] += n
                continue
            scripts.append(Script(text, statistics.median(lats) if lats else None, n))
        if scripts:
            out[group] = sorted(scripts, key=lambda s: (s.latency or 0.0, s.text))
    return out


def refinement_pairs(latencies: list[float], config: DatasetConfig, rng: random.Random) -> list[tuple[int, int]]:
    """(input, output) indices into `latencies` (ascending) with output faster by the margin.

    Inputs fall into `config.strata` bins by rank; the pair budget is shared among the bins
    that have pairs, and within a bin the pairs, ordered by speedup, are cut into as many
    equal runs as the bin's quota, one pair drawn from each run.
    """
    n = len(latencies)
    bins: list[list[tuple[int, int]]] = [[] for _ in range(config.strata)]
    for i, lat in enumerate(latencies):
        # latencies ascend, so the faster-by-margin outputs are a prefix
        faster = bisect.bisect_right(latencies, lat * (1 - config.margin), 0, i)
        bins[i * config.strata // n].extend((i, j) for j in range(faster))
    chosen = []
    for pairs, quota in zip(bins, _share(config.pairs_per_workload, [len(b) for b in bins])):
        pairs.sort(key=lambda p: (latencies[p[0]] / latencies[p[1]], p))
        for c in range(quota):
            chosen.append(pairs[rng.randrange(c * len(pairs) // quota, (c + 1) * len(pairs) // quota)])
    return chosen


def _share(total: int, available: list[int]) -> list[int]:
    """Split `total` as evenly as possible among bins, none above what it has."""
    quota = [0] * len(available)
    left = total
    open_bins = [k for k, a in enumerate(available) if a]
    while left and open_bins:
        each = max(1, left // len(open_bins))
        for k in list(open_bins):
            take = min(each, available[k] - quota[k], left)
            quota[k] += take
            left -= take
            if quota[k] == available[k]:
                open_bins.remove(k)
            if not left:
                break
    return quota


def build(workloads: dict[str, Workload], records: list[Record], config: DatasetConfig = DatasetConfig(),
          *, sources: list[dict] = ()) -> Built:
    """Construction and refinement examples of every usable script, split by workload."""
    skipped = Counter()
    bench = benchmark.load(config.benchmark) if config.benchmark is not None else None
    samples = config.examples == "samples"
    groups = scripts_by_group(workloads, records, skipped, design=config.scripts == "design", unmeasured=samples)
    families = {workloads[k].family for k, _ in groups}
    if config.holdout_family is not None and config.holdout_family not in families:
        raise InputError(f"holdout family {config.holdout_family!r}: no workload of that family has usable "
                         f"records (families: {', '.join(sorted(families)) or 'none'})")
    if not groups:
        raise InputError(f"no usable record among {len(records)}: "
                         + (", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "no records"))
    examples: dict[str, list[Example]] = {s: [] for s in SPLITS}
    kernels: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    split_map: dict[str, str] = {}
    for (key, target), scripts in groups.items():
        w = workloads[key]
        if bench is not None and bench.split_of(key) is None and benchmark.op_family(w) in bench.held_out_families:
            # A shape of a held-out family that the benchmark does not list (records from another
            # suite, or samples of more shapes): never train, and not judged either.
            skipped["held-out family, not in the benchmark"] += sum(s.records for s in scripts)
            continue
        split = split_map.setdefault(key, split_of(key, w.family, config, bench))
        kernel = kernels.setdefault(key, kernel_text(w, config.prompt_form))
        common = dict(workload=key, name=w.name, family=w.family, target=target)
        new = []
        prompt = construction_prompt(kernel, target)
        rng = random.Random(f"{config.seed}/{key}/{target}")
        if samples:  # no latency ranks them: a seeded draw, and nothing to refine
            scripts = rng.sample(scripts, min(config.top_k, len(scripts)))
        for rank, s in enumerate(scripts[:config.top_k]):
            new.append(Example(CONSTRUCTION, prompt, s.text, **common, input_script=None, input_latency=None,
                               output_latency=s.latency, speedup=None, rank=rank))
        for i, j in [] if samples else refinement_pairs([s.latency for s in scripts], config, rng):
            a, b = scripts[i], scripts[j]
            new.append(Example(REFINEMENT, refinement_prompt(kernel, target, a.text), b.text, **common,
                               input_script=a.text, input_latency=a.latency, output_latency=b.latency,
                               speedup=a.latency / b.latency, rank=j))
        for e in new:
            if (e.prompt, e.completion) in seen:
                skipped["duplicate example"] += 1
                continue
            seen.add((e.prompt, e.completion))
            examples[split].append(e)
    for split in SPLITS:
        examples[split].sort(key=lambda e: (e.family, e.name, e.target, TASKS.index(e.task), e.rank,
                                            e.input_latency or 0.0, e.prompt))
    measured = Counter((r.workload, r.target) for r in records if r.status not in (TIMEOUT, UNMEASURED))
    sizes = sorted(measured.values())
    budget = ({"groups": len(sizes), "min": sizes[0], "median": statistics.median(sizes), "max": sizes[-1]}
              if sizes else {})
    used = {k: workloads[k] for k in split_map}
    return Built(examples, config, used, split_map, skipped, list(sources), budget)


def to_hf(built: Built):
    """The examples as a `datasets.DatasetDict` of the non-empty splits."""
    from datasets import Dataset, DatasetDict, Features, Value

    features = Features({name: Value(kind) for name, kind in COLUMNS.items()})
    out = {}
    for split in SPLITS:
        rows = built.examples[split]
        if rows:
            out[split] = Dataset.from_dict({c: [getattr(e, c) for e in rows] for c in COLUMNS}, features=features)
    return DatasetDict(out)


def check_out(out: Path) -> None:
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out} exists and is not empty; choose a new directory")


def save(built: Built, out: str | os.PathLike) -> Path:
    """Write the dataset to the new directory `out`, atomically (module docstring)."""
    import datasets

    out = Path(out)
    check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()  # not mkdtemp: the directory keeps the umask's mode after the rename
    bars_were_on = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # one bar per tiny split is noise
    try:
        dsd = to_hf(built)
        dsd.save_to_disk(str(tmp))
        (tmp / "data").mkdir()
        for split, ds in dsd.items():
            ds.to_parquet(str(tmp / "data" / f"{split}.parquet"))
        append_lines(tmp / "workloads.jsonl", (built.workloads[key].to_json() for key in sorted(built.workloads)))
        (tmp / "build.json").write_text(json.dumps(build_info(built), indent=1) + "\n")
        (tmp / "README.md").write_text(card(built))
        check_out(out)  # someone may have written there meanwhile
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if bars_were_on:
            datasets.enable_progress_bars()
    return out


def build_dataset(paths: list[str | os.PathLike], out: str | os.PathLike,
                  config: DatasetConfig = DatasetConfig()) -> Built:
    """Load records, build, save: what `dragonlab dataset build` does."""
    check_out(Path(out))  # fail before the work, and again before the rename
    workloads, records, sources = load_records(paths)
    built = build(workloads, records, config, sources=sources)
    save(built, out)
    return built


def load_or_build(path: str | os.PathLike, records: list[str | os.PathLike]):
    """`load(path)`, after building the dataset there from `records` (as `build_dataset` does)
    when it does not exist yet: a notebook's first run on the shipped corpus."""
    if not Path(path).exists():
        build_dataset(records, path)
    return load(path)


def build_info(built: Built) -> dict:
    return {"config": asdict(built.config), "counts": {s: dict(c) for s, c in built.counts().items()},
            "workloads": dict(Counter(built.split_of.values())), "skipped": dict(built.skipped),
            "sources": built.sources, "budget": built.budget,
            "targets": sorted({e.target for rows in built.examples.values() for e in rows})}


def tokens(text: str) -> int:
    """Whitespace-separated tokens: a tokenizer-free length."""
    return len(text.split())


def summary(rows_by_split: dict) -> list[dict]:
    """Counts and whitespace-token lengths per split and task; accepts `Built.examples` or a
    DatasetDict (anything mapping split -> rows with task/prompt/completion/workload)."""
    out = []
    for split in [s for s in SPLITS if s in rows_by_split] + [s for s in rows_by_split if s not in SPLITS]:
        rows = rows_by_split[split]
        if hasattr(rows, "to_list"):
            rows = rows.select_columns(["task", "prompt", "completion", "workload"]).to_list()
        rows = [r if isinstance(r, dict) else asdict(r) for r in rows]
        for task in TASKS:
            mine = [r for r in rows if r["task"] == task]
            p = [tokens(r["prompt"]) for r in mine]
            c = [tokens(r["completion"]) for r in mine]
            out.append({"split": split, "task": task, "examples": len(mine),
                        "workloads": len({r["workload"] for r in mine}),
                        "prompt_mean": statistics.fmean(p) if p else 0.0, "prompt_max": max(p, default=0),
                        "completion_mean": statistics.fmean(c) if c else 0.0, "completion_max": max(c, default=0)})
    return out


def format_summary(rows: list[dict]) -> str:
    lines = [f"{'split':12s} {'task':13s} {'examples':>8s} {'workloads':>9s} {'prompt mean':>11s} {'max':>6s} "
             f"{'completion mean':>15s} {'max':>6s}"]
    for r in rows:
        lines.append(f"{r['split']:12s} {r['task']:13s} {r['examples']:8d} {r['workloads']:9d} "
                     f"{r['prompt_mean']:11.1f} {r['prompt_max']:6d} "
                     f"{r['completion_mean']:15.1f} {r['completion_max']:6d}")
    return "\n".join(lines)


def frame(rows_by_split: dict):
    """One pandas row per example with its split and whitespace-token lengths (for plots)."""
    import pandas as pd

    parts = []
    for split, rows in rows_by_split.items():
        if hasattr(rows, "to_pandas"):
            df = rows.to_pandas()
        else:
            df = pd.DataFrame([asdict(e) for e in rows], columns=list(COLUMNS))
        parts.append(df.assign(split=split))
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=[*COLUMNS, "split"])
    # empty splits make object columns of everything; the numbers must stay numbers for plots
    df = df.astype({name: "float64" if kind == "float64" else "int64" if kind == "int32" else "object"
                    for name, kind in COLUMNS.items()})
    df["prompt_tokens"] = df["prompt"].map(tokens).astype("int64")
    df["completion_tokens"] = df["completion"].map(tokens).astype("int64")
    return df


def split_table(built: Built) -> list[str]:
    """The examples per split and task, and the workloads of each split, as Markdown table rows."""
    counts, workloads = built.counts(), Counter(built.split_of.values())
    return ["| split | workloads | construction | refinement |", "|---|---|---|---|"] + [
        f"| {s} | {workloads.get(s, 0)} | {counts[s].get(CONSTRUCTION, 0)} | {counts[s].get(REFINEMENT, 0)} |"
        for s in SPLITS]


def card(built: Built) -> str:
    """The dataset card: what is in it, where it came from, and how it was split."""
    c = built.config
    nonempty = [s for s in SPLITS if built.examples[s]]
    files = "".join(f"  - split: {s}\n    path: data/{s}.parquet\n" for s in nonempty)
    header = f"---\nconfigs:\n- config_name: default\n  data_files:\n{files}---\n\n" if nonempty else ""
    table = split_table(built)
    families = Counter(w.family for w in built.workloads.values())
    targets = sorted({e.target for rows in built.examples.values() for e in rows})
    sources = "\n".join(f"- `{s['path']}`: {s['records']} records ("
                        + ", ".join(f"{k} {v}" for k, v in s["statuses"].items()) + ")"
                        + (f"; collection budgets (trials: workloads) {s['trials']}" if s.get("trials") else "")
                        for s in built.sources) or "- (records given in memory)"
    b = built.budget
    budget = (f"{b['min']} to {b['max']} measured candidates per workload and target (median {b['median']}, "
              f"{b['groups']} workload/target pairs; timeouts and unmeasured samples not counted)") if b else "unknown"
    skipped = ", ".join(f"{k}: {v}" for k, v in sorted(built.skipped.items())) or "none"
    example = next((e for s in SPLITS for e in built.examples[s]), None)
    shown = f"\n## An example ({example.task}, {example.name})\n\nprompt:\n\n```\n{example.prompt}```\n\n" \
            f"completion:\n\n```\n{example.completion}\n```\n" if example else ""
    scripts = ("the design part of each trace (what comes before `postproc`; the target's post-processors "
               "write the rest)" if c.scripts == "design" else "whole traces, post-processing part included")
    if c.examples == "samples":
        tasks = f"""- **construction** only: prompt = task, target and the unscheduled kernel; completion = one of
  {c.top_k} design-space samples of that workload and target, drawn in a seeded order. The samples
  are postprocessed random schedules that MetaSchedule would have measured (`dragonlab collect
  --samples`), never timed: valid structure, no latency. A pre-training set."""
        data = "Only records with status `unmeasured` are data"
    else:
        tasks = f"""- **construction**: prompt = task, target and the unscheduled kernel; completion = one of the
  {c.top_k} fastest measured scripts of that workload and target.
- **refinement**: prompt = task, target, kernel and a measured script; completion = a script of the
  same workload and target that ran at least {c.margin:.0%} faster (`output_latency <= input_latency x
  {1 - c.margin:.2f}`). Inputs drawn from {c.strata} latency-quantile bins, at most {c.pairs_per_workload}
  pairs per workload and target."""
        data = "Latencies are seconds, the median of the measured repeats. Only records with status `ok` are data"
    return f"""{header}# dragonlab schedule-script dataset

Prompt/completion pairs that teach a model to write TVM MetaSchedule schedules as dragonlab
scripts (`docs/codec.md`), built by `dragonlab dataset build` (`dragonlab/learn/dataset.py`).

{tasks}

Kernel form in prompts: `{c.prompt_form}`. Scripts: `{c.scripts}`, {scripts}. Targets:
{', '.join(targets)}. {data}; a trace also recorded as failing is dropped; every completion decodes
back to its trace{"'s design part" if c.scripts == "design" else ""} exactly.

## Splits

{chr(10).join(table)}

{_split_rule(c)} No workload is in two splits.
Empty splits are not saved (the `datasets` library cannot load them back).

Families: {', '.join(f'{f} {n}' for f, n in sorted(families.items()))}.

## Sources

{sources}

Search budget: {budget}. Records that became no data: {skipped}.

## Columns

{', '.join(f'`{k}` ({v})' for k, v in COLUMNS.items())}. `input_script`, `input_latency` and
`speedup` are null for construction. `rank` is the completion's place among the workload's scripts
by latency (0 = fastest; for samples, the order they were drawn in, and `output_latency` is null).
`workloads.jsonl` holds every workload's exact module (join on `workload`).

Load with `datasets.load_from_disk(DIR)`, or the Parquet files under `data/`.
{shown}"""


def _split_rule(c: DatasetConfig) -> str:
    if c.benchmark is not None:
        b = benchmark.load(c.benchmark)
        return (f"By workload key, as the benchmark `{b.name}` (`{Path(c.benchmark).name}`) fixes them: its "
                f"test, test_family and validation workloads, every other workload in train. Held-out "
                f"families (test_family and validation only): {', '.join(b.held_out_families)}.")
    return (f"By workload key (`tvm_ffi.structural_hash` of the module): `sha256(\"{c.seed}/<key>\")` as a "
            f"fraction u in [0, 1): validation if u < {c.validation}, test if u < {c.validation + c.test:.4g}, "
            f"else train. Held-out family (`test_family`): {c.holdout_family or 'none'}.")


class DatasetFormatError(InputError):
    """A dataset directory that `load` cannot use; the message names the file and the field."""


def load(path: str | os.PathLike):
    """(DatasetDict, {workload key: Workload}) of a directory written by `save`."""
    import datasets

    path = Path(path)
    if not (path / "dataset_dict.json").is_file():
        raise DatasetFormatError(f"{path}: not a dataset directory (no dataset_dict.json; "
                                 "write one with `dragonlab dataset build`)")
    _check_json_files(path)
    try:
        dsd = datasets.load_from_disk(str(path))
    except (LookupError, TypeError, ValueError, OSError) as e:  # a file of the Hugging Face layout is not as saved
        raise DatasetFormatError(f"{path}: not a readable dataset ({type(e).__name__}: {e})") from None
    for split, ds in dsd.items():
        missing = [c for c in ("task", "prompt", "completion", "workload", "target") if c not in ds.column_names]
        if missing:
            raise DatasetFormatError(f"{path}/{split}: missing column(s) {', '.join(missing)}")
        tasks = set(ds.unique("task")) - set(TASKS)
        if tasks:
            raise DatasetFormatError(f"{path}/{split}: field task: unknown value(s) {sorted(tasks)}")
    workloads = RecordStore(path).workloads()  # same format and checks as a record store's
    unknown = {k for ds in dsd.values() for k in ds.unique("workload")} - set(workloads)
    if unknown:
        raise DatasetFormatError(f"{path}/workloads.jsonl: no workload for key(s) {sorted(unknown)[:3]}")
    return dsd, workloads


def _check_json_files(path: Path) -> None:
    """`datasets` reads these files without saying which one is not JSON: read them first."""
    layout = read_json(path / "dataset_dict.json")
    splits = layout.get("splits") if isinstance(layout, dict) else None
    if not (isinstance(splits, list) and all(isinstance(s, str) for s in splits)):
        raise DatasetFormatError(f"{path}/dataset_dict.json: field splits: expected a list of split names")
    for split in splits:
        for name in ("state.json", "dataset_info.json"):
            if (path / split / name).is_file():
                read_json(path / split / name)


def target_of(dsd, splits: list[str]) -> str:
    """The one target of the examples in `splits`: an evaluator judges one target at a time."""
    missing = [s for s in splits if s not in dsd]
    if missing:
        raise DatasetFormatError(f"the dataset has no {', '.join(missing)} split (it has {', '.join(dsd)})")
    targets = {t for s in splits for t in dsd[s]["target"]}
    if len(targets) != 1:
        raise DatasetFormatError(f"splits {', '.join(splits)} mix targets {sorted(targets)}; use one target at a time")
    return targets.pop()


def spread_workloads(ds, n: int, *, seed: int = 0):
    """The examples of `n` of the workloads in `ds`, families taken in turn (each family's
    workloads, and the order of the families, shuffled by `seed`): every family is in the subset
    as soon as `n` reaches their number, and a smaller subset is part of a larger one, so a
    scaling curve over `n` adds workloads and changes nothing else."""
    import random

    rng = random.Random(seed)
    by_family: dict[str, list[str]] = {}
    for key, family in sorted(set(zip(ds["workload"], ds["family"]))):
        by_family.setdefault(family, []).append(key)
    if n > sum(map(len, by_family.values())):
        raise InputError(f"{n} workloads asked for; the split has {sum(map(len, by_family.values()))}")
    queues = [rng.sample(keys, len(keys)) for _, keys in sorted(by_family.items())]
    rng.shuffle(queues)
    order = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
    chosen = set(order[:n])
    return ds.filter(lambda key: key in chosen, input_columns="workload")
