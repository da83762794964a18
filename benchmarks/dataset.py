"""Dataset building: how long it takes per 10,000 records, and how long each prompt form is.

    .venv/bin/python benchmarks/dataset.py [--records runs/demo/records ...] [--standard 120]

1. **Prompt forms.** The kernel of every quick-suite workload and of the first `--standard`
   workloads of the standard suite, as TVMScript (`mod["main"].script()`) and in the compact
   form: characters and whitespace tokens (mean / max), and byte-level BPE tokens. One BPE
   tokenizer per form (`tokenizers`, ByteLevel, `--vocab` tokens) is trained on the records'
   scripts plus the kernels of half of the workloads, and counts the kernels of the other half,
   so that it cannot have memorised the kernels it counts.
2. **Build time.** `dataset.build` and `dataset.save` on the real records given (every record
   is a real measurement; nothing is replicated), timed by stage. The per-10k figure is the
   measured rate extrapolated linearly and is labelled so: the work per record (to_plain,
   encode, decode) is linear, while pair sampling grows with the square of the candidates per
   workload (bounded by the candidates a search keeps).

Without `--records` it uses `runs/demo/records` (`make demo`) when present, otherwise it
collects 3 quick workloads x 16 trials into a temporary store first (a few minutes).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from dragonlab.learn import dataset
from dragonlab.learn.dataset_config import DatasetConfig
from dragonlab.learn.prompts import PROMPT_FORMS, kernel_text
from dragonlab.core.workloads import first_of_each_family, iter_suite, suite
import fair  # noqa: E402  (benchmarks/fair.py: the machine and its load first)


def bpe_counts(train_texts: list[str], count_texts: list[str], vocab: int) -> list[int]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train_texts, trainer)
    return [len(e.ids) for e in tok.encode_batch(count_texts)]


def prompt_forms(scripts: list[str], standard: int, vocab: int) -> None:
    workloads = suite("quick") + list(itertools.islice(iter_suite("standard"), standard))
    print(f"\nkernel text per workload: {len(workloads)} workloads (quick + first {standard} of standard); "
          f"BPE: vocabulary {vocab}, trained on {len(scripts)} scripts + the kernels of the even-numbered "
          f"workloads, counted on the odd-numbered ones")
    print(f"{'form':10s} {'chars mean':>10s} {'max':>6s} {'ws tokens mean':>14s} {'max':>5s} "
          f"{'BPE tokens mean':>15s} {'max':>5s}")
    results = {}
    for form in PROMPT_FORMS:
        texts = [kernel_text(w, form) for w in workloads]
        bpe = bpe_counts(scripts + texts[0::2], texts[1::2], vocab)
        ws = [dataset.tokens(t) for t in texts]
        results[form] = (statistics.fmean(ws), statistics.fmean(bpe))
        print(f"{form:10s} {statistics.fmean(map(len, texts)):10.0f} {max(map(len, texts)):6d} "
              f"{statistics.fmean(ws):14.1f} {max(ws):5d} {statistics.fmean(bpe):15.1f} {max(bpe):5d}")
    (ws_c, bpe_c), (ws_t, bpe_t) = results["compact"], results["tvmscript"]
    print(f"compact / tvmscript: whitespace tokens {ws_c / ws_t:.2f}, BPE tokens {bpe_c / bpe_t:.2f}")


def build_time(paths: list[Path]) -> None:
    start = time.perf_counter()
    workloads, records, sources = dataset.load_records(paths)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    built = dataset.build(workloads, records, DatasetConfig(), sources=sources)
    build_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as d:
        start = time.perf_counter()
        dataset.save(built, Path(d) / "ds")
        save_s = time.perf_counter() - start
    n = len(records)
    examples = sum(len(rows) for rows in built.examples.values())
    total = load_s + build_s + save_s
    print(f"\nbuild on {n} real records ({len(workloads)} workloads, {built.budget.get('median')} candidates per "
          f"workload (median)): {examples} examples")
    print(f"  load {load_s:.2f} s, build {build_s:.2f} s (to_plain, encode, round-trip check, pairs, prompts), "
          f"save {save_s:.2f} s (DatasetDict + Parquet + card): {total:.2f} s")
    print(f"  {n / (load_s + build_s):.0f} records/s for load + build ({n / build_s:.0f} records/s for the build "
          f"step alone; {n / total:.0f} records/s end to end at this size)")
    print(f"  per 10,000 records, EXTRAPOLATED linearly from these {n} (not measured at that size): load + build "
          f"{10_000 * (load_s + build_s) / n:.1f} s; save measured here at {save_s:.1f} s for {examples} examples, "
          f"mostly a fixed cost")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", nargs="+", type=Path, default=None, help="record stores or MetaSchedule databases")
    p.add_argument("--standard", type=int, default=120, help="standard-suite workloads in the prompt-form comparison")
    p.add_argument("--vocab", type=int, default=1000, help="BPE vocabulary size")
    fair.add_load_argument(p)
    args = p.parse_args()
    fair.machine(args.allow_contended)
    paths = args.records
    tmp = None
    if paths is None:
        demo = Path("runs/demo/records")
        if demo.is_dir():
            paths = [demo]
        else:
            from dragonlab.search.collect import collect
            from dragonlab.search.config import CollectConfig
            from dragonlab.search.records import RecordStore
            from dragonlab.core.targets import get_target

            tmp = tempfile.TemporaryDirectory()
            quick = first_of_each_family("quick")
            picks = [quick[f] for f in ("matmul", "softmax", "conv2d_nchw")]
            print(f"no --records and no {demo}: collecting {len(picks)} quick workloads x 16 trials first", flush=True)
            collect(picks, get_target("cpu"), RecordStore(tmp.name, create=True), CollectConfig(trials=16),
                    progress=False)
            paths = [Path(tmp.name)]
    build_time(paths)
    workloads, records, _ = dataset.load_records(paths)
    scripts = list(dataset.scripts_by_group(workloads, records).values())
    prompt_forms([s.text for group in scripts for s in group], args.standard, args.vocab)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
