"""The card of a shipped record store: what it holds, how it was measured, how to rebuild it.

`card(root)` writes everything from the store itself (its workloads, records, progress and
collection log, and the benchmark file beside them), so `dragonlab records card DIR` regenerates
the card after every shard and a reader can check each figure against the files.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

from dragonlab.search.records import OK, STATUSES, TIMEOUT, WRONG, RecordStore

REBUILD = """\
```bash
make standard-corpus     # = for I in 0 1 2 3: dragonlab collect --suite standard --trials 32 \\
                         #       --shard I/4 --out data/cpu-standard-v1, then records seal --shard I/4;
                         #   dragonlab collect --suite standard --benchmark-search \\
                         #       data/cpu-standard-v1/benchmark.json --out data/cpu-standard-v1;
                         #   dragonlab records seal data/cpu-standard-v1; dragonlab records card data/cpu-standard-v1
```

Every step resumes where a killed run stopped (records already on disk count against each
workload's budget). Shards may run on different machines into their own directories and be
copied together: the files of different shards never share a name."""


def _family(w) -> str:
    return w.family.split("/")[0] if w.family.startswith("model:") else w.family


def card(root: str | os.PathLike, *, title: str | None = None, dataset: str | None = None) -> str:
    """The corpus card (README.md) of the record store `root`; `dataset`: Markdown that says what
    `dataset build` makes of it (the CLI computes it: datasets are a later stage)."""
    from dragonlab.search.benchmark import find, load

    store = RecordStore(root)
    root = Path(root)
    workloads = store.workloads()
    records = store.records()
    done = store.done()
    runs = store.runs()
    by_key = defaultdict(Counter)
    for r in records:
        by_key[r.workload][r.status] += 1
    families: dict[str, Counter] = defaultdict(Counter)
    for key, w in workloads.items():
        f = families[_family(w)]
        f["workloads"] += 1
        f["collected"] += (key, "cpu") in done
        f.update(by_key.get(key, Counter()))
    totals = Counter(r.status for r in records)
    rows = ["| family | workloads | finished | " + " | ".join(STATUSES) + " |", "|---|---:|---:|" + "---:|" * len(STATUSES)]
    for name, c in sorted(families.items()):
        rows.append(f"| {name} | {c['workloads']} | {c['collected']} | " + " | ".join(str(c[s]) for s in STATUSES) + " |")
    finished = sum(c["collected"] for c in families.values())
    rows.append(f"| **all** | {len(workloads)} | {finished} | " + " | ".join(f"**{totals[s]}**" for s in STATUSES) + " |")
    progress = ("" if finished == len(workloads) else
                f"\n**In progress**: {finished} of {len(workloads)} workloads finished; `make standard-corpus` "
                f"goes on where it stopped.\n")

    machines = Counter(f"{r['machine']['cpu']}, {r['machine']['cores']} cores, {r['machine']['memory_gib']} GiB"
                       for r in runs)
    versions = Counter(f"TVM {r['machine']['tvm']}, dragonlab {r['machine']['dragonlab']}, "
                       f"Python {r['machine']['python']}" for r in runs)
    wall = sum(r["wall_s"] for r in runs)
    core_hours = sum(r["wall_s"] * r["machine"]["cores"] for r in runs) / 3600
    settings = runs[-1]["settings"] if runs else {}
    measure = settings.get("measure", {})
    loads = [r["machine"].get("load_average") for r in runs if r["machine"].get("load_average") is not None]

    bench_text = "No benchmark file beside the records."
    bench_path = find(root)
    if bench_path is not None:
        b = load(bench_path)
        reached = {t: sum(done.get((k, "cpu"), 0) >= t for k in keys) for t, keys in b.search.items()}

        def measured(k: str) -> int:
            return sum(by_key[k].values()) - by_key[k][TIMEOUT]

        def smaller(t: int, keys) -> str:  # searches that ended with their design space, below the budget
            early = sorted((workloads[k].name, measured(k)) for k in keys
                           if done.get((k, "cpu"), 0) >= t and k in workloads and measured(k) < t)
            return (f"; {len(early)} of them ended at their design space's size: "
                    + ", ".join(f"`{name}` {n}" for name, n in early)) if early else ""

        budgets = "; ".join(f"{len(keys)} workloads to {t} trials ({reached[t]} reached{smaller(t, keys)})"
                            for t, keys in sorted(b.search.items(), reverse=True))
        bench_text = (f"`benchmark.json` fixes the benchmark `{b.name}`: {len(b.splits['test'])} test workloads "
                      f"(unseen shapes of trained families), {len(b.splits['test_family'])} test_family workloads "
                      f"of the held-out families {', '.join(f'`{f}`' for f in b.held_out_families)}, and "
                      f"{len(b.splits['validation'])} validation workloads. `dragonlab dataset build --records "
                      f"{root.name}` takes these splits. Stored MetaSchedule searches of the judged workloads "
                      f"(`records.search.jsonl.gz`): {budgets}. A design space with fewer distinct candidates "
                      f"than the budget ends its search early.")

    checks = store.checks()
    checked = Counter(c.status for c in checks.values())
    wrong_by_family = Counter(_family(workloads[r.workload]) for r in records
                              if r.status == WRONG and r.workload in workloads)
    check_text = (f"MetaSchedule's runner times a kernel without looking at its outputs, and TVM builds some schedules of its "
                  f"own design spaces into wrong kernels (apache/tvm#14791: the post-processor RewriteReductionBlock "
                  f"hoists a reduction's initialisation above a loop the reduction is recomputed in). `dragonlab records "
                  f"check {root}` runs the evaluator's check (fresh random inputs, every buffer compared with the "
                  f"unscheduled kernel) on `ok` records and keeps its verdicts in `checks*.jsonl.gz`; every command reads "
                  f"a record found wrong as `wrong`, without latencies. Checked so far: {len(checks)} of "
                  f"{totals[OK] + sum(v for k, v in checked.items() if k != OK)} measured `ok` records ("
                  + ", ".join(f"{k} {v}" for k, v in sorted(checked.items())) + "); wrong kernels by family: "
                  + (", ".join(f"{f} {n}" for f, n in wrong_by_family.most_common()) or "none") + ".")
    dataset_text = f"## Dataset\n\n{dataset}\n\n" if dataset else ""
    files = "\n".join(f"| `{p.name}` | {p.stat().st_size / 1e6:.2f} MB |"
                      for p in sorted(root.iterdir()) if p.is_file() and p.name != "README.md")
    return f"""# {title or root.name}: MetaSchedule search records

Every candidate that MetaSchedule's evolutionary search measured while tuning the workloads of
dragonlab's `standard` suite on the CPU (llvm): {len(workloads)} workloads, {len(records)} records,
{totals[OK]} of them `ok` (with latencies). A build or run that still timed out after its
retries is kept as `timeout` ({totals[TIMEOUT]} here): no verdict on the schedule, never a latency,
never data. Read it as it is with `dragonlab records stats {root}`, `dragonlab codec check {root}`, `dragonlab dataset
build --records {root} --out DIR` and `dragonlab evaluate --db {root}`.
{progress}
## Workloads

The `standard` suite (`dragonlab.core.workloads`): 16 shapes of each of the {sum(1 for f in families if not f.startswith('model:'))}
generator families, drawn the way networks use them and at most 134 MFLOP each (float16 counted
16 times: CPUs convert each element), and every tuning task that Relax extracts from three
PyTorch networks defined in the repository (`model:resnet`, `model:mobilenet`,
`model:transformer_block`), under the block names TVM's legalisation gives them. Tasks with
integer inputs (a gather's indices) are left out: random inputs index out of bounds.

{chr(10).join(rows)}

"finished": the workload's collection ran to its budget (or to the end of its design space).

## Measurement

- Machine: {'; '.join(f'{m} ({n} runs)' for m, n in machines.items()) or 'not logged'}.
- Software: {'; '.join(versions) or 'not logged'}.
- Search: {settings.get('trials_per_round', '?')} candidates per round, evolutionary search and XGBoost cost model
  as `tune_tir`, seed {settings.get('seed', '?')} (each workload's seed derived from it and its key).
- Timing: MetaSchedule's LocalRunner timing (one candidate at a time), {measure.get('repeat', '?')} repeats
  of {measure.get('number', '?')} runs, at least {measure.get('min_repeat_ms', '?')} ms per repeat; a build or run past
  {measure.get('run_timeout_sec', '?')} s is a timeout, retried {measure.get('retries', '?')} times.
- Time: {len(runs)} logged runs, {wall / 3600:.2f} hours of wall time, **{core_hours:.2f} core-hours**
  (load average at the start of each run: {', '.join(f'{x:g}' for x in loads) or 'not logged'}; above the
  core count, other work shared the machine while it measured).
  `collection*.jsonl.gz` logs every run.

## Numerical check

{check_text}

## Benchmark

{bench_text}

{dataset_text}## Files

| file | size |
|---|---:|
{files}

`*.jsonl.gz` are sealed: gzip-compressed JSON lines that never change again (`dragonlab records
seal`). `workloads.jsonl.gz` holds each workload's exact IRModule; `records.*.jsonl.gz` one measured
candidate per line (`dragonlab.search.records.Record`); `progress.*` the finished collections.

## Rebuild

{REBUILD}

## Licence

Apache-2.0, as dragonlab. The networks are defined in the repository; no third-party data.
"""
