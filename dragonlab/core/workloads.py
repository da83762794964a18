"""Workloads: the tensor programs that MetaSchedule searches schedules for, and the named suites.

A `Workload` (`dragonlab.core.workload`) is an IRModule with a single "main" PrimFunc, how it was
made and how much work one run does; its `key` is the structural hash MetaSchedule's databases
write. Workloads come from three places: op-family generators (`matmul(m=64, n=64, k=64)`) and
seeded samplers that draw realistic shapes for each family (`dragonlab.core.families`), and
MetaSchedule task extraction from small PyTorch networks (`dragonlab.core.networks`). Named
suites (`quick`, `standard`, `paper`) bundle them; `lookup` and `describe` work on any list.

Importable from here too, as before the split: `Workload`, `WorkloadFormatError`, `GENERATORS`,
`FAMILIES`, `SAMPLERS`, `sample`, the generators the quick suite uses, `MODELS` and
`extract_model_workloads`.
"""

from __future__ import annotations

import random
from typing import Iterator

from dragonlab.core.errors import InputError
from dragonlab.core.families import (FAMILIES, GENERATORS, SAMPLERS, batch_matmul, conv2d_nchw, conv2d_nhwc,
                                     dense_bias_act, depthwise_conv2d, elementwise_fusion, layernorm, matmul,
                                     pool2d, reduce_row, rmsnorm, sample, softmax, transpose_fusion)
from dragonlab.core.networks import MODELS, extract_model_workloads  # noqa: F401  (re-exported)
from dragonlab.core.workload import Workload, WorkloadFormatError  # noqa: F401  (re-exported)


def _quick() -> list[Workload]:
    # Small enough that a candidate runs in microseconds, so tuning one takes seconds on 2 cores.
    # The first workload of each family comes first (tests pick it); then two more shapes per
    # family, so that a held-out workload is mostly an unseen shape of a family seen in training,
    # as in the paper's dataset, rather than an op whose blocks the model never saw.
    return [
        matmul(m=64, n=64, k=64),
        matmul(m=32, n=32, k=32, dtype="float16", accum="float32"),  # fp16 is slow on CPU: keep it tiny
        batch_matmul(b=4, m=32, n=32, k=32),
        dense_bias_act(m=8, n=64, k=64, act="gelu"),
        conv2d_nchw(n=1, c=16, h=14, w=14, f=16, kernel=3, stride=1, pad=1),
        conv2d_nhwc(n=1, c=16, h=14, w=14, f=32, kernel=3, stride=2, pad=1),
        depthwise_conv2d(n=1, c=32, h=14, w=14, kernel=3, stride=1, pad=1),
        pool2d(n=1, c=16, h=16, w=16, kernel=2, stride=2, pool="max"),
        softmax(m=32, n=64),
        layernorm(m=32, n=64),
        rmsnorm(m=32, n=64),
        reduce_row(m=64, n=128, op="sum"),
        elementwise_fusion(m=64, n=64, ops="add-mul-relu"),
        transpose_fusion(b=4, m=32, n=64, ops="add"),
        # More shapes of the same families.
        matmul(m=32, n=64, k=128),
        matmul(m=128, n=32, k=64),
        matmul(m=16, n=128, k=32),
        matmul(m=16, n=32, k=64, dtype="float16", accum="float32"),
        batch_matmul(b=2, m=16, n=64, k=32),
        batch_matmul(b=8, m=32, n=16, k=64),
        dense_bias_act(m=16, n=32, k=64, act="gelu"),
        dense_bias_act(m=32, n=64, k=32, act="gelu"),
        conv2d_nchw(n=1, c=8, h=16, w=16, f=16, kernel=3, stride=1, pad=1),
        conv2d_nchw(n=1, c=32, h=8, w=8, f=32, kernel=3, stride=2, pad=1),
        conv2d_nhwc(n=1, c=8, h=16, w=16, f=16, kernel=3, stride=1, pad=1),
        conv2d_nhwc(n=1, c=32, h=8, w=8, f=16, kernel=3, stride=2, pad=1),
        depthwise_conv2d(n=1, c=16, h=16, w=16, kernel=3, stride=1, pad=1),
        depthwise_conv2d(n=1, c=64, h=8, w=8, kernel=3, stride=2, pad=1),
        pool2d(n=1, c=32, h=8, w=8, kernel=2, stride=2, pool="max"),
        pool2d(n=2, c=8, h=16, w=16, kernel=2, stride=2, pool="max"),
        softmax(m=16, n=128),
        softmax(m=64, n=32),
        layernorm(m=16, n=128),
        layernorm(m=64, n=32),
        rmsnorm(m=16, n=128),
        rmsnorm(m=64, n=32),
        reduce_row(m=32, n=256, op="sum"),
        reduce_row(m=128, n=64, op="sum"),
        elementwise_fusion(m=32, n=128, ops="add-mul-relu"),
        elementwise_fusion(m=128, n=32, ops="add-mul-relu"),
        transpose_fusion(b=2, m=64, n=32, ops="add"),
        transpose_fusion(b=8, m=16, n=32, ops="add"),
    ]


