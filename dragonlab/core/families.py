"""Op families: a generator per operator family, and a seeded sampler of realistic shapes for each.

A generator (`matmul(m=64, n=64, k=64)`) defines the op in TVM's tensor expressions and returns
its `Workload`, named after its params ("matmul_m64_n64_k64_float32"), every block named
deterministically: traces look blocks up by name, and the workload's key (the structural hash)
must not change between runs or releases, since shipped corpora join on it. `GENERATORS` maps
each family to its generator, `SAMPLERS` to a function that draws the generator's keyword
arguments from a `random.Random`; `sample` does both. The suites are in `dragonlab.core.workloads`.
"""

from __future__ import annotations

import math
import random
from typing import Callable

import tvm
from tvm import te, topi

from dragonlab.core.errors import InputError
from dragonlab.core.workload import Workload


def _workload(family: str, dtype: str, flops: int, args: list, **params) -> Workload:
    """Wrap the te tensors `args` (inputs then outputs) as a workload named after its params."""
    parts = [family, *(f"{k}{v}" if isinstance(v, int) else f"{k}-{v}" for k, v in params.items()), dtype]
    mod = tvm.IRModule({"main": te.create_prim_func(args)})
    return Workload("_".join(parts), family, params, dtype, int(flops), mod)


def _const(value: float, dtype: str):
    # A bare Python float next to a float16 expression is promoted to float32; pin the dtype.
    return tvm.tirx.const(value, dtype)


def _out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _conv_flops(n: int, c: int, f: int, h: int, w: int, kernel: int, stride: int, pad: int) -> int:
    """A multiply and an add for each of the c * kernel^2 taps behind every output element."""
    return 2 * n * f * c * kernel * kernel * _out_size(h, kernel, stride, pad) * _out_size(w, kernel, stride, pad)


def _accum_params(dtype: str, accum: str | None) -> dict:
    # Only a non-default accumulation type is a param, so fp32 names stay "matmul_m64_n64_k64_float32".
    return {} if accum in (None, dtype) else {"accum": accum}


def matmul(*, m: int, n: int, k: int, dtype: str = "float32", accum: str | None = None) -> Workload:
    """C[m, n] = A[m, k] @ B[k, n]; `accum="float32"` with float16 inputs is the tensor-core form."""
    acc = accum or dtype
    a = te.placeholder((m, k), dtype, name="A")
    b = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r].astype(acc) * b[r, j].astype(acc), axis=r), name="C")
    return _workload("matmul", dtype, 2 * m * n * k, [a, b, c], m=m, n=n, k=k, **_accum_params(dtype, accum))


