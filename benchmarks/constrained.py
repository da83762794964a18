"""Generation speed with and without constrained decoding, measured in the same run.

    .venv/bin/python benchmarks/constrained.py --model runs/demo/sft/model --data runs/demo/dataset

Three runs per decoding mode on the same prompts and batches: the plain model; the model with
`dragonlab.learn.constrain.ScriptConstraint` as a logits processor (its worker process is started
before the clock starts); and the plain model forced to write exactly what the constrained run
wrote (a processor that leaves only the recorded token, which costs nothing). Tokens are
generated tokens up to and including the end-of-sequence token.

Tokens per second of the plain and constrained runs compare different texts: constrained
scripts are often much shorter, and a batch's prompt pass (prefill) weighs more in a short
generation. The slowdown that isolates what the constraint costs is the constrained run's time
over the forced run's: same tokens, same batches, same prefill. Greedy decoding (the first
legal token is taken) and sampling (drawn by rejection from the legal tokens) are measured
separately. One torch thread.
"""

import argparse
import os
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LogitsProcessorList  # noqa: E402

from dragonlab.learn import dataset, models  # noqa: E402
from dragonlab.learn.constrain import for_rows  # noqa: E402
import fair  # noqa: E402  (benchmarks/fair.py: the machine and its load first)


class _Force:
    """A logits processor that leaves only the recorded next token of each row."""

    def __init__(self, ids, prompt_len: int):
        self.ids, self.prompt_len = ids, prompt_len

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_len
        forced = torch.full_like(scores, -float("inf"))
        forced[torch.arange(scores.shape[0]), self.ids[:, step]] = 0.0
        return forced


def run(model, tokenizer, prompts: list[str], *, batch: int, new_tokens: int, temperature: float,
        constraint=None, force=None) -> tuple[int, float, list]:
    """(generated tokens, seconds, each batch's new token ids) over all prompts. `force`: the
    token ids of an earlier run, batch by batch, to write again."""
    tokenizer.padding_side = "left"
    sampling = dict(do_sample=True, temperature=temperature) if temperature > 0 and force is None \
        else dict(do_sample=False)
    if constraint is not None:
        constraint.greedy, constraint.temperature = temperature <= 0, temperature or 1.0
    tokens, written, start = 0, [], time.perf_counter()
    torch.manual_seed(0)
    with torch.inference_mode():
        for b, i in enumerate(range(0, len(prompts), batch)):
            enc = tokenizer(prompts[i:i + batch], return_tensors="pt", padding=True)
            prompt_len = enc["input_ids"].shape[1]
            processors = [constraint] if constraint is not None else \
                [_Force(force[b], prompt_len)] if force is not None else []
            limit = force[b].shape[1] if force is not None else new_tokens
            out = model.generate(**enc, max_new_tokens=limit, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id,
                                 logits_processor=LogitsProcessorList(processors), **sampling)
            new = out[:, prompt_len:]
            written.append(new)
            for row in new.tolist():
                end = row.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in row else len(row)
                tokens += end
            if constraint is not None:
                constraint.finish(new)
    return tokens, time.perf_counter() - start, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model directory (an SFT run's model/)")
    parser.add_argument("--data", required=True, help="a dataset directory (dataset build)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=8, help="prompts")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=384)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.8])
    fair.add_load_argument(parser)
    args = parser.parse_args()
    fair.machine(args.allow_contended)

    torch.set_num_threads(1)
    dsd, workloads = dataset.load(args.data)
    rows = dsd[args.split].to_list()[:args.limit]
    prompts = [r["prompt"] for r in rows]
    model, tokenizer = models.load(args.model)
    model.eval()
    print(f"{args.model}: {len(prompts)} {args.split} prompts, batches of {args.batch}, "
          f"at most {args.new_tokens} new tokens")
    print(f"{'decoding':<10}{'plain tok/s':>12}{'constrained tok/s':>19}{'forced tok/s':>14}"
          f"{'slowdown, same tokens':>23}  tokens (plain / constrained), constrained endings")
    for temperature in args.temperatures:
        plain_tokens, plain_seconds, _ = run(model, tokenizer, prompts, batch=args.batch,
                                             new_tokens=args.new_tokens, temperature=temperature)
        with for_rows(tokenizer, rows, workloads) as constraint:
            constraint.replayer.facts(workloads[rows[0]["workload"]].mod, [[], []])  # start the worker first
            tokens, seconds, written = run(model, tokenizer, prompts, batch=args.batch, new_tokens=args.new_tokens,
                                           temperature=temperature, constraint=constraint)
            endings = dict(constraint.endings)
        forced_tokens, forced_seconds, again = run(model, tokenizer, prompts, batch=args.batch,
                                                   new_tokens=args.new_tokens, temperature=temperature, force=written)
        assert all(torch.equal(a, b) for a, b in zip(written, again)), "the forced run wrote other tokens"
        name = "greedy" if temperature <= 0 else f"T={temperature:g}"
        print(f"{name:<10}{plain_tokens / plain_seconds:>12.1f}{tokens / seconds:>19.1f}"
              f"{forced_tokens / forced_seconds:>14.1f}{seconds / forced_seconds:>22.2f}x  "
              f"{plain_tokens} / {tokens}, {endings}")


if __name__ == "__main__":
    main()
