"""A dataset build's settings, `DatasetConfig` (also `dragonlab.learn.dataset.DatasetConfig`).

Its own module, importing no TVM, so that `dragonlab dataset build --help` (its flags are these
fields) and a campaign file's [dataset] checks cost no TVM import; `dataset.py`, which builds
the dataset, imports it from here. The prompt forms are named here for the same reason
(`dragonlab.learn.prompts` prints them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dragonlab.core import fields
from dragonlab.core.errors import InputError

PROMPT_FORMS = ("compact", "tvmscript")  # how a prompt shows the kernel (dragonlab.learn.prompts)
DEFAULT_FORM = "compact"
SCRIPT_FORMS = ("design", "full")
EXAMPLE_SOURCES = ("measured", "samples")


@dataclass(frozen=True)
class DatasetConfig:
    top_k: int = field(default=4, metadata={"help": "construction completions per workload and target: its k fastest scripts",
                                            "range": "> 0"})
    margin: float = field(default=0.10, metadata={"help": "refinement outputs run at least this much faster "
                                                          "(0.10: latency <= 0.9 x the input's)", "range": "(0, 1)"})
    pairs_per_workload: int = field(default=16, metadata={"help": "refinement pairs per workload and target, at most",
                                                          "range": "> 0"})
    strata: int = field(default=4, metadata={"help": "latency quantile bins that refinement inputs are drawn from",
                                             "range": "> 0"})
    seed: int = field(default=0, metadata={"help": "seeds the split and the pair sampling", "range": ">= 0"})
    holdout_family: str | None = field(default=None, metadata={"help": "an op family held out as the test_family split"})
    prompt_form: str = field(default=DEFAULT_FORM, metadata={"help": "how the kernel is shown: 'compact' or 'tvmscript'",
                                                             "choices": PROMPT_FORMS})
    scripts: str = field(default="design", metadata={
        "help": "'design': scripts stop where post-processing starts, as MetaSchedule's search keeps them "
                "(the target's post-processors write the rest, and the evaluator runs them); 'full': whole traces",
        "choices": SCRIPT_FORMS})
    examples: str = field(default="measured", metadata={
        "help": "'measured': construction and refinement examples from ok records, by latency; 'samples': "
                "construction examples only, from unmeasured design-space samples (`collect --samples`), top_k "
                "per workload in a seeded order: cheap structural data for pre-training",
        "choices": EXAMPLE_SOURCES})
    validation: float = field(default=0.1, metadata={"help": "share of workloads in the validation split",
                                                     "range": "[0, 1)"})
    test: float = field(default=0.1, metadata={"help": "share of workloads in the test split", "range": "[0, 1)"})
    benchmark: str | None = field(default=None, metadata={
        "help": "a benchmark file: its test, test_family and validation workloads are those splits, "
                "every other workload is train (replaces the hashed shares and holdout_family)"})

    def __post_init__(self):
        fields.check(self)
        if self.benchmark is not None and self.holdout_family is not None:
            raise InputError("benchmark and holdout_family exclude each other: the benchmark names its held-out families")
        if not self.validation + self.test < 1:
            raise InputError(f"DatasetConfig: validation and test must be shares with validation + test < 1, "
                             f"got {self.validation!r} and {self.test!r}")
