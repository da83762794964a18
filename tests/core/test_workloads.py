import itertools
import json
import random
from collections import Counter

import numpy as np
import pytest
import tvm
import tvm_ffi
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.s_tir.analysis import estimate_tir_flops

from dragonlab.core import families, networks
from dragonlab.core import workloads as W
from dragonlab.core.errors import InputError
from dragonlab.core.workloads import Workload, WorkloadFormatError

CPU = {"kind": "llvm", "num-cores": 2}


def run(w: Workload, *inputs: np.ndarray, out_dtype: str | None = None) -> np.ndarray:
    """Build `w` unscheduled for the CPU and run it on `inputs`; the last argument is the output."""
    ex = tvm.compile(w.mod, target=tvm.target.Target(CPU))
    args = [tvm.runtime.tensor(x) for x in inputs]
    out = tvm.runtime.tensor(np.zeros(_out_shape(w), dtype=out_dtype or w.dtype))
    ex["main"](*args, out)
    return out.numpy()


def _out_shape(w: Workload) -> list[int]:
    import tvm.s_tir.meta_schedule as ms

    return [int(s) for s in ms.arg_info.ArgInfo.from_prim_func(w.mod["main"])[-1].shape]


@pytest.mark.parametrize("family", families.FAMILIES)
def test_every_family_generates_a_main_module_with_a_decimal_key(family):
    for seed in range(3):
        w = families.sample(family, random.Random(seed))
        assert w.family == family
        assert isinstance(w.mod, tvm.IRModule) and "main" in w.mod
        assert w.key.isdigit() and w.key == str(tvm_ffi.structural_hash(w.mod))
        assert w.flops > 0 and w.weight == 1
        assert w.name.startswith(family) and w.name.endswith(w.dtype)
        assert json.loads(json.dumps(dict(w.params))) == dict(w.params)


@pytest.mark.parametrize("family", ["matmul", "batch_matmul", "conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d"])
def test_compute_bound_flops_agree_with_tvm_count(family):
    rng = random.Random(7)
    for _ in range(5):  # sampled shapes cover the stride and padding variants
        w = families.sample(family, rng)
        assert w.flops == estimate_tir_flops(w.mod), w.name


def test_generators_are_deterministic_including_block_names():
    a = families.conv2d_nhwc(n=1, c=16, h=14, w=14, f=32, kernel=3, stride=2, pad=1)
    b = families.conv2d_nhwc(n=1, c=16, h=14, w=14, f=32, kernel=3, stride=2, pad=1)
    assert a == b and a.key == b.key and a.mod.script() == b.mod.script()
    assert 'T.sblock("C")' in families.matmul(m=8, n=8, k=8).mod.script()


def test_the_suites_module_still_exports_what_callers_import_from_it():
    from dragonlab.core import workload

    assert W.Workload is workload.Workload and W.WorkloadFormatError is workload.WorkloadFormatError
    assert (W.GENERATORS, W.FAMILIES, W.SAMPLERS, W.sample, W.matmul) == (
        families.GENERATORS, families.FAMILIES, families.SAMPLERS, families.sample, families.matmul)
    assert W.extract_model_workloads is networks.extract_model_workloads and W.MODELS is networks.MODELS


def test_fp16_accumulation_is_a_distinct_named_variant():
    plain = families.matmul(m=32, n=32, k=32, dtype="float16")
    wide = families.matmul(m=32, n=32, k=32, dtype="float16", accum="float32")
    assert plain.key != wide.key and plain.name != wide.name
    assert wide.params["accum"] == "float32" and "accum" not in plain.params
    assert families.matmul(m=64, n=64, k=64).name == "matmul_m64_n64_k64_float32"


def test_quick_suite_is_small_unique_and_covers_the_core_families():
    ws = W.suite("quick")
    assert len(ws) <= 48  # about 4 minutes of collection at 16 trials on 2 cores
    assert len({w.name for w in ws}) == len(ws) and len({w.key for w in ws}) == len(ws)
    shapes = Counter(w.family for w in ws)
    assert set(shapes) <= set(families.FAMILIES) and len(shapes) >= 13
    assert min(shapes.values()) >= 3  # held out: unseen shapes of seen families
    assert any(w.family == "matmul" and w.dtype == "float16" for w in ws)
    assert max(w.flops for w in ws) < 2e6  # each candidate must run in microseconds


@pytest.fixture(scope="module")
def standard():
    return W.suite("standard")


def test_standard_suite_has_every_family_at_many_shapes_and_three_networks(standard):
    assert len(standard) >= 300 and len({w.key for w in standard}) == len(standard)
    assert len({w.name for w in standard}) == len(standard)
    generated = Counter(w.family for w in standard if w.family in families.GENERATORS)
    assert set(generated) == set(families.FAMILIES) and len(generated) >= 20
    assert min(generated.values()) >= 10
    tasks = Counter(w.params["model"] for w in standard if w.family.startswith("model:"))
    assert set(tasks) >= {"resnet", "mobilenet", "transformer_block"} and min(tasks.values()) >= 5
    assert all(W.work_of(w) <= W.STANDARD_MAX_WORK for w in standard if w.family in families.GENERATORS)
    assert not any(W.has_index_inputs(w) for w in standard)
    # extracted tasks keep the names TVM's legalisation gives their blocks
    conv = next(w for w in standard if w.family.startswith("model:resnet/fused_conv2d"))
    assert 'T.sblock("conv2d_nchw")' in conv.mod.script()