def batch_matmul(*, b: int, m: int, n: int, k: int, dtype: str = "float32", accum: str | None = None) -> Workload:
    acc = accum or dtype
    x = te.placeholder((b, m, k), dtype, name="A")
    y = te.placeholder((b, k, n), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    z = te.compute((b, m, n), lambda t, i, j: te.sum(x[t, i, r].astype(acc) * y[t, r, j].astype(acc), axis=r),
                   name="C")
    return _workload("batch_matmul", dtype, 2 * b * m * n * k, [x, y, z], b=b, m=m, n=n, k=k,
                     **_accum_params(dtype, accum))


def _gelu(v, dt: str):  # the tanh approximation used by GPT-2 and BERT
    inner = _const(0.7978845608, dt) * (v + _const(0.044715, dt) * v * v * v)
    return _const(0.5, dt) * v * (_const(1.0, dt) + te.tanh(inner))


# Elementwise ops as (flops per element, expression of the value and its dtype); exp, tanh and
# sigmoid count as one op each.
_UNARY = {"relu": (1, lambda v, dt: te.max(v, _const(0, dt))), "sigmoid": (1, lambda v, dt: te.sigmoid(v)),
          "tanh": (1, lambda v, dt: te.tanh(v)), "gelu": (9, _gelu), "silu": (2, lambda v, dt: v * te.sigmoid(v))}
_BINARY = {"add": (1, lambda u, v: u + v), "mul": (1, lambda u, v: u * v)}


def _chain(x: te.Tensor, ops: str) -> tuple[te.Tensor, list[te.Tensor], int]:
    """Apply "-"-separated ops to x, one block per op; each binary op reads a fresh input.

    Returns (output, the new inputs, flops per element).
    """
    inputs, flops = [], 0
    # te.compute calls each lambda at once, so closing over the loop's variables is safe.
    for i, op in enumerate(ops.split("-")):
        prev = x
        if op in _BINARY:
            other = te.placeholder(x.shape, x.dtype, name=f"in{len(inputs) + 1}")
            inputs.append(other)
            x = te.compute(x.shape, lambda *j: _BINARY[op][1](prev(*j), other(*j)), name=f"{op}{i}")
        elif op in _UNARY:
            x = te.compute(x.shape, lambda *j: _UNARY[op][1](prev(*j), prev.dtype), name=f"{op}{i}")
        else:
            raise InputError(f"unknown elementwise op {op!r}; known: {', '.join([*_BINARY, *_UNARY])}")
        flops += {**_BINARY, **_UNARY}[op][0]
    return x, inputs, flops


def dense_bias_act(*, m: int, n: int, k: int, act: str = "relu", dtype: str = "float32") -> Workload:
    """Y = act(X[m, k] @ W[n, k]^T + bias[n]): a linear layer in PyTorch's weight layout."""
    x = te.placeholder((m, k), dtype, name="X")
    w = te.placeholder((n, k), dtype, name="W")
    bias = te.placeholder((n,), dtype, name="bias")
    r = te.reduce_axis((0, k), name="k")
    y = te.compute((m, n), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="dense")
    y = te.compute((m, n), lambda i, j: y[i, j] + bias[j], name="bias_add")
    if act not in _UNARY:
        raise InputError(f"unknown activation {act!r}; known: {', '.join(_UNARY)}")
    out, _, act_flops = _chain(y, act)
    return _workload("dense_bias_act", dtype, m * n * (2 * k + 1 + act_flops), [x, w, bias, out],
                     m=m, n=n, k=k, act=act)


def conv2d_nchw(*, n: int, c: int, h: int, w: int, f: int, kernel: int, stride: int = 1, pad: int = 0,
                dtype: str = "float32") -> Workload:
    x = te.placeholder((n, c, h, w), dtype, name="X")
    wt = te.placeholder((f, c, kernel, kernel), dtype, name="W")
    out = topi.nn.conv2d_nchw(x, wt, stride, pad, 1, out_dtype=dtype)
    return _workload("conv2d_nchw", dtype, _conv_flops(n, c, f, h, w, kernel, stride, pad), [x, wt, out],
                     n=n, c=c, h=h, w=w, f=f, kernel=kernel, stride=stride, pad=pad)


def conv2d_nhwc(*, n: int, c: int, h: int, w: int, f: int, kernel: int, stride: int = 1, pad: int = 0,
                dtype: str = "float32") -> Workload:
    x = te.placeholder((n, h, w, c), dtype, name="X")
    wt = te.placeholder((kernel, kernel, c, f), dtype, name="W")  # HWIO, as topi expects for NHWC
    out = topi.nn.conv2d_nhwc(x, wt, stride, pad, 1, out_dtype=dtype)
    return _workload("conv2d_nhwc", dtype, _conv_flops(n, c, f, h, w, kernel, stride, pad), [x, wt, out],
                     n=n, c=c, h=h, w=w, f=f, kernel=kernel, stride=stride, pad=pad)


def depthwise_conv2d(*, n: int, c: int, h: int, w: int, kernel: int, stride: int = 1, pad: int = 0,
                     dtype: str = "float32") -> Workload:
    x = te.placeholder((n, c, h, w), dtype, name="X")
    wt = te.placeholder((c, 1, kernel, kernel), dtype, name="W")
    out = topi.nn.depthwise_conv2d_nchw(x, wt, stride, pad, 1, out_dtype=dtype)
    # one input channel per output channel
    return _workload("depthwise_conv2d", dtype, _conv_flops(n, 1, c, h, w, kernel, stride, pad), [x, wt, out],
                     n=n, c=c, h=h, w=w, kernel=kernel, stride=stride, pad=pad)


def pool2d(*, n: int, c: int, h: int, w: int, kernel: int, stride: int, pad: int = 0, pool: str = "max",
           dtype: str = "float32") -> Workload:
    x = te.placeholder((n, c, h, w), dtype, name="X")
    out = topi.nn.pool2d(x, [kernel, kernel], [stride, stride], [1, 1], [pad] * 4, pool, layout="NCHW")
    window = n * c * _out_size(h, kernel, stride, pad) * _out_size(w, kernel, stride, pad)
    return _workload("pool2d", dtype, window * (kernel * kernel + (pool == "avg")), [x, out],
                     n=n, c=c, h=h, w=w, kernel=kernel, stride=stride, pad=pad, pool=pool)


def softmax(*, m: int, n: int, dtype: str = "float32") -> Workload:
    """Softmax over the last axis of an [m, n] matrix (m rows = batch x sequence)."""
    x = te.placeholder((m, n), dtype, name="X")
    # max, subtract, exp, sum, divide: five ops per element
    return _workload("softmax", dtype, 5 * m * n, [x, topi.nn.softmax(x, axis=-1)], m=m, n=n)


def layernorm(*, m: int, n: int, dtype: str = "float32") -> Workload:
    x = te.placeholder((m, n), dtype, name="X")
    gamma = te.placeholder((n,), dtype, name="gamma")
    beta = te.placeholder((n,), dtype, name="beta")
    out = topi.nn.layer_norm(x, gamma, beta, axis=[1])
    # sum and sum of squares (3), normalise (2), scale and shift (2)
    return _workload("layernorm", dtype, 7 * m * n, [x, gamma, beta, out], m=m, n=n)


def rmsnorm(*, m: int, n: int, dtype: str = "float32") -> Workload:
    x = te.placeholder((m, n), dtype, name="X")
    weight = te.placeholder((n,), dtype, name="weight")
    out = topi.nn.rms_norm(x, weight, axis=[1])
    # square and sum (2), normalise (1), scale (1)
    return _workload("rmsnorm", dtype, 4 * m * n, [x, weight, out], m=m, n=n)


def reduce_row(*, m: int, n: int, op: str = "sum", dtype: str = "float32") -> Workload:
    reducers = {"sum": topi.sum, "max": topi.max}
    if op not in reducers:
        raise InputError(f"unknown reduction {op!r}; known: {', '.join(reducers)}")
    x = te.placeholder((m, n), dtype, name="X")
    return _workload("reduce_row", dtype, m * n, [x, reducers[op](x, axis=1)], m=m, n=n, op=op)


def elementwise_fusion(*, m: int, n: int, ops: str = "add-mul-relu", dtype: str = "float32") -> Workload:
    """A chain of elementwise stages, each its own block: what AutoInline should fuse."""
    x = te.placeholder((m, n), dtype, name="X")
    out, inputs, flops = _chain(x, ops)
    return _workload("elementwise_fusion", dtype, flops * m * n, [x, *inputs, out], m=m, n=n, ops=ops)


def transpose_fusion(*, b: int, m: int, n: int, ops: str = "add", dtype: str = "float32") -> Workload:
    """out = ops(transpose(X[b, m, n]) to [b, n, m]): the head reshuffles around attention."""
    x = te.placeholder((b, m, n), dtype, name="X")
    out, inputs, flops = _chain(topi.transpose(x, (0, 2, 1)), ops)
    # the transpose moves data without arithmetic: one op per element, like the layout tasks
    return _workload("transpose_fusion", dtype, (1 + flops) * b * m * n, [x, *inputs, out],
                     b=b, m=m, n=n, ops=ops)


def gemv(*, n: int, k: int, dtype: str = "float32") -> Workload:
    """y[n] = W[n, k] @ x[k]: a linear layer at batch 1, as in token-by-token decoding."""
    wt = te.placeholder((n, k), dtype, name="W")
    x = te.placeholder((k,), dtype, name="x")
    r = te.reduce_axis((0, k), name="k")
    y = te.compute((n,), lambda i: te.sum(wt[i, r] * x[r], axis=r), name="y")
    return _workload("gemv", dtype, 2 * n * k, [wt, x, y], n=n, k=k)


def conv1d(*, n: int, c: int, l: int, f: int, kernel: int, stride: int = 1, pad: int = 0,
           dtype: str = "float32") -> Workload:
    """A 1-d convolution in NCW layout (audio, temporal convolutions)."""
    x = te.placeholder((n, c, l), dtype, name="X")
    wt = te.placeholder((f, c, kernel), dtype, name="W")
    out = topi.nn.conv1d_ncw(x, wt, stride, pad, 1, out_dtype=dtype)
    return _workload("conv1d", dtype, 2 * n * f * c * kernel * _out_size(l, kernel, stride, pad), [x, wt, out],
                     n=n, c=c, l=l, f=f, kernel=kernel, stride=stride, pad=pad)


def group_conv2d(*, n: int, c: int, h: int, w: int, f: int, kernel: int, groups: int, stride: int = 1,
                 pad: int = 0, dtype: str = "float32") -> Workload:
    """A grouped NCHW convolution (ResNeXt, ShuffleNet): each group sees c / groups channels."""
    x = te.placeholder((n, c, h, w), dtype, name="X")
    wt = te.placeholder((f, c // groups, kernel, kernel), dtype, name="W")
    out = topi.nn.group_conv2d_nchw(x, wt, stride, pad, 1, groups, out_dtype=dtype)
    return _workload("group_conv2d", dtype, _conv_flops(n, c // groups, f, h, w, kernel, stride, pad),
                     [x, wt, out], n=n, c=c, h=h, w=w, f=f, kernel=kernel, groups=groups, stride=stride, pad=pad)


def conv2d_transpose(*, n: int, c: int, h: int, w: int, f: int, kernel: int, stride: int, pad: int = 0,
                     dtype: str = "float32") -> Workload:
    """A transposed NCHW convolution (decoders, U-Nets): upsamples by `stride`."""
    x = te.placeholder((n, c, h, w), dtype, name="X")
    wt = te.placeholder((c, f, kernel, kernel), dtype, name="W")  # IOHW, as topi expects
    out = topi.nn.conv2d_transpose_nchw(x, wt, [stride, stride], [pad, pad], dtype, [0, 0])
    # every input element scatters into f * kernel^2 outputs: a multiply and an add each
    return _workload("conv2d_transpose", dtype, 2 * n * c * h * w * f * kernel * kernel, [x, wt, out],
                     n=n, c=c, h=h, w=w, f=f, kernel=kernel, stride=stride, pad=pad)


def global_avg_pool(*, n: int, c: int, h: int, w: int, dtype: str = "float32") -> Workload:
    """The mean of each channel's feature map: a CNN's head before the classifier."""
    x = te.placeholder((n, c, h, w), dtype, name="X")
    rh, rw = te.reduce_axis((0, h), name="rh"), te.reduce_axis((0, w), name="rw")
    total = te.compute((n, c, 1, 1), lambda a, b, i, j: te.sum(x[a, b, i + rh, j + rw], axis=[rh, rw]), name="sum")
    out = te.compute(total.shape, lambda *i: total(*i) / _const(h * w, dtype), name="mean")
    return _workload("global_avg_pool", dtype, n * c * (h * w + 1), [x, out], n=n, c=c, h=h, w=w)


def upsample(*, n: int, c: int, h: int, w: int, scale: int = 2, method: str = "nearest_neighbor",
             dtype: str = "float32") -> Workload:
    """Resize an NCHW feature map by an integer `scale` (feature pyramids, U-Net decoders)."""
    if method not in ("nearest_neighbor", "linear"):
        raise InputError(f"unknown resize method {method!r}; known: nearest_neighbor, linear")
    x = te.placeholder((n, c, h, w), dtype, name="X")
    out = topi.image.resize2d(x, (0.0, 0.0, 0.0, 0.0), (h * scale, w * scale), layout="NCHW", method=method,
                              coordinate_transformation_mode="asymmetric" if method == "nearest_neighbor"
                              else "half_pixel", rounding_method="floor" if method == "nearest_neighbor" else "")
    # a copy per output element; bilinear weighs four inputs (about 8 ops)
    per = 1 if method == "nearest_neighbor" else 8
    return _workload("upsample", dtype, per * n * c * h * w * scale * scale, [x, out],
                     n=n, c=c, h=h, w=w, scale=scale, method=method)


def log_softmax(*, m: int, n: int, dtype: str = "float32") -> Workload:
    """log(softmax(x)) over the last axis: a classifier's or language model's output."""
    x = te.placeholder((m, n), dtype, name="X")
    # max, subtract, exp, sum, log, subtract
    return _workload("log_softmax", dtype, 6 * m * n, [x, topi.nn.log_softmax(x, axis=-1)], m=m, n=n)


def scale_shift_act(*, n: int, c: int, h: int, w: int, act: str = "relu", dtype: str = "float32") -> Workload:
    """act(X * scale[c] + shift[c]): batch normalisation folded for inference, then an activation."""
    if act not in _UNARY:
        raise InputError(f"unknown activation {act!r}; known: {', '.join(_UNARY)}")
    x = te.placeholder((n, c, h, w), dtype, name="X")
    scale = te.placeholder((c,), dtype, name="scale")
    shift = te.placeholder((c,), dtype, name="shift")
    y = te.compute(x.shape, lambda a, b, i, j: x[a, b, i, j] * scale[b] + shift[b], name="scale_shift")
    out, _, act_flops = _chain(y, act)
    return _workload("scale_shift_act", dtype, (2 + act_flops) * n * c * h * w, [x, scale, shift, out],
                     n=n, c=c, h=h, w=w, act=act)


def attention(*, b: int, heads: int, s: int, d: int, dtype: str = "float32") -> Workload:
    """softmax(Q K^T / sqrt(d)) V for each of b x heads heads, as one fused kernel of five blocks."""
    bh = b * heads
    q = te.placeholder((bh, s, d), dtype, name="Q")
    k = te.placeholder((bh, s, d), dtype, name="K")
    v = te.placeholder((bh, s, d), dtype, name="V")
    r = te.reduce_axis((0, d), name="d")
    qk = te.compute((bh, s, s), lambda t, i, j: te.sum(q[t, i, r] * k[t, j, r], axis=r), name="qk")
    scores = te.compute(qk.shape, lambda *i: qk(*i) * _const(1.0 / math.sqrt(d), dtype), name="scores")
    probs = topi.nn.softmax(scores, axis=-1)
    r2 = te.reduce_axis((0, s), name="j")
    out = te.compute((bh, s, d), lambda t, i, j: te.sum(probs[t, i, r2] * v[t, r2, j], axis=r2), name="out")
    return _workload("attention", dtype, bh * s * s * (4 * d + 5), [q, k, v, out], b=b, heads=heads, s=s, d=d)


GENERATORS: dict[str, Callable[..., Workload]] = {
    "matmul": matmul, "batch_matmul": batch_matmul, "dense_bias_act": dense_bias_act,
    "conv2d_nchw": conv2d_nchw, "conv2d_nhwc": conv2d_nhwc, "depthwise_conv2d": depthwise_conv2d,
    "pool2d": pool2d, "softmax": softmax, "layernorm": layernorm, "rmsnorm": rmsnorm,
    "reduce_row": reduce_row, "elementwise_fusion": elementwise_fusion, "transpose_fusion": transpose_fusion,
    "gemv": gemv, "conv1d": conv1d, "group_conv2d": group_conv2d, "conv2d_transpose": conv2d_transpose,
    "global_avg_pool": global_avg_pool, "upsample": upsample, "log_softmax": log_softmax,
    "scale_shift_act": scale_shift_act, "attention": attention,
}
FAMILIES = tuple(GENERATORS)

# Shape pools: powers of two plus the odd sizes real models use (BERT's 384 and 768, ...).
_DIMS = (16, 32, 48, 64, 96, 128, 192, 200, 256, 320, 384, 512, 640, 768, 1000, 1024, 1536, 2048)
_ROWS = (1, 4, 8, 16, 32, 64, 100, 128, 196, 200, 256, 384, 512, 1024, 2048, 4096)
_BATCH = (1, 2, 4, 8, 12, 16, 32)
# CNN stages: feature-map size -> channel counts seen at that resolution.
_STAGES = {224: (3, 16), 112: (16, 32, 64), 56: (24, 64, 96, 128, 256), 28: (32, 128, 192, 256, 512),
           14: (64, 160, 256, 384, 512, 1024), 7: (160, 320, 512, 1024, 2048)}


def _dtype(rng: random.Random) -> str:
    return rng.choice(("float32", "float32", "float32", "float16"))


def _gemm_dtype(rng: random.Random) -> dict:
    # Half of the float16 GEMMs accumulate in float32, the form tensor cores run.
    dtype = _dtype(rng)
    return {"dtype": dtype, "accum": rng.choice((None, "float32")) if dtype == "float16" else None}


def _rows(rng: random.Random) -> dict:
    # Row-wise ops see batch x sequence rows.
    return dict(m=rng.choice(_ROWS) * rng.choice(_BATCH), n=rng.choice(_DIMS), dtype=_dtype(rng))


def _conv_shape(rng: random.Random, out_channels: bool) -> dict:
    h = rng.choice(tuple(_STAGES))
    kernel = rng.choice((1, 3, 3, 5, 7) if out_channels else (3, 3, 5, 7))
    shape = dict(n=rng.choice((1, 1, 2, 4, 8)), c=rng.choice(_STAGES[h]), h=h, w=h, kernel=kernel,
                 stride=rng.choice((1, 1, 2)), pad=rng.choice((0, kernel // 2)), dtype=_dtype(rng))
    if out_channels:
        shape["f"] = rng.choice(_STAGES[h] + _STAGES[max(7, h // 2)])
    return shape


def _chain_ops(rng: random.Random, longest: int) -> str:
    return "-".join(rng.choice(("add", "mul", "relu", "sigmoid", "tanh")) for _ in range(rng.randint(1, longest)))


# Each sampler draws the keyword arguments of its family's generator.
SAMPLERS: dict[str, Callable[[random.Random], dict]] = {
    "matmul": lambda r: dict(m=r.choice(_ROWS), n=r.choice(_DIMS), k=r.choice(_DIMS), **_gemm_dtype(r)),
    "batch_matmul": lambda r: dict(b=r.choice(_BATCH), m=r.choice(_DIMS[:12]), n=r.choice(_DIMS[:12]),
                                   k=r.choice((32, 64, 96, 128, 256)), **_gemm_dtype(r)),
    "dense_bias_act": lambda r: dict(m=r.choice(_ROWS), n=r.choice(_DIMS), k=r.choice(_DIMS),
                                     act=r.choice(("relu", "gelu", "silu")), dtype=_dtype(r)),
    "conv2d_nchw": lambda r: _conv_shape(r, out_channels=True),
    "conv2d_nhwc": lambda r: _conv_shape(r, out_channels=True),
    "depthwise_conv2d": lambda r: _conv_shape(r, out_channels=False),
    "pool2d": lambda r: {**_conv_shape(r, out_channels=False), "kernel": r.choice((2, 3)),
                         "stride": 2, "pad": r.choice((0, 1)), "pool": r.choice(("max", "avg"))},
    "softmax": _rows,
    "layernorm": _rows,
    "rmsnorm": _rows,
    "reduce_row": lambda r: dict(m=r.choice(_ROWS), n=r.choice(_DIMS), op=r.choice(("sum", "max")),
                                 dtype=_dtype(r)),
    "elementwise_fusion": lambda r: dict(m=r.choice(_ROWS), n=r.choice(_DIMS), ops=_chain_ops(r, 4),
                                         dtype=_dtype(r)),
    "transpose_fusion": lambda r: dict(b=r.choice(_BATCH), m=r.choice(_DIMS[:12]), n=r.choice(_DIMS[:12]),
                                       ops=_chain_ops(r, 2), dtype=_dtype(r)),
}


def _divides(c: int, f: int, choices: tuple[int, ...], rng: random.Random) -> int:
    fits = [g for g in choices if c % g == 0 and f % g == 0]
    return rng.choice(fits) if fits else 1


def _group_conv_shape(rng: random.Random) -> dict:
    shape = _conv_shape(rng, out_channels=True)
    shape["kernel"] = rng.choice((1, 3, 3))
    shape["pad"] = shape["kernel"] // 2
    shape["groups"] = _divides(shape["c"], shape["f"], (2, 4, 8, 16, 32), rng)
    if shape["groups"] == 1:  # a grouped convolution needs at least two groups
        shape["c"], shape["f"], shape["groups"] = 64, 64, rng.choice((4, 8, 32))
    return shape


def _feature_map(rng: random.Random) -> dict:
    h = rng.choice((7, 14, 28, 56))
    return dict(n=rng.choice((1, 1, 2, 4)), c=rng.choice(_STAGES[h]), h=h, w=h, dtype=_dtype(rng))


SAMPLERS.update({
    "gemv": lambda r: dict(n=r.choice(_DIMS + (3072, 4096)), k=r.choice(_DIMS + (3072, 4096)), dtype=_dtype(r)),
    "conv1d": lambda r: (lambda k: dict(n=r.choice((1, 1, 2, 4)), c=r.choice((16, 32, 64, 128, 256)),
                                        l=r.choice((64, 100, 128, 256, 512, 1024)),
                                        f=r.choice((16, 32, 64, 128, 256)), kernel=k, stride=r.choice((1, 1, 2)),
                                        pad=r.choice((0, k // 2)), dtype=_dtype(r)))(r.choice((1, 3, 3, 5, 7))),
    "group_conv2d": _group_conv_shape,
    "conv2d_transpose": lambda r: (lambda m: {**m, "f": max(8, m["c"] // r.choice((1, 2))),
                                              "kernel": r.choice((2, 3, 4)), "stride": 2,
                                              "pad": r.choice((0, 1))})(_feature_map(r)),
    "global_avg_pool": _feature_map,
    "upsample": lambda r: {**_feature_map(r), "scale": r.choice((2, 2, 4)),
                           "method": r.choice(("nearest_neighbor", "linear"))},
    "log_softmax": lambda r: {**_rows(r), "n": r.choice(_DIMS + (1000, 2048, 4096))},
    "scale_shift_act": lambda r: {**_feature_map(r), "act": r.choice(("relu", "relu", "silu", "sigmoid"))},
    "attention": lambda r: dict(b=r.choice((1, 1, 2, 4)), heads=r.choice((2, 4, 8, 12)),
                                s=r.choice((16, 32, 49, 64, 128, 196, 256)), d=r.choice((32, 64)),
                                dtype=_dtype(r)),
})


def sample(family: str, rng: random.Random) -> Workload:
    """One workload of `family` with shapes drawn from `rng`."""
    return GENERATORS[family](**SAMPLERS[family](rng))
