"""How compact and how fast the codec is, on real MetaSchedule traces.

    .venv/bin/python benchmarks/codec.py [--posts 3]

Builds design spaces and postprocessed samples for six operator families on llvm and cuda
(plus fp16 tensor cores on cuda), then prints, per target, the mean characters and
whitespace-separated tokens per trace of the script, of `Trace.as_python()` (lines joined with
"\\n") and of the compact JSON form, and the time to encode and to decode one trace.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


from dragonlab.testing import trace_corpus  # noqa: E402

from dragonlab.core import codec  # noqa: E402
import fair  # noqa: E402  (benchmarks/fair.py: the machine and its load first)


def p95(xs: list[float]) -> float:
    return sorted(xs)[int(0.95 * (len(xs) - 1))]


def timed(f, x, repeat: int = 5) -> float:
    """Best of `repeat` runs, in milliseconds (the machine is shared, so the minimum is the signal)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        f(x)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=3, help="postprocessed samples per design space")
    fair.add_load_argument(parser)
    args = parser.parse_args()
    fair.machine(args.allow_contended)
    start = time.perf_counter()
    samples = trace_corpus.build(posts_per_space=args.posts, tries=24)
    print(f"corpus: {len(samples)} traces in {time.perf_counter() - start:.0f} s")

    rows = {}
    for s in samples:
        plain = codec.to_plain(s.trace)
        script = codec.encode(s.trace)
        assert codec.decode(script) == plain, s.name
        forms = {"script": script, "as_python": "\n".join(s.trace.as_python(remove_postproc=False)),
                 "json": json.dumps(plain, separators=(",", ":"))}
        for group in (s.target, "all"):
            row = rows.setdefault(group, {"n": 0, "encode": [], "decode": [], **{k: [] for k in forms}})
            row["n"] += 1
            for name, text in forms.items():
                row[name].append((len(text), len(text.split())))
            row["encode"].append(timed(codec.encode, plain))
            row["decode"].append(timed(codec.decode, script))

    print(f"\n{'target':7} {'traces':>6} | {'chars: script':>13} {'as_python':>9} {'json':>7} "
          f"{'py/script':>9} {'json/script':>11} | {'tokens: script':>14} {'as_python':>9} {'json':>6} "
          f"{'py/script':>9} | {'mean of per-trace py/script':>27}")
    for group, row in rows.items():
        chars = {k: statistics.mean(c for c, _ in row[k]) for k in ("script", "as_python", "json")}
        tokens = {k: statistics.mean(t for _, t in row[k]) for k in ("script", "as_python", "json")}
        per_trace = statistics.mean(p[0] / s[0] for p, s in zip(row["as_python"], row["script"]))
        print(f"{group:7} {row['n']:6} | {chars['script']:13.0f} {chars['as_python']:9.0f} {chars['json']:7.0f} "
              f"{chars['as_python'] / chars['script']:9.2f} {chars['json'] / chars['script']:11.2f} | "
              f"{tokens['script']:14.0f} {tokens['as_python']:9.0f} {tokens['json']:6.0f} "
              f"{tokens['as_python'] / tokens['script']:9.2f} | {per_trace:27.2f}")
    print("\nms per trace (best of 5 runs each): mean / p95")
    for group, row in rows.items():
        print(f"{group:7} encode {statistics.mean(row['encode']):.2f} / {p95(row['encode']):.2f}   "
              f"decode {statistics.mean(row['decode']):.2f} / {p95(row['decode']):.2f}")


if __name__ == "__main__":
    main()
