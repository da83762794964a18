"""A small corpus of real MetaSchedule traces for the codec's tests and benchmark.

`build()` gives MetaSchedule's design spaces for six operator families on llvm and cuda (plus an
fp16 tensor-core matmul on cuda) and postprocessed samples of them; `exotic()` gives hand-written
schedules with the primitives MetaSchedule rarely emits. Each entry is a `Sample` holding the
workload and the `Schedule`, so callers can encode its trace and compare modules. Nothing here
measures anything, and the corpus is deterministic for a given `seed`.
"""

from __future__ import annotations

from dataclasses import dataclass

import tvm
from tvm import te, topi
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import Trace

from dragonlab.search import explore

CPU = {"kind": "llvm", "num-cores": 2}
CUDA = {"kind": "cuda", "arch": "sm_80", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024,
        "thread_warp_size": 32, "registers_per_block": 65536, "max_num_threads": 1024, "host": {"kind": "llvm"}}


def _module(outs) -> tvm.IRModule:
    return tvm.IRModule({"main": te.create_prim_func(outs)})


def matmul(n=128, dtype="float32", out_dtype="float32"):
    a = te.placeholder((n, n), dtype, name="A")
    b = te.placeholder((n, n), dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k].astype(out_dtype) * b[k, j].astype(out_dtype), axis=k), name="C")
    return _module([a, b, c])


def batch_matmul(b=4, n=64):
    x = te.placeholder((b, n, n), name="X")
    y = te.placeholder((b, n, n), name="Y")
    return _module([x, y, topi.nn.batch_matmul(x, y, transpose_b=False)])


def conv2d():
    data = te.placeholder((1, 16, 14, 14), name="data")
    weight = te.placeholder((32, 16, 3, 3), name="weight")
    return _module([data, weight, topi.nn.conv2d_nchw(data, weight, 1, 1, 1)])


def softmax():
    x = te.placeholder((64, 128), name="x")
    return _module([x, topi.nn.softmax(x)])


def layernorm():
    x = te.placeholder((32, 256), name="x")
    gamma = te.placeholder((256,), name="gamma")
    beta = te.placeholder((256,), name="beta")
    return _module([x, gamma, beta, topi.nn.layer_norm(x, gamma, beta, axis=[1])])


def row_sum():
    x = te.placeholder((128, 512), name="x")
    k = te.reduce_axis((0, 512), name="k")
    return _module([x, te.compute((128,), lambda i: te.sum(te.exp(x[i, k]), axis=k), name="S")])


FAMILIES = {"matmul": matmul, "batch_matmul": batch_matmul, "conv2d": conv2d, "softmax": softmax,
            "layernorm": layernorm, "row_sum": row_sum}


@dataclass(frozen=True)
class Sample:
    family: str
    target: str  # "llvm" or "cuda"
    source: str  # "space", "post" (a space sampled and postprocessed) or "exotic"
    mod: tvm.IRModule
    sch: Schedule
    index: int = 0  # which space of the family, or which hand-written schedule

    @property
    def trace(self) -> Trace:
        return self.sch.trace

    @property
    def name(self) -> str:
        return f"{self.family}-{self.target}-{self.source}-{self.index}"


def _postprocessed(ctx, mod, space: Schedule, seeds, want: int) -> list[Schedule]:
    """Up to `want` random samples of a design space that pass the postprocessors."""
    done = []
    for seed in seeds:
        if len(done) == want:
            break
        sch = explore.replay(ctx, mod, space, seed)
        if sch is not None:
            done.append(sch)
    return done


def build(families=tuple(FAMILIES), targets=("llvm", "cuda"), *, posts_per_space=1, tries=12,
          tensor_core=True, seed=1) -> list[Sample]:
    """Design spaces for every family and target, plus up to `posts_per_space` postprocessed samples
    per space (CUDA rejects most random samples in VerifyGPUCode, hence `tries`)."""
    samples = []
    jobs = [(f, t, FAMILIES[f]()) for t in targets for f in families]
    if tensor_core and "cuda" in targets:
        jobs.append(("matmul_fp16_tc", "cuda", matmul(128, "float16", "float32")))
    for family, target, mod in jobs:
        ctx = explore.tune_context(mod, CPU if target == "llvm" else CUDA)
        for k, space in enumerate(ctx.generate_design_space()):
            samples.append(Sample(family, target, "space", mod, space, k))
            seeds = range(seed + 1000 * k, seed + 1000 * k + tries)
            for sch in _postprocessed(ctx, mod, space, seeds, posts_per_space):
                samples.append(Sample(family, target, "post", mod, sch, k))
    return samples


