"""Judging a script: decode it strictly, build and check it in sandboxed workers, time it, and
turn the verdict into a reward. Also the red team that attacks this judge."""

from dragonlab.core.exports import lazy

__getattr__, __dir__, __all__ = lazy(__name__, {
    "Evaluator": "evaluate", "Evaluation": "evaluate", "EvalConfig": "config",
    "RewardConfig": "reward", "reward": "reward",
})
