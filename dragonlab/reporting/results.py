"""The report as data: `Report` and its parts, frozen and typed, read by attribute.

`run_report` and `read_report` (`dragonlab.reporting.report`) return a `Report`; the HTML page,
the figures, the notebooks and the CLI read its attributes. On disk it is report.json, whose
shape is unchanged: `Report.from_json(json.loads(text))` reads a report written before these
classes existed, and `to_json()` writes the same keys ("pass@k", "geomean correct", budgets and
thresholds as strings).

    report = read_report("runs/demo")
    report.systems["rl"].construction.pass_at_k[1]        # pass@1 of RL's construction attempts
    report.best_of_k_vs_metaschedule["sft"][32].geomean_latency_ratio
    report.rl_vs_sft.rows[-1].wins                         # compare.Comparison, task "all"

Mappings are keyed as in the JSON, with budgets as `int` and fast_p thresholds as `float`. What
every number means is in `dragonlab/reporting/report.py`'s docstring and docs/report.md.
"""

from __future__ import annotations

import os
import types
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from dragonlab.core.jsonl import read_json
from dragonlab.reporting.compare import ModelComparison
from dragonlab.reporting.config import ReportConfig


def _key(name: str) -> dict:
    """Field metadata: the field's key in report.json."""
    return {"json": name}


_OPTIONAL = {"omit_none": True}  # a key report.json leaves out (rather than null) when there is nothing


# --- the parts ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Paper:
    """The paper's self-reported figures (arXiv 2610.20980), shown beside ours, never mixed with them."""

    scale: str
    correct_construction: float = field(metadata=_key("correct construction"))
    correct_refinement: float = field(metadata=_key("correct refinement"))
    rl_wins_construction: str = field(metadata=_key("rl wins construction"))
    rl_wins_refinement: str = field(metadata=_key("rl wins refinement"))

    def correct(self, task: str) -> float:
        return getattr(self, f"correct_{task}")

    def rl_wins(self, task: str) -> str:
        return getattr(self, f"rl_wins_{task}")


# An 8B model with LoRA, cuda targets, 54,116 workloads.
PAPER = Paper("8B model (LoRA), CUDA GPUs, 54,116 search workloads, 102 construction / 170 refinement test tasks",
              0.9127, 0.9201, "88/102", "145/170")


@dataclass(frozen=True)
class Stats:
    """Speedups where an incorrect kernel counts as 1x; `geomean_correct` over correct ones alone."""

    n: int
    correct: int
    geomean: float | None
    mean: float | None
    median: float | None
    geomean_correct: float | None = field(metadata=_key("geomean correct"))
    interval: tuple[float, float] | None = field(default=None, metadata=_OPTIONAL)  # geomean's, bootstrap 95%


@dataclass(frozen=True)
class Ratio:
    """Geomean over workloads of (latency / reference latency) where both exist; the rest counted."""

    geomean_latency_ratio: float | None
    workloads: int
    no_correct_kernel: int
    no_search_kernel: int
    interval: tuple[float, float] | None = field(default=None, metadata=_OPTIONAL)  # bootstrap 95%, over workloads


@dataclass(frozen=True)
class SummaryRow:
    """`dragonlab.learn.attempts.summary`'s row of one task (or "all")."""

    task: str
    attempts: int
    correct: float
    exact: float
    repaired: int = 0
    median_speedup: float | None = None
    dead_ends: int = 0
    cut_at_length: int = 0
    stopped_at: dict[str, int] = field(default_factory=dict)
    contended: int = 0  # timed while other processes kept the cores busy


@dataclass(frozen=True, kw_only=True)
class TaskMetrics:
    """One system's attempts at one task (or all): correctness, pass@k, speedups, fast_p."""

    attempts: int
    prompts: int
    correct: float
    pass_at_k: dict[int, float] = field(metadata=_key("pass@k"))
    speedup_vs_unscheduled: Stats
    fast_p: dict[str, dict[float, float | None]]  # baseline ("unscheduled", "metaschedule@N", ...) -> p -> share
    speedup_vs_input: Stats | None = field(default=None, metadata=_OPTIONAL)  # refinement only
    # `correct`'s bootstrap 95% interval, prompts resampled (a prompt's attempts together)
    correct_interval: tuple[float, float] | None = field(default=None, metadata=_OPTIONAL)


@dataclass(frozen=True, kw_only=True)
class SystemMetrics:
    summary: tuple[SummaryRow, ...]
    construction: TaskMetrics | None = field(default=None, metadata=_OPTIONAL)
    refinement: TaskMetrics | None = field(default=None, metadata=_OPTIONAL)
    overall: TaskMetrics | None = field(default=None, metadata={**_key("all"), **_OPTIONAL})

    def task(self, name: str) -> TaskMetrics | None:
        """The metrics of "construction", "refinement" or "all" (None: no such attempts)."""
        return {"construction": self.construction, "refinement": self.refinement, "all": self.overall}.get(name)


@dataclass(frozen=True)
class WorkloadKernel:
    latency: float | None  # median of the evaluator's repeats; None: no correct kernel
    stage: str | None


