"""Training and generation tokens per second for each model preset, against plain baselines
measured in the same run.

    .venv/bin/python benchmarks/sft.py --data runs/demo/dataset [--presets scratch-tiny scratch-small smollm2-135m-lora]
    .venv/bin/python benchmarks/sft.py --data DATASET --sampling-epoch 30 [--presets scratch-small]

`--sampling-epoch N`: one epoch over the examples of N training workloads (`--train-workloads`),
once with batches drawn at random and once grouped by length: the same examples, each seen
once, so the two wall times are over equal work; prints both and their ratio.

Training: `dragonlab.learn.sft.train` (trl's SFTTrainer, loss on completions) for `--steps` steps,
against a plain torch loop (AdamW, the same model, batch size and examples, padded batches,
loss on every token) for as many steps. Tokens are the non-padding tokens of the batches.
Generation: `models.generate` with `--batch` prompts per batch (sampling, `--new-tokens` new
tokens at most), against the same prompts one at a time. Tokens are generated tokens (up to
and including the end-of-sequence token). One torch thread, as everywhere on these machines.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from dragonlab.learn import dataset, models  # noqa: E402
from dragonlab.learn.sft import SFTConfig, train  # noqa: E402
import fair  # noqa: E402  (benchmarks/fair.py: the machine and its load first)


def sft_rate(data: str, preset: str, steps: int, batch: int) -> tuple[float, object, object]:
    with tempfile.TemporaryDirectory() as tmp:
        run = train(data, f"{tmp}/run", SFTConfig(preset=preset, max_steps=steps, batch_size=batch,
                                                   logging_steps=steps, save_steps=10 * steps), progress=False)
        logged = next(d for d in run.log if "num_tokens" in d)
        runtime = next(d["train_runtime"] for d in run.log if "train_runtime" in d)
        model, tokenizer = models.load(run.model_dir, trainable=True)
    return logged["num_tokens"] / runtime, model, tokenizer


def plain_rate(model, tokenizer, texts: list[str], steps: int, batch: int) -> float:
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    tokens, start = 0, time.perf_counter()
    for step in range(steps):
        chunk = [texts[(step * batch + i) % len(texts)] for i in range(batch)]
        enc = tokenizer(chunk, return_tensors="pt", padding=True)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = model(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        tokens += int(enc["attention_mask"].sum())
    return tokens / (time.perf_counter() - start)


def generation_rate(model, tokenizer, prompts: list[str], batch: int, new_tokens: int) -> float:
    start = time.perf_counter()
    out = models.generate(model, tokenizer, prompts, temperature=1.0, max_new_tokens=new_tokens,
                          batch_size=batch, seed=0)
    seconds = time.perf_counter() - start
    generated = sum(min(new_tokens, len(tokenizer(s)["input_ids"]) + 1) for (s,) in out)
    return generated / seconds


def epoch_seconds(data: str, preset: str, workloads: int, batch: int, sampling: str) -> tuple[float, int]:
    """(training seconds, steps) of one epoch over the examples of `workloads` train workloads."""
    train_rows = dataset.spread_workloads(dataset.load(data)[0]["train"], workloads)
    steps = -(-len(train_rows) // batch)
    with tempfile.TemporaryDirectory() as tmp:
        run = train(data, f"{tmp}/run", SFTConfig(preset=preset, max_steps=steps, batch_size=batch, max_length=4096,
                                                   train_workloads=workloads, sampling=sampling,
                                                   logging_steps=steps, save_steps=10 * steps), progress=False)
    return next(d["train_runtime"] for d in run.log if "train_runtime" in d), steps


def sampling_epochs(args) -> int:
    for preset in args.presets:
        (grouped, steps), (random, _) = (epoch_seconds(args.data, preset, args.sampling_epoch, args.batch, s)
                                         for s in ("group_by_length", "random"))
        print(f"{preset:<18} one epoch of {args.sampling_epoch} workloads ({steps} steps of {args.batch}): "
              f"grouped by length {grouped:7.1f} s, random {random:7.1f} s: {random / grouped:.2f}x", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="runs/demo/dataset", help="a directory written by `dataset build`")
    p.add_argument("--presets", nargs="+", default=["scratch-tiny", "scratch-small", "smollm2-135m-lora"])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--sampling-epoch", type=int, default=None, metavar="N",
                   help="instead: one epoch of N workloads' examples, grouped by length against random batches")
    fair.add_load_argument(p)
    args = p.parse_args()
    fair.machine(args.allow_contended)
    torch.set_num_threads(1)
    if args.sampling_epoch:
        return sampling_epochs(args)
    dsd, _ = dataset.load(args.data)
    rows = dsd["train"].to_list()
    texts = [r["prompt"] + r["completion"] for r in rows]
    prompts = [r["prompt"] for r in rows[:args.batch * 2]]
    print(f"{len(rows)} train examples; {args.steps} steps of {args.batch}; generation of {len(prompts)} prompts, "
          f"at most {args.new_tokens} new tokens each")
    for preset in args.presets:
        ours, model, tokenizer = sft_rate(args.data, preset, args.steps, args.batch)
        base = plain_rate(model, tokenizer, texts, args.steps, args.batch)
        batched = generation_rate(model, tokenizer, prompts, args.batch, args.new_tokens)
        single = generation_rate(model, tokenizer, prompts, 1, args.new_tokens)
        print(f"{preset:<18} train {ours:8.0f} tokens/s (plain torch loop {base:8.0f}: {ours / base:.2f}x)   "
              f"generate {batched:7.0f} tokens/s at batch {args.batch} (batch 1: {single:6.0f}: "
              f"{batched / single:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