# The standard suite: this many shapes of every generator family, each at most this much work
# (float16 counted FLOAT16_COST times: x86 CPUs convert every element to float32 and back), plus
# every task of these networks that random inputs can run.
STANDARD_SHAPES = 16
STANDARD_MAX_WORK = 1 << 27  # 134 MFLOP: an unscheduled run well under a second on one core
FLOAT16_COST = 16  # measured: a float16 rmsnorm ran at 0.14 GFLOP/s where float32 runs above 2
STANDARD_MODELS = ("resnet", "mobilenet", "transformer_block")
PAPER_SIZE = 54_116  # the number of workloads in the paper's dataset
SUITE_NAMES = ("quick", "standard", "paper")


def work_of(w: Workload) -> int:
    return w.flops * (FLOAT16_COST if w.dtype == "float16" else 1)


def has_index_inputs(w: Workload) -> bool:
    """An integer input (a gather's indices): random inputs index out of bounds, so no runner can
    time it, and the evaluator cannot check it."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    return any("int" in str(a.dtype) for a in ArgInfo.from_prim_func(w.mod["main"])[:-1])


def _standard(seed: int) -> Iterator[Workload]:
    """STANDARD_SHAPES shapes per family, drawn per family from its own stream, then the networks."""
    seen: set[str] = set()
    for family in FAMILIES:
        rng = random.Random(f"standard/{seed}/{family}")
        found, draws = 0, 0
        while found < STANDARD_SHAPES:
            draws += 1
            if draws > 10_000:
                raise RuntimeError(f"suite 'standard': family {family} yields only {found} shapes under the cap")
            w = sample(family, rng)
            if work_of(w) > STANDARD_MAX_WORK or w.key in seen:
                continue
            seen.add(w.key)
            found += 1
            yield w
    for model in STANDARD_MODELS:
        for w in extract_model_workloads(model):
            if has_index_inputs(w):
                continue
            if w.key not in seen:  # a task equal to another (the hash ignores names) is tuned once
                seen.add(w.key)
                yield w


def _paper(seed: int) -> Iterator[Workload]:
    """PAPER_SIZE workloads from one stream over all families, any size."""
    rng = random.Random(seed)
    seen_params, seen_keys = set(), set()
    misses = 0
    while len(seen_keys) < PAPER_SIZE:
        family = FAMILIES[rng.randrange(len(FAMILIES))]
        kwargs = SAMPLERS[family](rng)
        # Equal params give equal modules: skip them before paying for create_prim_func.
        signature = (family, tuple(sorted(kwargs.items())))
        w = None if signature in seen_params else GENERATORS[family](**kwargs)
        seen_params.add(signature)
        if w is None or w.key in seen_keys:
            misses += 1
            if misses > 100_000:  # the shape pools are exhausted; fail rather than spin
                raise RuntimeError(f"suite 'paper': shape pools yield only {len(seen_keys)} distinct workloads")
            continue
        misses = 0
        seen_keys.add(w.key)
        yield w


def iter_suite(name: str, seed: int = 0) -> Iterator[Workload]:
    """Stream a suite's workloads in order, distinct by key; deterministic for (name, seed)."""
    if name == "quick":
        yield from _quick()
    elif name == "standard":
        yield from _standard(seed)
    elif name == "paper":
        yield from _paper(seed)
    else:
        raise InputError(f"unknown suite {name!r}; known suites: {', '.join(SUITE_NAMES)}")


def suite(name: str, *, seed: int = 0) -> list[Workload]:
    return list(iter_suite(name, seed))


def first_of_each_family(name: str = "quick", *, seed: int = 0) -> dict[str, Workload]:
    """{family: its first workload in the suite}, in the order the families first appear (the
    quick suite's smallest shapes: the examples of the tests, benchmarks and lessons)."""
    firsts: dict[str, Workload] = {}
    for w in iter_suite(name, seed):
        firsts.setdefault(w.family, w)
    return firsts


def lookup(key_or_name: str, workloads: list[Workload]) -> Workload:
    """The workload whose key or name is `key_or_name`."""
    for w in workloads:
        if key_or_name in (w.key, w.name):
            return w
    raise InputError(f"no workload with key or name {key_or_name!r} among {len(workloads)}")


def describe(w: Workload) -> str:
    weight = f" x{w.weight}" if w.weight != 1 else ""
    return f"{w.name} [{w.family}, {w.dtype}] {w.flops / 1e6:.3g} MFLOP{weight} key={w.key}"
