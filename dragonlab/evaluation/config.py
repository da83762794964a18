"""The evaluator's settings, `EvalConfig` (also `dragonlab.evaluation.evaluate.EvalConfig`).

Its own module, importing no TVM, so that `dragonlab evaluate --help` (its flags are these
fields) costs no TVM import; `evaluate.py`, which runs the evaluator, imports it from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dragonlab.core import fields
from dragonlab.search.config import MeasureConfig


@dataclass(frozen=True)
class EvalConfig:
    checks: int = field(default=3, metadata={"help": "fresh random input sets compared with the reference",
                                             "range": "> 0"})
    seed: int = field(default=0, metadata={"help": "seed of the random inputs", "range": ">= 0"})
    workers: int | None = field(default=None, metadata={"help": "worker processes; None = physical cores",
                                                        "range": "> 0"})
    timeout_sec: float = field(default=60.0, metadata={"help": "limit for apply..check of one script", "range": "> 0"})
    memory_gb: float = field(default=8.0, metadata={"help": "address-space limit of each worker", "range": "> 0"})
    time: bool = field(default=True, metadata={"help": "measure latency of correct kernels"})
    measure: MeasureConfig = MeasureConfig()
    suspicious_speedup: float = field(default=10.0, metadata={"help": "flag speedups over the reference above this",
                                                              "range": "> 0"})
    nvcc: bool = field(default=False, metadata={"help": "compile generated CUDA with nvcc (no GPU needed)"})
    cache_size: int = field(default=100_000, metadata={"help": "evaluations remembered by (workload, target, trace)",
                                                       "range": ">= 0"})
    runner: str = field(default="local", metadata={"help": "time on this machine ('local') or through TVM's RPC "
                                                           "tracker ('rpc')", "choices": ("local", "rpc")})
    tracker: str | None = field(default=None, metadata={"help": "HOST:PORT of the RPC tracker"})
    key: str | None = field(default=None, metadata={"help": "device key at the tracker"})

    def __post_init__(self):
        fields.check(self)