def matmul_bias_relu(n=64):
    a = te.placeholder((n, n), name="A")
    b = te.placeholder((n, n), name="B")
    bias = te.placeholder((n,), name="bias")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    d = te.compute((n, n), lambda i, j: c[i, j] + bias[j], name="D")
    return _module([a, b, bias, te.compute((n, n), lambda i, j: te.max(d[i, j], 0.0), name="E")])


def _annotations(sch):
    from tvm import tirx

    block = sch.get_sblock("C")
    i, j, _ = sch.get_loops(block)
    sch.annotate(block, "flag", True)
    sch.annotate(block, "ratio", 0.5)
    sch.annotate(block, "f32", tirx.FloatImm("float32", 0.1))
    sch.annotate(block, "i64", tirx.IntImm("int64", 5))
    sch.annotate(i, "stages", [0, 1, 2])
    sch.annotate(j, "quote\"d \\ key", 'he said "hi"\n')
    sch.unannotate(j, "quote\"d \\ key")


def _layouts(sch):
    block = sch.get_sblock("C")
    sch.transform_layout(block, ("write", 0), lambda i, j: (i // 16, j, i % 16), pad_value=0.0)
    sch.transform_block_layout(sch.get_sblock("C"), lambda a, j, b, k: (j, a * 16 + b, k))


def _loops(sch):
    block = sch.get_sblock("C")
    sch.add_unit_loop(block)
    sch.reorder_block_iter_var(block, [1, 0, 2])
    sch.read_at(sch.get_loops(block)[2], block, 0, "shared")


def _partition(sch):
    i = sch.get_loops(sch.get_sblock("C"))[0]
    sch.sample_partitioned_tile(i, n=3, partition_pos=1, innerpart_factor=2)
    sch.loop_partition(i, [None, 16])


def _buffers(sch):
    block = sch.get_sblock("C")
    sch.reindex_cache_read(block, 0, "shared", lambda i, j, k: (i, k))
    sch.reindex_cache_write(sch.get_sblock("C"), 0, "local", lambda i, j, k: (i, j))
    sch.unsafe_hide_buffer_access(sch.get_sblock("C"), "read", [0])


def _epilogue(sch):
    sch.unsafe_set_dtype(sch.get_sblock("C"), 0, "float32")
    sch.get_output_blocks(sch.get_sblock("root"))
    sch.fuse_reduction_epilogue(sch.get_sblock("C"), sch.get_sblock("D"))


def _merge(sch):
    d, e = sch.get_loops(sch.get_sblock("D")), sch.get_loops(sch.get_sblock("E"))
    sch.merge(d[0], e[0])


def _two_stage(n=32):
    a = te.placeholder((n, n), name="A")
    b = te.compute((n, n), lambda i, j: a[i, j] * 2.0, name="B")
    return _module([a, te.compute((n, n), lambda i, j: b[i, j] + 1.0, name="C")])


def _resize():
    a = te.placeholder((1, 3, 40, 40), name="A")
    return _module([a, te.compute((1, 3, 80, 80), lambda n, c, i, j: a[n, c, i // 4 + j // 4, j // 2], name="B")])


def _access(sch):
    sch.annotate_buffer_access(sch.get_sblock("B"), 0, "read", lambda i, j: ((i - 1, i + 1), (j - 1, j + 1)))
    sch.unroll(sch.get_loops(sch.get_sblock("C"))[1])


def _cache_index(sch):
    sch.cache_index(sch.get_sblock("B"), "global")


def _write_at(sch):
    block = sch.get_sblock("C")
    sch.write_at(sch.get_loops(block)[0], block, 0, "local")


def _padding(sch):
    block = sch.get_sblock("pad_temp")
    sch.decompose_padding(block, sch.get_loops(block)[0])


def _einsum(sch):
    sch.pad_einsum(sch.get_sblock("C"), [64, 64, 64])


# Primitives that MetaSchedule's default rules rarely or never emit, applied by hand so that the
# codec is exercised on every attribute shape: (name, workload, schedule function).
EXOTIC = [
    ("annotations", lambda: matmul(64), _annotations),
    ("layouts", lambda: matmul(60), _layouts),
    ("loops", lambda: matmul(64), _loops),
    ("partition", lambda: matmul(64), _partition),
    ("buffers", lambda: matmul(64), _buffers),
    ("epilogue", matmul_bias_relu, _epilogue),
    ("merge", matmul_bias_relu, _merge),
    ("padding", conv2d, _padding),
    ("access", _two_stage, _access),
    ("cache_index", _resize, _cache_index),
    ("write_at", lambda: matmul(64), _write_at),
    ("einsum", lambda: matmul(60), _einsum),
]


def exotic() -> list[Sample]:
    samples = []
    for name, workload, schedule in EXOTIC:
        mod = workload()
        sch = Schedule(mod)
        schedule(sch)
        samples.append(Sample(name, "llvm", "exotic", mod, sch, len(samples)))
    return samples
