"""The search's settings: how candidates are built and timed (`MeasureConfig`) and what a
collection searches (`CollectConfig`).

Their own module, importing no TVM, so that a command's flags (`dragonlab collect --help`,
generated from these fields) and a campaign file's checks cost no TVM import; `measure.py` and
`collect.py`, which do the work, import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dragonlab.core import fields
from dragonlab.core.errors import InputError

RUNNERS = ("local", "rpc")
POPULATION = 512  # MetaSchedule's EvolutionarySearch population: collect's, tune's and report's default


@dataclass(frozen=True)
class MeasureConfig:
    """How candidates are built and timed. Defaults run on a 2-core laptop."""

    number: int = field(default=3, metadata={"help": "kernel calls averaged into one repeat", "range": "> 0"})
    repeat: int = field(default=3, metadata={"help": "repeats kept per candidate (the latency spread)", "range": "> 0"})
    min_repeat_ms: int = field(default=40, metadata={"help": "grow `number` until a repeat lasts this long",
                                                     "range": ">= 0"})
    build_timeout_sec: float = field(default=30.0, metadata={"help": "limit for one build", "range": "> 0"})
    run_timeout_sec: float = field(default=30.0, metadata={"help": "limit for one run, all repeats", "range": "> 0"})
    retries: int = field(default=2, metadata={"help": "times a timed-out build or run is tried again", "range": ">= 0"})
    builder_workers: int | None = field(default=None, metadata={"help": "build processes; None = all cores",
                                                                "range": "> 0"})

    def __post_init__(self):
        fields.check(self)

    def evaluator(self):
        """MetaSchedule's `EvaluatorConfig` of these settings (imports TVM)."""
        from tvm.s_tir.meta_schedule.runner import EvaluatorConfig

        return EvaluatorConfig(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                               enable_cpu_cache_flush=False)


@dataclass(frozen=True)
class CollectConfig:
    trials: int = field(default=32, metadata={"help": "measured candidates per workload", "range": "> 0"})
    trials_per_round: int = field(default=16, metadata={"help": "candidates per search round (one batch)",
                                                        "range": "> 0"})
    seed: int = field(default=0, metadata={"help": "search seed; one workload's seed derives from it and its key",
                                           "range": ">= 0"})
    runner: str = field(default="local", metadata={"help": "'local' or 'rpc'", "choices": RUNNERS})
    tracker: str | None = field(default=None, metadata={"help": "HOST:PORT of the RPC tracker (rpc runner)"})
    key: str | None = field(default=None, metadata={"help": "device key registered at the tracker (rpc runner)"})
    search_threads: int | str = field(default="physical", metadata={
        "help": "threads of the evolutionary search and cost model ('physical' = physical cores, as tune_tir)"})
    population: int = field(default=POPULATION, metadata={
        "help": "evolutionary search population (MetaSchedule's default); a one-round search gains nothing from "
                "a large one", "range": "> 0"})
    measure: MeasureConfig = MeasureConfig()

    def __post_init__(self):
        fields.check(self)
        if self.runner == "rpc":
            for name in ("tracker", "key"):
                if not getattr(self, name):
                    raise InputError(f"CollectConfig.{name}: missing (runner 'rpc' needs tracker HOST:PORT and key)")
            try:
                parse_tracker(self.tracker)
            except InputError:
                raise InputError(f"CollectConfig.tracker must be HOST:PORT, got {self.tracker!r}") from None


def parse_tracker(text: str) -> tuple[str, int]:
    """(host, port) of "HOST:PORT"."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(f"--tracker must be HOST:PORT, got {text!r}")
    return host, int(port)
