"""`TuneConfig`: the settings of `dragonlab tune` (no TVM import, so `--help` is quick)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dragonlab.core import fields
from dragonlab.learn.dataset_config import DEFAULT_FORM, PROMPT_FORMS
from dragonlab.search.config import POPULATION, MeasureConfig


@dataclass(frozen=True)
class TuneConfig:
    attempts: int = field(default=8, metadata={"help": "scripts the model writes for each task (its measurements)",
                                               "range": "> 0"})
    turns: int = field(default=0, metadata={
        "help": "refinement turns for each task after its attempts: the model is shown its fastest correct "
                "kernel so far and asked for a faster one (each turn a measurement)", "range": ">= 0"})
    budget: int | None = field(default=None, metadata={
        "help": "tune_relax's larger budget, in measurements over the whole network; None = 10 x the model's",
        "range": "> 0"})
    constrained: bool = field(default=True, metadata={"help": "constrained decoding: every script decodes and applies"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature; 0 = greedy", "range": ">= 0"})
    max_new_tokens: int = field(default=768, metadata={"help": "tokens per script, at most", "range": "> 0"})
    prompt_form: str = field(default=DEFAULT_FORM, metadata={"help": "how a prompt shows the kernel (as the model "
                                                                     "was trained)", "choices": PROMPT_FORMS})
    seed: int = field(default=0, metadata={"help": "seed of sampling, search and the random inputs", "range": ">= 0"})
    population: int = field(default=POPULATION, metadata={
        "help": "tune_relax's evolutionary search population (MetaSchedule's default); a budget of a round "
                "or two per task gains little from a large one", "range": "> 0"})
    checks: int = field(default=3, metadata={"help": "fresh random input sets each build's outputs are compared on",
                                             "range": "> 0"})
    measure: MeasureConfig = MeasureConfig()

    def __post_init__(self):
        fields.check(self)

    @property
    def per_task(self) -> int:
        """The model's measurements per task: its attempts and its turns."""
        return self.attempts + self.turns

    def search_budgets(self, tasks: int) -> tuple[int, int]:
        """tune_relax's two budgets for a network of `tasks` tasks: the model's measurements, and
        the larger one."""
        return tasks * self.per_task, self.budget or 10 * tasks * self.per_task
