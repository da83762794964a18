"""Commands of the learning stages: `dataset build|stats`, `sft`, `attempts` and `rl`.

Their settings are DatasetConfig's, SFTConfig's and RLConfig's fields
(dragonlab.learn.dataset_config, .sft, .rl): one flag each, with the config's default and help.
`attempts` has no config: its flags are its own.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dragonlab.cli.options import Command, UsageError, command, config_from, given, number, require

DATA_HELP = "a directory written by `dataset build`"


def _is_main() -> bool:
    """Under `accelerate launch` only the main process prints the summary."""
    from dragonlab.core.rundir import is_main

    return is_main()


# --- dataset ---------------------------------------------------------------------------------------

def add_dataset(sub, name: str, help: str):
    from dragonlab.learn.dataset_config import DatasetConfig

    ds = command(sub, name, help)
    dsub = ds.add_subparsers(title="dataset commands", metavar="ACTION")
    c = command(dsub, "build", "prompt/completion examples split by workload, saved as a DatasetDict",
                configs=[DatasetConfig],
                description="Construction (kernel -> one of its top-k scripts) and refinement (kernel + script "
                            "-> a script faster by the margin) examples from the ok records, split by workload "
                            "key, written atomically to a new directory with a dataset card. The splits are the "
                            "benchmark's when the records ship a benchmark.json (or --benchmark names one).")
    c.add_argument("--records", nargs="+", type=Path, required=True, help="record stores or MetaSchedule databases")
    c.add_argument("--out", type=Path, required=True, help="new directory for the dataset")
    c.add_argument("--no-benchmark", action="store_true", help="split by hash even if the records ship a benchmark")
    c.set_defaults(run=dataset_build)
    c = command(dsub, "stats", "examples and token lengths (mean/max) per split and task")
    c.add_argument("path", type=Path, help=DATA_HELP)
    c.set_defaults(run=dataset_stats)
    ds.set_defaults(run=lambda a: ds.print_help() or 2)


def dataset_build(args) -> int:
    from dragonlab.learn.dataset import build_dataset, format_summary, summary
    from dragonlab.learn.dataset_config import DatasetConfig

    config = config_from(DatasetConfig, args, benchmark=_benchmark(args))
    start = time.monotonic()
    built = build_dataset(args.records, args.out, config)
    total = sum(len(rows) for rows in built.examples.values())
    print(format_summary(summary(built.examples)))
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(built.skipped.items())) or "none"
    print(f"{total} examples from {len(built.workloads)} workloads in {time.monotonic() - start:.1f} s "
          f"(records not used: {skipped}) -> {args.out}")
    return 0


def _benchmark(args) -> str | None:
    """The benchmark file to split by: --benchmark, else the one shipped beside the records."""
    from dragonlab.search.benchmark import find, load

    if args.no_benchmark:
        if args.benchmark:
            raise UsageError("--benchmark and --no-benchmark exclude each other")
        return None
    path = args.benchmark or next((p for p in map(find, args.records) if p), None)
    if path is None:
        return None
    if given(args) & {"holdout_family", "validation", "test"}:
        if args.benchmark:
            raise UsageError("--benchmark fixes the splits: leave out --holdout-family, --validation and --test")
        return None  # the user asked for hashed splits of a corpus that ships a benchmark
    load(path)  # a malformed file fails here, naming the field, before any work
    print(f"splits: the benchmark {path} (--no-benchmark to split by hash)")
    return str(path)


def dataset_stats(args) -> int:
    from dragonlab.learn.dataset import format_summary, load, summary

    print(format_summary(summary(load(args.path)[0])))
    return 0


# --- sft and attempts ------------------------------------------------------------------------------

def add_sft(sub, name: str, help: str):
    from dragonlab.learn.models import PRESETS
    from dragonlab.learn.sft import SFTConfig

    c = command(sub, name, help, configs=[SFTConfig],
                description=f"Fine-tune a preset ({', '.join(PRESETS)}) or a local "
                            "Hugging Face checkpoint (with LoRA) with trl's SFTTrainer, loss on completions only. "
                            "Rerunning with the same settings resumes from the last checkpoint.")
    c.add_argument("--data", type=Path, required=True, help=DATA_HELP)
    c.add_argument("--out", type=Path, required=True, help="run directory (new, or the same run to resume)")
    c.set_defaults(run=sft)


def sft(args) -> int:
    from dragonlab.learn.sft import SFTConfig, train

    config = config_from(SFTConfig, args)
    start = time.monotonic()
    run = train(args.data, args.out, config)
    losses = [d["loss"] for d in run.log if "loss" in d]
    resumed = f", resumed from step {run.resumed_from}" if run.resumed_from else ""
    if not _is_main():
        return 0
    print(f"trained {config.preset} for {run.steps} steps in {time.monotonic() - start:.0f} s{resumed}; "
          f"final loss {losses[-1] if losses else float('nan'):.3f} -> {run.model_dir}")
    return 0


def add_attempts(sub, name: str, help: str):
    c = command(sub, name, help,
                description="Generate N scripts per example of a split, evaluate each one, append them to --out "
                            "as JSON lines (a rerun resumes), and print per-task correctness with the stage where "
                            "the failures stopped.")
    c.add_argument("--model", type=Path, required=True, help="a model directory (sft's OUT/model or any checkpoint)")
    c.add_argument("--data", type=Path, required=True, help=DATA_HELP)
    c.add_argument("--split", default="test", help="the dataset split")
    c.add_argument("--n", type=int, default=4, help="attempts per example")
    c.add_argument("--temperature", type=number(">= 0"), default=0.8, help="0 = greedy")
    c.add_argument("--limit", type=int, default=None, help="only the first N examples")
    c.add_argument("--per-workload", type=int, default=None, metavar="R",
                   help="only one construction prompt per workload and its first R refinement prompts, as the "
                        "report takes them (default: every example)")
    c.add_argument("--max-new-tokens", type=int, default=768, help="tokens per script, at most")
    c.add_argument("--out", type=Path, required=True, help="attempts file (JSON lines; appended)")
    c.add_argument("--seed", type=int, default=0, help="sampling seed")
    c.add_argument("--constrained", action="store_true",
                   help="constrained decoding: every script decodes and applies (docs/constrained.md)")
    c.set_defaults(run=attempts)


def attempts(args) -> int:
    import torch

    from dragonlab.evaluation.evaluate import Evaluator
    from dragonlab.learn import dataset, models
    from dragonlab.learn.attempts import format_summary, sample_and_evaluate, summary

    require("--n", args.n, "> 0")
    if args.per_workload is not None:
        require("--per-workload", args.per_workload, ">= 0")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dsd, workloads = dataset.load(args.data)
    model, tokenizer = models.load(args.model)
    with Evaluator(dataset.target_of(dsd, [args.split])) as evaluator:
        judged = sample_and_evaluate(model, tokenizer, evaluator, dsd, workloads, split=args.split, n=args.n,
                                     temperature=args.temperature, limit=args.limit,
                                     max_new_tokens=args.max_new_tokens, out=args.out, seed=args.seed,
                                     constrained=args.constrained, refinement_per_workload=args.per_workload)
    print(format_summary(summary(judged)))
    return 0


# --- rl --------------------------------------------------------------------------------------------

def add_rl(sub, name: str, help: str):
    from dragonlab.evaluation.reward import RewardConfig
    from dragonlab.learn.rl import RLConfig

    c = command(sub, name, help, configs=[RLConfig, RewardConfig],
                description="Reinforcement learning with trl's GRPOTrainer: scripts sampled in groups, judged by "
                            "the evaluator, rewarded by RewardConfig (correctness first, a latency bonus only for "
                            "correct kernels). Rerunning the same command resumes.")
    c.add_argument("--from", dest="source", type=Path, required=True, help="an SFT run directory or a model directory")
    c.add_argument("--data", type=Path, required=True, help=DATA_HELP)
    c.add_argument("--out", type=Path, required=True, help="run directory (new, or the same run to resume)")
    c.set_defaults(run=rl)


def rl(args) -> int:
    from dragonlab.evaluation.reward import RewardConfig
    from dragonlab.learn.rl import RLConfig, train

    config = config_from(RLConfig, args, reward=config_from(RewardConfig, args))
    start = time.monotonic()
    run = train(args.source, args.data, args.out, config)
    rewards = [d["reward"] for d in run.log if "reward" in d]
    resumed = f", resumed from step {run.resumed_from}" if run.resumed_from else ""
    tail = rewards[-10:]
    if not _is_main():
        return 0
    print(f"GRPO for {run.steps} steps in {time.monotonic() - start:.0f} s{resumed}; mean reward of the last "
          f"{len(tail)} steps {sum(tail) / max(1, len(tail)):.3f} -> {run.model_dir}")
    return 0


COMMANDS = [
    Command("dataset", "build construction and refinement datasets from search records", add_dataset),
    Command("sft", "supervised fine-tuning on a dataset's construction and refinement examples", add_sft),
    Command("attempts", "a model's attempts at a dataset split, judged by the evaluator", add_attempts),
    Command("rl", "GRPO with the shaped reward, from an SFT run", add_rl),
]
