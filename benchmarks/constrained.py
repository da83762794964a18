"""Generation tokens per second with and without constrained decoding, measured in the same run.

    .venv/bin/python benchmarks/constrained.py --model runs/demo/sft/model --data runs/demo/dataset

Both sides call `model.generate` on the same prompts, batches and seed; the constrained side
adds `dragonlab.constrain.ScriptConstraint` as a logits processor (its worker process is started
before the clock starts). Tokens are generated tokens up to and including the end-of-sequence
token. Greedy decoding (the first legal token is taken) and sampling (legal tokens are checked
until they hold 99.9% of the probability) are measured separately. One torch thread.
"""

import argparse
import os
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LogitsProcessorList  # noqa: E402

from dragonlab import dataset, models  # noqa: E402
from dragonlab.constrain import for_rows  # noqa: E402


def run(model, tokenizer, prompts: list[str], *, batch: int, new_tokens: int, temperature: float,
        constraint=None) -> tuple[int, float]:
    """(generated tokens, seconds) over all prompts."""
    tokenizer.padding_side = "left"
    sampling = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
    if constraint is not None:
        constraint.greedy, constraint.temperature = temperature <= 0, temperature or 1.0
    processors = LogitsProcessorList([constraint] if constraint is not None else [])
    tokens, start = 0, time.perf_counter()
    torch.manual_seed(0)
    with torch.inference_mode():
        for i in range(0, len(prompts), batch):
            enc = tokenizer(prompts[i:i + batch], return_tensors="pt", padding=True)
            out = model.generate(**enc, max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id, logits_processor=processors, **sampling)
            new = out[:, enc["input_ids"].shape[1]:]
            for row in new.tolist():
                end = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
                tokens += end
            if constraint is not None:
                constraint.finish(new)
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model directory (an SFT run's model/)")
    parser.add_argument("--data", required=True, help="a dataset directory (dataset build)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=8, help="prompts")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=384)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    args = parser.parse_args()

    torch.set_num_threads(1)
    dsd, workloads = dataset.load(args.data)
    rows = dsd[args.split].to_list()[:args.limit]
    prompts = [r["prompt"] for r in rows]
    model, tokenizer = models.load(args.model)
    model.eval()
    print(f"{args.model}: {len(prompts)} {args.split} prompts, batches of {args.batch}, "
          f"at most {args.new_tokens} new tokens")
    print(f"{'decoding':<12}{'plain tok/s':>12}{'constrained tok/s':>19}{'slowdown':>10}  constrained endings")
    for temperature in args.temperatures:
        plain_tokens, plain_seconds = run(model, tokenizer, prompts, batch=args.batch, new_tokens=args.new_tokens,
                                          temperature=temperature)
        with for_rows(tokenizer, rows, workloads) as constraint:
            constraint.replayer.facts(workloads[rows[0]["workload"]].mod, [[], []])  # start the worker first
            tokens, seconds = run(model, tokenizer, prompts, batch=args.batch, new_tokens=args.new_tokens,
                                  temperature=temperature, constraint=constraint)
            endings = dict(constraint.endings)
        plain, constrained = plain_tokens / plain_seconds, tokens / seconds
        name = "greedy" if temperature <= 0 else f"T={temperature:g}"
        print(f"{name:<12}{plain:>12.1f}{constrained:>19.1f}{plain / constrained:>9.2f}x  {endings} "
              f"({plain_tokens} vs {tokens} tokens)")


if __name__ == "__main__":
    main()