@dataclass(frozen=True)
class BaselineMetrics:
    workloads: int
    correct: float
    speedup_vs_unscheduled: Stats
    fast_p_vs_unscheduled: dict[float, float | None]
    vs_metaschedule: dict[int, Ratio]
    per_workload: dict[str, WorkloadKernel]


@dataclass(frozen=True)
class Match:
    """Search trials (and wall time, prorated) to reach a system's best-of-k latency on a workload."""

    trials: int | None  # None: not within `searched`
    seconds: float | None
    searched: int


@dataclass(frozen=True)
class MatchTime:
    """One workload: wall seconds until a kernel within `TimeToMatch.within` of the reference."""

    model_attempts: int | None  # the model's first such attempt (1-based); None: none of its k
    model_seconds: float | None  # the model's seconds up to it (writing and judging, `Attempt.seconds`)
    search_trials: int | None  # search's first such candidate, by its recorded latencies
    search_seconds: float | None  # prorated from the search's seconds per trial (`search_clock`)
    search_clock: str | None  # "search": the plain search's own wall time; "seeded search": the
    #                           seeded search's seconds per trial on the workload (a stored search has none)


@dataclass(frozen=True)
class TimeToMatch:
    """Wall time to a kernel within `within` (1.1: 10%) of `reference`'s latency, model and search on
    the same machine; `speedup` = search seconds / model seconds per workload, 0 where the model's
    k attempts never got there."""

    reference: str  # "metaschedule@512"
    within: float
    workloads: int  # with a reference kernel, model attempts timed, and a search clock
    model_reached: int
    median_model_seconds: float | None  # over the workloads the model reached
    median_search_seconds: float | None
    median_speedup: float | None
    per_workload: dict[str, MatchTime]


@dataclass(frozen=True)
class BestOfKPoint:
    k: int
    geomean_speedup: float | None
    solved: float
    # k a power of two or the last: best-of-k latency / MetaSchedule at N's, per budget N
    vs_metaschedule: dict[int, Ratio] = field(default_factory=dict)
    interval: tuple[float, float] | None = field(default=None, metadata=_OPTIONAL)  # geomean's, bootstrap 95%


@dataclass(frozen=True)
class BestOfKCurve:
    prompts: int
    points: tuple[BestOfKPoint, ...]


@dataclass(frozen=True)
class TurnPoint:
    turn: int
    geomean_speedup: float | None
    correct: float
    interval: tuple[float, float] | None = field(default=None, metadata=_OPTIONAL)  # geomean's, bootstrap 95%


@dataclass(frozen=True)
class TurnCurve:
    prompts: int
    points: tuple[TurnPoint, ...]


@dataclass(frozen=True)
class Drift:
    """A system's construction prompts' unscheduled kernel as timed in their own batches, against
    the baselines' timing of it, which every speedup over the unscheduled kernel divides by: about
    1 where both were timed on one machine under the same load."""

    prompts: int
    geomean: float | None  # in-batch latency over the baselines'
    off: int  # prompts where the two differ by more than DRIFT, either way

    def suspect(self) -> bool:
        """The system was judged on another machine, or a loaded one, than the baselines."""
        return self.geomean is not None and (
            not 1 / DRIFT_GEOMEAN <= self.geomean <= DRIFT_GEOMEAN or self.off > DRIFT_SHARE * self.prompts)


# A prompt is off when its in-batch unscheduled kernel and the baselines' differ by more than
# DRIFT; a system is suspect when its geomean is outside DRIFT_GEOMEAN or more than DRIFT_SHARE
# of its prompts are off. Measured on the standard report: RL's attempts, judged over two sessions
# on the baselines' machine, 0.99x with 2 of 66 prompts off (sub-microsecond kernels and one the
# baselines timed slow); SFT's, part of them judged on a loaded machine, 1.04x with 5 off (1.9x to
# 3.3x); the same scripts judged on another 2-core EPYC machine: 3.3x.
DRIFT, DRIFT_GEOMEAN, DRIFT_SHARE = 1.5, 1.1, 0.05


@dataclass(frozen=True)
class Audit:
    suspicious: tuple[dict[str, Any], ...]  # {"system", "split", "index", "sample", "speedup"} or {"system", "workload"}
    decoded: int
    round_trip_failures: tuple[dict[str, Any], ...]  # {"system", "split", "index", "sample"}
    # per system: attempts timed while other processes kept at least `evaluate.CONTENDED` of a core
    # busy (their latencies, and speedups, are not to be trusted); reports before it: none recorded
    contended: dict[str, int] = field(default_factory=dict)
    # per system: its attempts' unscheduled kernel against the baselines'; reports before it: none
    reference_drift: dict[str, Drift] = field(default_factory=dict)

    def warnings(self) -> list[str]:
        """A sentence for attempts timed beside other work, and one for systems judged on another
        machine (or a loaded one) than the baselines; none for a clean report."""
        out = []
        if any(self.contended.values()):
            counts = ", ".join(f"{n} {c}" for n, c in self.contended.items())
            out.append(f"Attempts timed while other processes kept the cores busy ({counts}): their latencies are "
                       "not to be trusted; rerun on an idle machine.")
        drifted = {n: d for n, d in self.reference_drift.items() if d.suspect()}
        if drifted:
            which = "; ".join(f"{n} {d.geomean:.2f}x, {d.off} of {d.prompts} prompts off by more than {DRIFT}x"
                              for n, d in drifted.items())
            out.append(f"The unscheduled kernel, timed in the attempts' batches, ran at another speed than in the "
                       f"baselines' timing ({which}): judged on another machine or under load, these speedups over "
                       f"the unscheduled kernel are not comparable with the others'; judge the whole report on one "
                       f"idle machine (dragonlab report --replay).")
        return out