def test_standard_suite_is_deterministic_per_seed(standard):
    n = W.STANDARD_SHAPES * 3  # the first three families: no network import needed
    again = [w.key for w in itertools.islice(W.iter_suite("standard", seed=0), n)]
    other = [w.key for w in itertools.islice(W.iter_suite("standard", seed=1), n)]
    assert again == [w.key for w in standard[:n]] and other != again


def test_the_index_input_of_a_gather_is_found():
    take = next(w for w in networks.extract_model_workloads("transformer_block") if w.name.endswith("_take"))
    assert W.has_index_inputs(take) and not W.has_index_inputs(families.matmul(m=8, n=8, k=8))


def test_paper_suite_streams_deterministically():
    first = [w.key for w in itertools.islice(W.iter_suite("paper", seed=3), 200)]
    again = [w.key for w in itertools.islice(W.iter_suite("paper", seed=3), 200)]
    assert first == again and len(set(first)) == 200


def test_unknown_suite_lists_the_known_names():
    with pytest.raises(ValueError, match="quick, standard, paper"):
        W.suite("huge")


def test_first_of_each_family_is_each_family_s_first_workload_in_suite_order(quick):
    every = W.suite("quick")
    assert list(quick) == list(dict.fromkeys(w.family for w in every))
    assert all(w.key == next(v.key for v in every if v.family == family) for family, w in quick.items())


def test_lookup_finds_by_key_or_name_and_describe_is_one_line(quick):
    ws = list(quick.values())
    w = quick["softmax"]
    assert W.lookup(w.key, ws) is w and W.lookup(w.name, ws) is w
    with pytest.raises(InputError, match="no workload with key or name 'nope'"):
        W.lookup("nope", ws)
    assert "\n" not in W.describe(w) and w.key in W.describe(w)


def _assert_same_workload(a: Workload, b: Workload):
    assert a == b and a.key == b.key
    assert tvm_ffi.structural_equal(a.mod, b.mod, map_free_vars=False)
    assert a.mod.script() == b.mod.script()  # block names survive: the hash alone would not notice


def test_json_round_trip_keeps_key_and_block_names():
    for w in W.suite("quick"):
        _assert_same_workload(Workload.from_json(json.loads(json.dumps(w.to_json()))), w)


@settings(max_examples=25, deadline=None)
@given(family=st.sampled_from(families.FAMILIES), seed=st.integers(0, 2**32))
def test_json_round_trip_holds_for_sampled_workloads(family, seed):
    w = families.sample(family, random.Random(seed))
    _assert_same_workload(Workload.from_json(json.loads(json.dumps(w.to_json()))), w)


def test_a_graph_another_tvm_wrote_goes_through_tvms_upgrader_and_this_one_s_does_not(quick, monkeypatch):
    read = []
    monkeypatch.setattr(tvm.ir, "load_json", lambda text, load=tvm.ir.load_json: read.append(text) or load(text))
    d = quick["conv2d_nhwc"].to_json()
    _assert_same_workload(Workload.from_json(d), quick["conv2d_nhwc"])
    assert read == []
    graph = json.loads(d["mod"])
    graph["metadata"]["tvm_version"] = "0.24.0"
    _assert_same_workload(Workload.from_json({**d, "mod": json.dumps(graph)}), quick["conv2d_nhwc"])
    assert len(read) == 1
    with pytest.raises(WorkloadFormatError, match="'mod'"):
        Workload.from_json({**d, "mod": "[1, 2]"})


@pytest.mark.parametrize("field", ["name", "family", "params", "dtype", "flops", "mod"])
def test_from_json_names_the_missing_field(field, quick):
    d = quick["matmul"].to_json()
    del d[field]
    with pytest.raises(WorkloadFormatError, match=repr(field)) as err:
        Workload.from_json(d)
    assert err.value.field == field


@pytest.mark.parametrize("field, value", [("flops", "many"), ("params", {"m": [1]}), ("weight", 0),
                                          ("mod", "{not json"), ("key", "123")])
def test_from_json_names_the_bad_field(field, value, quick):
    d = quick["matmul"].to_json()
    d[field] = value
    with pytest.raises(WorkloadFormatError) as err:
        Workload.from_json(d)
    assert err.value.field == field


def test_matmul_computes_a_matmul(quick):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32)
    np.testing.assert_allclose(run(quick["matmul"], a, b), a @ b, rtol=1e-5, atol=1e-4)


