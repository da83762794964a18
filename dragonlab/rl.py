"""Reinforcement learning with the shaped reward: trl's GRPOTrainer, the evaluator as the judge.

    run = rl.train("runs/demo/sft", "runs/demo/dataset", "runs/demo/rl", RLConfig())

Each step samples `num_generations` scripts for each of `prompts_per_step` training prompts.
The whole group is judged in one evaluator batch (parallel worker processes, cached by
trace), and `dragonlab.reward.reward` turns each Evaluation into a number: the penalty ladder
for scripts that stop early, 1 for a correct kernel, and a bounded latency bonus only for
correct ones, against the unscheduled kernel (construction) or the prompt's input script
(refinement), both timed in the same batch. GRPO normalises rewards within each group.

The reward's components are logged every step (`log.jsonl`, trl's metric names under
`dragonlab/`): the share of attempts that stopped at each stage, the share correct, the
mean bonus. The output directory works as `dragonlab.sft`'s does: `run.json`, `checkpoints/`
(resume from the newest complete one), the append-only `log.jsonl`, and `model/`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from dragonlab.reward import RewardConfig


@dataclass(frozen=True)
class RLConfig:
    max_steps: int = field(default=60, metadata={"help": "optimizer steps"})
    learning_rate: float = field(default=1e-4, metadata={"help": "learning rate (constant after warm-up)"})
    num_generations: int = field(default=4, metadata={"help": "scripts sampled per prompt (the GRPO group)"})
    prompts_per_step: int = field(default=2, metadata={"help": "prompts per step"})
    max_completion_length: int = field(default=640, metadata={"help": "tokens a script may take"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts"})
    beta: float = field(default=0.04, metadata={"help": "KL coefficient against the SFT model (0 = no reference model)"})
    save_steps: int = field(default=20, metadata={"help": "checkpoint every this many steps"})
    logging_steps: int = field(default=1, metadata={"help": "log the reward's components every this many steps"})
    seed: int = field(default=0, metadata={"help": "seeds shuffling and sampling"})
    constrained: bool = field(default=False, metadata={"help": "constrained decoding of the rollouts (constrain.py)"})
    threads: int = field(default=1, metadata={"help": "torch threads"})
    workers: int | None = field(default=None, metadata={"help": "evaluator worker processes; None = physical cores"})
    reward: RewardConfig = RewardConfig()

    def __post_init__(self):
        for name in ("max_steps", "num_generations", "prompts_per_step", "max_completion_length", "save_steps",
                     "logging_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"RLConfig.{name} must be positive, got {getattr(self, name)}")
        if self.num_generations < 2:
            raise ValueError("RLConfig.num_generations must be at least 2: GRPO compares scripts within a group")
        if not self.learning_rate > 0 or self.beta < 0 or not self.temperature > 0:
            raise ValueError("RLConfig: learning_rate and temperature must be positive, beta non-negative")


@dataclass(frozen=True)
class RLRun:
    out: Path
    model_dir: Path
    steps: int
    resumed_from: int | None
    log: list[dict]


class ShapedReward:
    """A trl reward function: judges a batch of scripts with the evaluator and returns
    `reward(evaluation)` for each; logs the components through trl's `log_metric`."""

    __name__ = "shaped_reward"  # trl names the logged reward after it

    def __init__(self, evaluator, workloads: dict, config: RewardConfig = RewardConfig()):
        self.evaluator, self.workloads, self.config = evaluator, workloads, config
        self.last: list = []  # the last batch's Evaluations (for tests and notebooks)

    def __call__(self, prompts, completions, workload, task, input_script, log_metric=None, **_) -> list[float]:
        from dragonlab.attempts import evaluate_attempts
        from dragonlab.evaluate import STAGES
        from dragonlab.reward import reward

        rows = [{"workload": w, "task": t, "input_script": s} for w, t, s in zip(workload, task, input_script)]
        attempts = evaluate_attempts(self.evaluator, self.workloads, rows, [[c] for c in completions])
        self.last = [a.evaluation for a in attempts]
        if log_metric is not None:
            n = len(self.last)
            for stage in STAGES:
                log_metric(f"dragonlab/stopped_at_{stage}", sum(e.stage == stage for e in self.last) / n)
            log_metric("dragonlab/correct", sum(e.correct for e in self.last) / n)
            log_metric("dragonlab/exact", sum(e.exact for e in self.last) / n)
            log_metric("dragonlab/mean_bonus", sum(self.config.bonus(e.speedup) if e.correct else 0.0
                                                   for e in self.last) / n)
        return [reward(e, self.config) for e in self.last]