@dataclass(frozen=True)
class SeededSearch:
    system: str  # e.g. "rl-seeded metaschedule@64"
    trials: int  # the model's kernels count as trials; baselines[system].vs_metaschedule compares
    seeded_kernels: dict[str, int | None]  # per workload: the model's kernels the search started from


@dataclass(frozen=True)
class LLMSystem:
    system: str
    base_url: str
    model: str


# --- the report -----------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Report:
    """Everything report.json holds. `metrics.metrics` fills the numbers; `run_report` adds where
    they came from (`workload_names` to `sources`)."""

    config: ReportConfig
    paper: Paper
    held_out_workloads: int
    systems: dict[str, SystemMetrics]  # "sft", "rl", "llm-<model>"
    baselines: dict[str, BaselineMetrics]  # "unscheduled", "random best-of-k", "dlight", "metaschedule@N", ...
    best_of_k: dict[str, dict[str, float | None]]  # system -> workload -> best construction latency
    best_of_k_vs_metaschedule: dict[str, dict[int, Ratio]]  # systems and random best-of-k -> budget N
    trials_to_match: dict[str, dict[str, Match]]
    turns: dict[str, TurnCurve]
    best_of_k_curve: dict[str, BestOfKCurve]
    rl_vs_sft: ModelComparison | None
    audit: Audit
    seeded_search: SeededSearch | None = field(default=None, metadata=_OPTIONAL)
    search_seconds: dict[str, float | None]
    workload_names: dict[str, str] = field(default_factory=dict)
    run: str = ""
    target: str = ""
    models: dict[str, str] = field(default_factory=dict)
    llm: LLMSystem | None = None
    sources: tuple[str, ...] = ()
    stored_search: str | None = field(default=None, metadata=_OPTIONAL)  # the corpus whose searches were taken
    # system -> its best-of-k latency / random best-of-k's (k design-space samples), per workload
    best_of_k_vs_random: dict[str, Ratio] = field(default_factory=dict)
    # system -> wall time to a kernel within 10% of MetaSchedule at the largest budget, against search's
    time_to_match: dict[str, TimeToMatch] = field(default_factory=dict)
    # best_of_k_vs_metaschedule from kernels timed again side by side (report.py), not as first judged
    timed_side_by_side: bool = False

    def to_json(self) -> dict:
        """report.json's content (JSON types only)."""
        return to_json(self)

    @classmethod
    def from_json(cls, d: dict) -> Report:
        """A report from report.json's content; keys it does not know are ignored."""
        return from_json(cls, d)

    @classmethod
    def read(cls, path: str | os.PathLike) -> Report:
        """report.json of a report directory (or the file itself)."""
        path = Path(path)
        return cls.from_json(read_json(path / "report.json" if path.is_dir() else path))


# --- JSON, driven by the dataclasses' types --------------------------------------------------------

def to_json(x: Any) -> Any:
    """Dataclasses as objects (keys from field metadata "json"), mapping keys as strings, tuples as lists."""
    if is_dataclass(x) and not isinstance(x, type):
        return {f.metadata.get("json", f.name): to_json(getattr(x, f.name)) for f in fields(x)
                if not (f.metadata.get("omit_none") and getattr(x, f.name) is None)}
    if isinstance(x, dict):
        return {k if isinstance(k, str) else str(k): to_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    return x


def from_json(tp: Any, data: Any) -> Any:
    """`data` (parsed JSON) as an instance of the type `tp`: dataclasses, dict[K, V] (K str, int or
    float), tuple[T, ...], list[T], T | None, float (an int is made a float), anything else as is."""
    if data is None or tp is Any:
        return data
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return from_json(inner[0], data) if len(inner) == 1 else data
    if is_dataclass(tp):
        hints = get_type_hints(tp)
        return tp(**{f.name: from_json(hints[f.name], data[f.metadata.get("json", f.name)]) for f in fields(tp)
                     if f.init and f.metadata.get("json", f.name) in data})
    if origin is dict:
        kt, vt = args
        return {(kt(k) if kt in (int, float) else k): from_json(vt, v) for k, v in data.items()}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_json(args[0], v) for v in data)
        return tuple(from_json(t, v) for t, v in zip(args, data))
    if origin is list:
        return [from_json(args[0], v) for v in data]
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data