def test_fp16_matmul_accumulates_in_fp32():
    w = families.matmul(m=32, n=32, k=32, dtype="float16", accum="float32")
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((32, 32)).astype(np.float16) for _ in range(2))
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(run(w, a, b, out_dtype="float32"), ref, rtol=1e-5, atol=1e-4)


def test_softmax_computes_a_softmax(quick):
    x = np.random.default_rng(2).standard_normal((32, 64), dtype=np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(run(quick["softmax"], x), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_dense_bias_gelu_and_transpose_fusion_compute_what_they_say(quick):
    rng = np.random.default_rng(3)
    x, wt, bias = (rng.standard_normal(s, dtype=np.float32) for s in [(8, 64), (64, 64), (64,)])
    y = x @ wt.T + bias
    gelu = 0.5 * y * (1 + np.tanh(0.7978845608 * (y + 0.044715 * y**3)))
    np.testing.assert_allclose(run(quick["dense_bias_act"], x, wt, bias), gelu, rtol=1e-5, atol=1e-4)

    x, other = rng.standard_normal((4, 32, 64), dtype=np.float32), rng.standard_normal((4, 64, 32), dtype=np.float32)
    np.testing.assert_allclose(run(quick["transpose_fusion"], x, other), x.transpose(0, 2, 1) + other)


def _torch_reference():
    import torch
    import torch.nn.functional as F

    t = torch.from_numpy
    attention = lambda q, k, v: torch.softmax(t(q) @ t(k).transpose(1, 2) / 8.0, dim=-1) @ t(v)  # d = 64
    return [
        (families.gemv(n=96, k=200), [(96, 200), (200,)], lambda w, x: t(w) @ t(x)),
        (families.conv1d(n=2, c=8, l=50, f=16, kernel=5, stride=2, pad=2), [(2, 8, 50), (16, 8, 5)],
         lambda x, w: F.conv1d(t(x), t(w), stride=2, padding=2)),
        (families.group_conv2d(n=1, c=16, h=9, w=9, f=8, kernel=3, groups=4, stride=2, pad=1),
         [(1, 16, 9, 9), (8, 4, 3, 3)],
         lambda x, w: F.conv2d(t(x), t(w), stride=2, padding=1, groups=4)),
        (families.conv2d_transpose(n=1, c=8, h=5, w=5, f=4, kernel=4, stride=2, pad=1), [(1, 8, 5, 5), (8, 4, 4, 4)],
         lambda x, w: F.conv_transpose2d(t(x), t(w), stride=2, padding=1)),
        (families.global_avg_pool(n=2, c=8, h=7, w=7), [(2, 8, 7, 7)], lambda x: t(x).mean((2, 3), keepdim=True)),
        (families.upsample(n=1, c=4, h=5, w=6, scale=2), [(1, 4, 5, 6)], lambda x: F.interpolate(t(x), scale_factor=2)),
        (families.upsample(n=1, c=4, h=5, w=6, scale=2, method="linear"), [(1, 4, 5, 6)],
         lambda x: F.interpolate(t(x), scale_factor=2, mode="bilinear", align_corners=False)),
        (families.log_softmax(m=6, n=50), [(6, 50)], lambda x: torch.log_softmax(t(x), -1)),
        (families.scale_shift_act(n=1, c=8, h=5, w=5, act="silu"), [(1, 8, 5, 5), (8,), (8,)],
         lambda x, a, b: F.silu(t(x) * t(a)[:, None, None] + t(b)[:, None, None])),
        (families.attention(b=1, heads=2, s=12, d=64), [(2, 12, 64)] * 3, attention),
    ]


@pytest.mark.parametrize("case", range(10))
def test_the_newer_families_compute_what_pytorch_computes(case):
    w, shapes, reference = _torch_reference()[case]
    rng = np.random.default_rng(case)
    inputs = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    np.testing.assert_allclose(run(w, *inputs), reference(*inputs).numpy(), rtol=1e-4, atol=1e-5, err_msg=w.name)


def test_mlp_extraction_yields_four_weighted_tasks():
    ws = networks.extract_model_workloads("mlp")
    assert [w.params["task"] for w in ws] == ["fused_matmul1_add1", "fused_matmul_add_relu", "transpose", "transpose1"]
    assert all(w.family == f"model:mlp/{w.params['task']}" and w.weight == 1 and w.flops > 0 for w in ws)
    relu = W.lookup("mlp_fused_matmul_add_relu", ws)
    assert relu.params["args"] == "float32[8, 64] float32[64, 128] float32[128] float32[8, 128]"
    assert relu.flops >= 2 * 8 * 64 * 128
    _assert_same_workload(Workload.from_json(relu.to_json()), relu)


def test_transformer_block_extraction_yields_many_tasks_with_repeats():
    ws = networks.extract_model_workloads("transformer_block", target="cpu")
    assert len(ws) >= 20 and len({w.key for w in ws}) == len(ws) == len({w.name for w in ws})
    assert any(w.weight > 1 for w in ws)  # the two layer norms share one task
    assert all(w.family.startswith("model:transformer_block/") and "main" in w.mod for w in ws)