def _constrain_rollouts(model, tokenizer, rows, workloads, temperature: float):
    """Every `model.generate` call (trl's rollouts) decodes through a ScriptConstraint. trl has
    no hook for logits processors, so the model's own `generate` gets one by default. A rollout
    that hits a dead end keeps its unfinished line: the reward judges what was generated."""
    import functools

    from transformers import LogitsProcessorList

    from dragonlab.constrain import for_rows

    constraint = for_rows(tokenizer, rows, workloads)
    constraint.temperature = temperature
    model.generate = functools.partial(model.generate, logits_processor=LogitsProcessorList([constraint]))
    return constraint


def train(sft_dir: str | os.PathLike, data: str | os.PathLike, out: str | os.PathLike,
          config: RLConfig = RLConfig(), *, progress: bool = True, evaluator=None) -> RLRun:
    """GRPO from the model of an SFT run (`sft_dir/model`, or any model directory) on the train split."""
    import torch
    import trl
    from transformers.trainer_callback import PrinterCallback

    from dragonlab import dataset, models
    from dragonlab.progress import shown
    from dragonlab.evaluate import EvalConfig, Evaluator
    from dragonlab.sft import _claim, _last_complete_checkpoint, _step_of, log_callback, read_log

    torch.set_num_threads(config.threads)
    progress = shown(progress)
    out = Path(out)
    source = Path(sft_dir) / "model" if (Path(sft_dir) / "model").is_dir() else Path(sft_dir)
    dsd, workloads = dataset.load(data)
    if "train" not in dsd:
        raise ValueError(f"{data}: the dataset has no train split")
    model, tokenizer = models.load(source, trainable=True)
    _claim(out, config, data, source=str(source.resolve()))
    if (out / "model").is_dir():  # this run finished before: nothing to train
        log = read_log(out / "log.jsonl")
        return RLRun(out, out / "model", max((d.get("step", 0) for d in log), default=0), None, log)

    train_rows = dsd["train"].select_columns(["prompt", "workload", "task", "input_script"])
    target = dataset.target_of(dsd, ["train"])
    log_path = out / "log.jsonl"
    checkpoints = out / "checkpoints"
    resume = _last_complete_checkpoint(checkpoints)
    group = config.num_generations
    args = trl.GRPOConfig(
        output_dir=str(checkpoints), max_steps=config.max_steps, learning_rate=config.learning_rate,
        per_device_train_batch_size=group * config.prompts_per_step, num_generations=group,
        max_completion_length=config.max_completion_length, temperature=config.temperature, beta=config.beta,
        logging_steps=config.logging_steps, save_steps=config.save_steps, save_total_limit=2,
        use_cpu=not torch.cuda.is_available(), bf16=False, use_vllm=False, gradient_checkpointing=False,
        report_to="none", seed=config.seed, dataloader_num_workers=0, disable_tqdm=not progress,
        lr_scheduler_type="constant_with_warmup", warmup_steps=0.05)

    own = evaluator is None
    evaluator = evaluator or Evaluator(target, EvalConfig(workers=config.workers))
    constraint = _constrain_rollouts(model, tokenizer, train_rows, workloads, config.temperature) \
        if config.constrained else None
    try:
        reward_fn = ShapedReward(evaluator, workloads, config.reward)
        trainer = trl.GRPOTrainer(model=model, reward_funcs=[reward_fn], args=args, train_dataset=train_rows,
                                  processing_class=tokenizer, callbacks=[log_callback(log_path)])
        if not progress:
            trainer.remove_callback(PrinterCallback)
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    finally:
        if own:
            evaluator.close()
        if constraint is not None:
            constraint.close()
    model_dir = models.save(trainer.model, tokenizer, out / "model")
    return RLRun(out, model_dir, trainer.state.global_step, _step_of(resume) if resume else None, read_log(log_path))
