"""The shaped reward: correctness first, a latency bonus only for numerically correct kernels.

    reward = penalty[stage]                                  if the script stopped before "time"
    reward = correct - repaired_penalty * repaired + bonus   otherwise
    bonus  = bonus_weight * clip(log2(speedup) / log2(max_speedup), -1, 1)   (0 if not timed)

The penalty ladder orders failures by how far the script got: unparseable < does not apply <
invalid < build or run failure < wrong result < any correct kernel. The bonus is bounded, so no
latency, however suspicious, outweighs being correct, and it is symmetric in log-speedup, so a
correct kernel slower than its reference is still preferred to a wrong one but earns less than
the reference itself. The reference is the unscheduled (or default) kernel for construction and
the input script for refinement; it travels in `Evaluation.reference_latency`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dragonlab.core import fields as checked_fields
from dragonlab.core.errors import InputError

if TYPE_CHECKING:  # the reward is arithmetic on a verdict: importing it does not import TVM
    from dragonlab.evaluation.evaluate import Evaluation


@dataclass(frozen=True)
class RewardConfig:
    decode: float = field(default=-1.0, metadata={"help": "the script does not parse"})
    apply: float = field(default=-0.8, metadata={"help": "the trace does not apply to the workload"})
    validate: float = field(default=-0.6, metadata={"help": "the target's post-processors reject it"})
    build: float = field(default=-0.4, metadata={"help": "it does not compile"})
    run: float = field(default=-0.4, metadata={"help": "the kernel crashes, hangs or cannot run here"})
    check: float = field(default=-0.2, metadata={"help": "the kernel computes a wrong result"})
    correct: float = field(default=1.0, metadata={"help": "a numerically correct kernel"})
    repaired_penalty: float = field(default=0.25, metadata={"help": "TVM had to repair one of its decisions",
                                                            "range": ">= 0"})
    bonus_weight: float = field(default=0.5, metadata={"help": "largest latency bonus (and malus)", "range": ">= 0"})
    max_speedup: float = field(default=16.0, metadata={"help": "speedup at which the bonus saturates", "range": "> 0"})

    # the ladder's flags are `dragonlab rl --reward-build -0.4` ...: `--run` would be a command's name
    FLAGS = {stage: f"reward_{stage}" for stage in ("decode", "apply", "validate", "build", "run", "check", "correct")}

    def __post_init__(self):
        checked_fields.check(self)  # finite numbers (every comparison with NaN is False), in their ranges
        ladder = [self.decode, self.apply, self.validate, self.build, self.check]
        if ladder != sorted(ladder) or self.run > self.check:
            raise InputError("RewardConfig: penalties must rise decode <= apply <= validate <= build/run <= check")
        worst_correct = self.correct - self.repaired_penalty - self.bonus_weight
        if worst_correct <= self.check:
            raise InputError(f"RewardConfig: the worst correct kernel ({worst_correct}) must beat a wrong one "
                             f"({self.check}); lower bonus_weight or repaired_penalty")
        if self.max_speedup <= 1:
            raise InputError("RewardConfig: max_speedup must be above 1")

    def bonus(self, speedup: float | None) -> float:
        if not speedup or speedup <= 0:
            return 0.0
        scaled = math.log2(speedup) / math.log2(self.max_speedup)
        return self.bonus_weight * max(-1.0, min(1.0, scaled))


def reward(evaluation: Evaluation, config: RewardConfig = RewardConfig()) -> float:
    if not evaluation.correct:
        return getattr(config, evaluation.stage)
    base = config.correct - (config.repaired_penalty if evaluation.repaired else 0.0)
    return base + config.bonus(evaluation.speedup)
