"""Teaching the dragon: datasets of prompts and scripts, models, SFT and GRPO, constrained
decoding, attempts judged by the evaluator, and general-purpose LLMs behind an API.

`sft` and `rl` import neither TVM nor torch until they train."""

from dragonlab.core.exports import lazy

__getattr__, __dir__, __all__ = lazy(__name__, {
    "DatasetConfig": "dataset_config", "build_dataset": "dataset",
    "SFTConfig": "sft", "RLConfig": "rl",
    "ChatModel": "llm", "ScriptConstraint": "constrain",
    "evaluate_attempts": "attempts", "summary": "attempts",
})
