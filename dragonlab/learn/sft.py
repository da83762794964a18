"""Supervised fine-tuning on construction and refinement examples, with trl's SFTTrainer.

    run = sft.train("runs/demo/dataset", "runs/demo/sft", SFTConfig(preset="scratch-small"))

The loss is on completions only (the script; the prompt names the task). Every `eval_steps`
the model writes one script for each of the first `eval_examples` validation examples, and the
evaluator judges them: the logged `correct` is per-attempt correctness, the paper's measure.

Output directory:

    run.json         the config of the run (a rerun must match it, or it is refused)
    tokenizer/       the BPE tokenizer of a scratch preset
    checkpoints/     Trainer checkpoints; a rerun resumes from the newest complete one
    log.jsonl        append-only: {"step", "loss", ...} and {"step", "eval": {...}} lines
    model/           the final model (full, or a LoRA adapter), written atomically

A checkpoint counts as complete once `trainer_state.json`, the last file the Trainer writes,
is in it; an incomplete one (a kill during the save) is removed before resuming. After a
resume the steps since the last checkpoint are trained and logged again: readers of
`log.jsonl` keep the last line per step (`read_log` does). `dragonlab.core.rundir` holds all this.

`accelerate launch` runs it on several processes (DDP; `configs/accelerate/`, `docs/scale.md`):
`batch_size` is the global batch, split evenly over the processes, so a config trains the same
way on one process or many; only the main process writes the run directory.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from dragonlab.core import fields
from dragonlab.core.errors import InputError
from dragonlab.core.jsonl import append_lines
from dragonlab.core.rundir import (REPORT_TO, claim, is_main, last_complete_checkpoint, log_callback, main_first,
                                   per_process, read_log, reporting, step_of, wait_for_everyone)

__all__ = ["SFTConfig", "SFTRun", "train", "read_log"]

SAMPLING = ("random", "group_by_length")


@dataclass(frozen=True)
class SFTConfig:
    preset: str = field(default="scratch-small", metadata={"help": "a preset of dragonlab.learn.models or a local checkpoint"})
    full_finetune: bool = field(default=False, metadata={
        "help": "train every weight, with no LoRA adapters (which a local checkpoint gets otherwise): how a "
                "scratch model pre-trained on design-space samples (dataset build --examples samples) "
                "continues on measured data"})
    max_steps: int | None = field(default=None, metadata={"help": "optimizer steps; None = the preset's",
                                                          "range": "> 0"})
    learning_rate: float | None = field(default=None, metadata={"help": "peak learning rate; None = the preset's",
                                                                "range": "> 0"})
    batch_size: int | None = field(default=None, metadata={"help": "examples per optimizer step, over all "
                                                                   "processes; None = the preset's", "range": "> 0"})
    micro_batch_size: int | None = field(default=None, metadata={
        "help": "examples per forward pass in each process, gradients accumulated over the rest of its share "
                "of the batch (the same step); None = the whole share. Padding is computed like any token: "
                "examples of mixed lengths train faster a few at a time", "range": "> 0"})
    train_workloads: int | None = field(default=None, metadata={
        "help": "train on the examples of this many train workloads, families taken in turn (a point of the "
                "scaling curve; docs/sft.md); None = all", "range": "> 0"})
    sampling: str | None = field(default=None, metadata={
        "help": "how batches are drawn: 'random', or 'group_by_length' (examples of similar length together: "
                "3% of a batch of the standard dataset is padding instead of 46%); None = the preset's",
        "choices": SAMPLING})
    max_length: int = field(default=2048, metadata={"help": "tokens of prompt + completion; longer ones are dropped"})
    warmup_ratio: float = field(default=0.05, metadata={"help": "share of steps with a rising learning rate",
                                                        "range": "[0, 1)"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay", "range": ">= 0"})
    save_steps: int = field(default=100, metadata={"help": "checkpoint every this many steps", "range": "> 0"})
    logging_steps: int = field(default=10, metadata={"help": "log the loss every this many steps", "range": "> 0"})
    eval_steps: int = field(default=0, metadata={"help": "judge validation attempts every this many steps; 0 = off",
                                                 "range": ">= 0"})
    eval_examples: int = field(default=16, metadata={"help": "validation examples judged at each evaluation",
                                                     "range": "> 0"})
    eval_split: str = field(default="validation", metadata={"help": "the split judged during training"})
    constrained_eval: bool = field(default=False, metadata={"help": "judge with constrained decoding (constrain.py)"})
    seed: int = field(default=0, metadata={"help": "seeds initialisation, shuffling and sampling", "range": ">= 0"})
    threads: int = field(default=1, metadata={"help": "torch threads: 1 is fastest when other jobs share the cores, "
                                                      "all of them when training runs alone", "range": "> 0"})
    report_to: str = field(default="none", metadata={"help": "also log the curves to: 'none' or 'tensorboard' "
                                                             "(event files under OUT/tensorboard)",
                                                             "choices": REPORT_TO})

    def __post_init__(self):
        fields.check(self)
        if self.max_length < 16:
            raise InputError(f"SFTConfig.max_length must be at least 16, got {self.max_length}")


@dataclass(frozen=True)
class SFTRun:
    out: Path
    model_dir: Path
    steps: int
    resumed_from: int | None  # the checkpoint step it resumed from
    log: list[dict]


def train(data: str | os.PathLike, out: str | os.PathLike, config: SFTConfig = SFTConfig(), *,
          progress: bool = True, evaluator=None) -> SFTRun:
    """Fine-tune (or resume fine-tuning) on the dataset at `data`, into the directory `out`."""
    import torch
    import trl
    from transformers import PreTrainedTokenizerFast, TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from dragonlab.core.progress import shown
    from dragonlab.learn import dataset, models

    torch.set_num_threads(config.threads)
    progress = shown(progress)
    out = Path(out)
    dsd, workloads = dataset.load(data)
    if "train" not in dsd:
        raise InputError(f"{data}: the dataset has no train split")
    preset = replace(models.get_preset(config.preset),
                     lora=models.lora_applied(config.preset, full_finetune=config.full_finetune))
    train = dsd["train"]
    if config.train_workloads is not None:
        try:
            train = dataset.spread_workloads(train, config.train_workloads, seed=config.seed)
        except InputError as e:
            raise InputError(f"{data}: SFTConfig.train_workloads: {e}") from None
    with main_first():
        claim(out, config, data)
    if (out / "model").is_dir():  # this run finished before: nothing to train
        log = read_log(out / "log.jsonl")
        return SFTRun(out, out / "model", max((d.get("step", 0) for d in log), default=0), None, log)

    train_rows = train.select_columns(["prompt", "completion"])
    if preset.source == "scratch":
        tok_dir = out / "tokenizer"
        with main_first():
            if not (tok_dir / "tokenizer.json").is_file():
                _train_tokenizer(tok_dir, train_rows, preset.vocab_size)
        tokenizer = PreTrainedTokenizerFast.from_pretrained(tok_dir)
        model = models.scratch_model(preset, tokenizer, max_length=config.max_length, seed=config.seed)
    else:
        model, tokenizer = models.pretrained(preset, progress=progress)

    # Examples longer than max_length are dropped rather than truncated: a cut script teaches
    # the model to stop mid-script.
    lengths = [len(tokenizer(r["prompt"] + r["completion"])["input_ids"]) + 1 for r in train_rows]
    keep = [i for i, n in enumerate(lengths) if n <= config.max_length]
    if not keep:
        raise InputError(f"{data}: every train example is longer than max_length={config.max_length} tokens "
                         f"(shortest: {min(lengths)})")
    train_rows = train_rows.select(keep)

    log_path = out / "log.jsonl"
    checkpoints = out / "checkpoints"
    with main_first():
        resume = last_complete_checkpoint(checkpoints)
    args = trainer_arguments(config, checkpoints, defaults=preset, progress=progress)

    class Judge(TrainerCallback):
        """Per-attempt correctness on validation examples, through the evaluator."""

        def __init__(self):
            self.evaluator = evaluator

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if config.eval_steps and state.is_world_process_zero and (
                    state.global_step % config.eval_steps == 0 or state.global_step == state.max_steps):
                self.judge(model, state.global_step)

        def judge(self, model, step):
            from dragonlab.evaluation.evaluate import Evaluator
            from dragonlab.learn.attempts import evaluate_attempts, summary
            from dragonlab.learn.constrain import for_rows

            if config.eval_split not in dsd:
                append_lines(log_path, [{"step": step, "eval": None, "reason": f"no {config.eval_split} split"}])
                return
            rows = [dict(r, index=i) for i, r in enumerate(dsd[config.eval_split])][:config.eval_examples]
            constraint = for_rows(tokenizer, rows, workloads) if config.constrained_eval else None
            try:
                scripts = models.generate(model, tokenizer, [r["prompt"] for r in rows], n=1, temperature=0,
                                          max_new_tokens=config.max_length // 2, constraint=constraint)
            finally:
                if constraint is not None:
                    constraint.close()
            if self.evaluator is None:
                self.evaluator = Evaluator(rows[0]["target"])
            attempts = evaluate_attempts(self.evaluator, workloads, rows, scripts, split=config.eval_split)
            append_lines(log_path, [{"step": step, "eval": summary(attempts)}])

    models.no_hub_telemetry()
    judge = Judge()
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=train_rows, processing_class=tokenizer,
                             callbacks=[log_callback(log_path), judge, *reporting(config.report_to, out)])
    if not progress:
        trainer.remove_callback(PrinterCallback)  # it prints every log line; log.jsonl has them
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    finally:
        if judge.evaluator is not None and evaluator is None:
            judge.evaluator.close()
    if is_main():
        models.save(trainer.model, tokenizer, out / "model")
    wait_for_everyone()
    return SFTRun(out, out / "model", trainer.state.global_step, step_of(resume) if resume else None,
                  read_log(log_path))


def trainer_arguments(config: SFTConfig, checkpoints: Path, *, defaults=None, processes: int | None = None,
                      progress: bool = True):
    """trl's SFTConfig for a run: settings the config leaves out come from `defaults` (a preset);
    the global batch is split over `processes` (default: this run's). `dragonlab campaign
    --dry-run` checks a campaign with it too."""
    import torch
    import trl

    def pick(name):
        value = getattr(config, name) if getattr(config, name) is not None else getattr(defaults, name, None)
        if value is None:
            raise InputError(f"SFTConfig.{name} is needed: neither the config nor a preset gives it")
        return value

    share = per_process(pick("batch_size"), "batch_size", processes)
    micro = config.micro_batch_size or share
    if share % micro:
        raise InputError(f"SFTConfig.micro_batch_size {micro} does not divide the {share} examples of each "
                         f"process's batch (batch_size {pick('batch_size')})")
    return trl.SFTConfig(
        output_dir=str(checkpoints), max_steps=pick("max_steps"),
        per_device_train_batch_size=micro, gradient_accumulation_steps=share // micro,
        learning_rate=pick("learning_rate"), lr_scheduler_type="cosine",
        train_sampling_strategy=config.sampling or getattr(defaults, "sampling", None) or "random",
        warmup_steps=config.warmup_ratio,
        weight_decay=config.weight_decay, logging_steps=config.logging_steps, save_steps=config.save_steps,
        save_total_limit=2, max_length=config.max_length, completion_only_loss=True, activation_checkpointing=False,
        use_cpu=not torch.cuda.is_available(), bf16=False, report_to="none", seed=config.seed,
        dataloader_num_workers=0, disable_tqdm=not progress, save_only_model=False)


def _train_tokenizer(tok_dir: Path, rows, vocab_size: int) -> None:
    """A scratch preset's BPE tokenizer, trained on the train split and saved atomically."""
    from dragonlab.learn import models

    texts = [t for row in rows for t in (row["prompt"], row["completion"])]
    tokenizer = models.train_tokenizer(texts, vocab_size)
    tokenizer.save_pretrained(str(tok_dir) + ".tmp")
    shutil.rmtree(tok_dir, ignore_errors=True)
    os.rename(str(tok_dir) + ".tmp", tok_dir)
