"""The report's settings: what `run_report` judges and how (also `dragonlab.reporting.report.ReportConfig`).

Its own module so that the report's data (`results.Report`, whose `config` it is) and the code
that computes it both sit below `report.py`, which runs the report and imports them."""

from __future__ import annotations

from dataclasses import dataclass, field

from dragonlab.core import fields
from dragonlab.core.errors import InputError
from dragonlab.search.config import POPULATION, MeasureConfig


@dataclass(frozen=True)
class ReportConfig:
    k: int = field(default=8, metadata={"help": "attempts per held-out prompt (best-of-k, pass@k)", "range": "> 0"})
    best_of: int | None = field(default=None, metadata={
        "help": "attempts per construction prompt, for the best-of-j curve up to it (None: k); correctness and "
                "pass@k count them all, best-of-k against search and random samples takes the first k",
        "range": "> 0"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature of every model", "range": ">= 0"})
    splits: tuple[str, ...] = field(default=("test", "test_family"), metadata={"help": "held-out splits"})
    refinement_per_workload: int | None = field(default=2, metadata={"help": "refinement prompts per workload (None: all)",
                                                                     "range": "> 0"})
    budgets: tuple[int, ...] = field(default=(8, 32, 64, 128, 512), metadata={"help": "MetaSchedule trial budgets",
                                                                              "range": "> 0"})
    seeded_budget: int | None = field(default=None, metadata={
        "help": "trials of the model-seeded search, the model's kernels among them (None: the largest budget); "
                "it is compared with plain search at every budget", "range": "> 0"})
    turns: int = field(default=3, metadata={"help": "refinement turns after each construction attempt",
                                            "range": ">= 0"})
    compared_draws: int = field(default=4, metadata={
        "help": "RL vs SFT: the first this many attempts at each prompt are paired (sample by sample), each pair's "
                "kernels timed side by side", "range": "> 0"})
    constrained: bool = field(default=False, metadata={"help": "constrained decoding for the local models"})
    max_new_tokens: int = field(default=768, metadata={"help": "tokens per script, at most", "range": "> 0"})
    seed: int = field(default=0, metadata={"help": "sampling and search seed", "range": ">= 0"})
    population: int = field(default=POPULATION, metadata={
        "help": "population of the MetaSchedule searches run here (MetaSchedule's default)", "range": "> 0"})
    p: tuple[float, ...] = field(default=(1.0, 1.2, 2.0), metadata={"help": "fast_p thresholds", "range": "> 0"})
    # How every kernel is timed (the evaluator's timer) and the searches run here measure: the
    # report's --number, --repeat, --min-repeat-ms, as `collect`'s and `tune`'s.
    measure: MeasureConfig = MeasureConfig()

    def __post_init__(self):
        fields.check(self)
        if self.best_of is not None and self.best_of < self.k:
            raise InputError(f"ReportConfig.best_of ({self.best_of}) must be at least k ({self.k}): best-of-k "
                             "takes the first k of a construction prompt's attempts")

    @property
    def construction_attempts(self) -> int:
        """Attempts per construction prompt: `best_of`, or k."""
        return self.best_of or self.k

    @property
    def seeded_trials(self) -> int:
        """Trials of the model-seeded search: `seeded_budget`, or the largest budget."""
        return self.seeded_budget or max(self.budgets)
