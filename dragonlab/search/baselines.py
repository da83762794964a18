"""The systems a model is measured against, each giving scripts judged by the same evaluator.

- `unscheduled`: the empty script, the kernel as written (every speedup's denominator).
- `search`: MetaSchedule's evolutionary search (`dragonlab.search.collect`, every candidate kept) run
  once per held-out workload to the largest budget; "MetaSchedule at N trials" is the best of
  its first N measured candidates. Its wall time per workload is kept beside the records.
- `seeded search`: the same search whose database starts with a model's correct kernels. They
  are stored as measured candidates of the run, so they count against its trial budget: at
  N trials, seeded and plain search have measured the same number of kernels.
- `random`: k postprocessed samples drawn from the design spaces (`explore.sample_traces`), the
  same number of measurements as the model's best-of-k.
- `dlight`: TVM's default schedules (`dragonlab.search.defaults`).

Every chosen kernel is re-timed by the evaluator in the report's run, so latencies compare with
the model's; recorded search latencies are used only to say which candidate is best and when
the search first reached a given latency.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from dragonlab.core import codec
from dragonlab.core.jsonl import append_lines, read_lines
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import Workload
from dragonlab.search.config import POPULATION, MeasureConfig
from dragonlab.search.records import OK, Record, RecordStore


@dataclass(frozen=True)
class SearchRun:
    """One workload's search: the candidates' recorded latencies (None: failed) in trial order."""

    workload: str
    latencies: list[float | None]
    traces: list[list | None]
    seconds: float | None  # wall time of the search (None: resumed from a run that did not record it)
    seeded: int = 0  # candidates that came from a model, at the start
    budget: int | None = None  # the trials it was run to (None: at least any asked for); fewer candidates
    #                            than its budget: its design space had no more

    def best_within(self, trials: int) -> tuple[float, list] | None:
        """(recorded latency, trace) of the best of the first `trials` candidates; None when none
        of them ran, or the search stopped short of `trials` (a stored search of a smaller budget)."""
        if self.budget is not None and trials > self.budget:
            return None
        ok = [(t, tr) for t, tr in zip(self.latencies[:trials], self.traces[:trials]) if t is not None]
        return min(ok, key=lambda x: x[0]) if ok else None

    def trials_to_reach(self, latency: float) -> int | None:
        """The first trial count whose best recorded latency is at most `latency` (None: never)."""
        return trials_to_reach(self.latencies, latency)


def trials_to_reach(latencies: list[float | None], latency: float) -> int | None:
    """The first trial count whose best of `latencies` (in trial order, None: failed) is at most
    `latency` (None: never)."""
    best = math.inf
    for i, t in enumerate(latencies, 1):
        if t is not None and t < best:
            best = t
        if best <= latency:
            return i
    return None


def search(workloads: list[Workload], target: str, trials: int, root: str | os.PathLike, *,
           seeds: dict[str, list[tuple[list, tuple[float, ...]]]] | None = None, seed: int = 0,
           population: int = POPULATION, measure: MeasureConfig = MeasureConfig(),
           stored: str | os.PathLike | None = None, progress: bool = True) -> dict[str, SearchRun]:
    """MetaSchedule search on each workload for `trials` measured candidates, into the record
    store `root` (resumes). `seeds[key]`: (plain trace, latencies) of kernels that start the
    search's database; they are the run's first candidates and count against `trials`.
    `population`: the evolutionary search's (MetaSchedule's default); `measure`: how it builds and
    times its candidates.
    `stored`: a record store (a corpus with its benchmark's searches) that is read, never
    written: a workload it finished a search of is taken from there, to the budget it was
    searched to (`SearchRun.budget`), and not searched again."""
    from dragonlab.search.collect import collect
    from dragonlab.search.config import CollectConfig

    spec = get_target(target)
    out = {}
    if stored is not None:
        corpus = RecordStore(stored)
        budgets = corpus.done()
        records = _by_workload(corpus, spec.name)  # read once: a corpus holds thousands
        for w in workloads:
            if budgets.get((w.key, spec.name)):
                out[w.key] = _run(records.get(w.key, []), w.key, min(trials, budgets[(w.key, spec.name)]), None,
                                  budget=budgets[(w.key, spec.name)])
        workloads = [w for w in workloads if w.key not in out]
    store = RecordStore(root, create=True)
    times_file = Path(root) / "seconds.jsonl"
    times = read_times(times_file)
    done = store.done()
    todo = [w for w in workloads if done.get((w.key, spec.name), 0) < trials]
    fresh = {w.key for w in todo if not store.records(target=spec.name, workload=w.key)}
    if seeds:
        store.add_workloads([w for w in todo if w.key in fresh])
        store.append([Record(w.key, spec.name, trace, OK, tuple(lat), source="model")
                      for w in todo if w.key in fresh for trace, lat in seeds.get(w.key, [])[:trials]])

    def finished(key: str, seconds: float) -> None:
        if key in fresh:  # a resumed search's wall time is unknown
            times[key] = seconds
            append_lines(times_file, [{"workload": key, "seconds": seconds}])

    if todo:  # one collection for all: its builder and runner start once, not once per workload
        collect(todo, spec, store, CollectConfig(trials=trials, seed=seed, population=population, measure=measure),
                progress=progress, on_done=finished)
    records = _by_workload(store, spec.name)
    for w in workloads:
        out[w.key] = _run(records.get(w.key, []), w.key, trials, times.get(w.key))
    return out


def _by_workload(store: RecordStore, target: str) -> dict[str, list[Record]]:
    grouped: dict[str, list[Record]] = {}
    for r in store.records(target=target):
        grouped.setdefault(r.workload, []).append(r)
    return grouped


def _run(records: list[Record], key: str, trials: int, seconds: float | None, *,
         budget: int | None = None) -> SearchRun:
    """The first `trials` measured candidates of a workload's search (its `records`), in trial
    order (a model's seeds first); timeouts say nothing about a schedule and are left out."""
    records = sorted(records, key=lambda r: (r.source != "model", r.trial if r.trial is not None else -1))
    records = [r for r in records if r.status != "timeout"][:trials]
    return SearchRun(key, [statistics.median(r.latencies) if r.status == OK else None for r in records],
                     [r.trace if r.status == OK else None for r in records], seconds,
                     sum(r.source == "model" for r in records), budget)


def read_times(path: Path) -> dict[str, float]:
    return dict(read_lines(path, lambda d: (d["workload"], d["seconds"]))) if path.exists() else {}


def random_scripts(workload: Workload, target: str, n: int, seed: int = 1) -> list[str]:
    """n postprocessed random samples of the design spaces, as scripts."""
    from dragonlab.search.explore import sample_traces

    return [codec.encode(s.sch.trace) for s in sample_traces(workload, target, n=n, seed=seed)]


def unscheduled_script() -> str:
    """The script with no instructions: the kernel as written."""
    return ""
