"""dlight's default schedules on the quick suite: which workloads get one, exact scripts that
replay to dlight's module, and what the evaluator makes of them."""

import pytest
import tvm
import tvm_ffi

from dragonlab.core.codec import apply, decode, to_plain
from dragonlab.core.workloads import suite
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.search.defaults import default_rule, default_schedule, default_script

QUICK = suite("quick")

# The rule that schedules each quick workload. On cpu only Reduction applies, and only to
# several blocks ending in an injective one (a lone row sum has no default); on cuda Fallback
# takes whatever the specific rules leave.
CPU_RULES = {"dense_bias_act": "Reduction", "softmax": "Reduction", "layernorm": "Reduction",
             "rmsnorm": "Reduction"}
CUDA_RULES = {"matmul": "Matmul", "batch_matmul": "Matmul", "dense_bias_act": "Matmul",
              "conv2d_nchw": "Matmul", "conv2d_nhwc": "Matmul", "depthwise_conv2d": "Fallback",
              "pool2d": "Fallback", "softmax": "GeneralReduction", "layernorm": "GeneralReduction",
              "rmsnorm": "Reduction", "reduce_row": "Reduction", "elementwise_fusion": "Fallback",
              "transpose_fusion": "Fallback"}


def _copy(mod):
    return tvm.ir.load_json(tvm.ir.save_json(mod))


@pytest.fixture(scope="module")
def scripts():
    """{target: {workload name: script or None}}, with the modules checked unchanged."""
    out = {}
    for target in ("cpu", "cuda-sm80"):
        out[target] = {}
        for w in QUICK:
            before = _copy(w.mod)
            out[target][w.name] = default_script(w, target)
            assert tvm_ffi.structural_equal(w.mod, before), f"{w.name} changed on {target}"
    return out


def test_cpu_defaults_are_the_reduction_like_workloads(scripts):
    assert {w.family: default_rule(w, "cpu") for w in QUICK if default_rule(w, "cpu")} == CPU_RULES
    assert {w.family for w in QUICK if scripts["cpu"][w.name]} == set(CPU_RULES)
    matmul = next(w for w in QUICK if w.family == "matmul")
    assert default_schedule(matmul, "cpu") is None


def test_every_cuda_workload_has_a_default(scripts):
    assert all(scripts["cuda-sm80"].values())
    assert {w.family: default_rule(w, "cuda-sm80") for w in QUICK} == CUDA_RULES


@pytest.mark.parametrize("target", ["cpu", "cuda-sm80"])
def test_default_scripts_round_trip_and_replay_to_dlights_module(scripts, target):
    for w in QUICK:
        sch = default_schedule(w, target)
        if sch is None:
            continue
        script = scripts[target][w.name]
        assert decode(script) == to_plain(sch.trace), w.name
        before = _copy(w.mod)
        replayed = apply(script, w.mod)
        assert tvm_ffi.structural_equal(replayed.mod, sch.mod), w.name
        assert tvm_ffi.structural_equal(w.mod, before), w.name
        assert "EnterPostproc" not in {inst[0] for inst in decode(script)[0]}


def test_cuda_defaults_are_what_tvms_cuda_pipeline_schedules():
    """The rule order is TVM's: its own cuda ApplyDefaultSchedule pass gives the same functions."""
    from tvm.relax.backend.cuda.pipeline import legalize_passes

    from dragonlab.core.targets import get_target

    target = get_target("cuda-sm80").tvm()
    default_pass = legalize_passes(target)[-1]
    for w in QUICK:
        with target:
            scheduled = default_pass(_copy(w.mod))["main"].without_attr("tirx.is_scheduled")
        assert tvm_ffi.structural_equal(scheduled, default_schedule(w, "cuda-sm80").mod["main"]), w.name


def test_cpu_defaults_evaluate_correct(scripts):
    items = [(w, scripts["cpu"][w.name]) for w in QUICK if scripts["cpu"][w.name]]
    with Evaluator("cpu", EvalConfig(workers=1)) as ev:
        evaluations = ev.evaluate_many(items, progress=False)
    for (w, _), e in zip(items, evaluations):
        assert e.correct and not e.repairs, (w.name, e)
        assert e.latency and e.reference_latency, (w.name, e)


def test_cuda_defaults_pass_post_processing_and_build_to_source(scripts):
    """Without a GPU the evaluator stops after building CUDA source: every default got past the
    target's post-processors (VerifyGPUCode included) with nothing repaired."""
    one_per_rule = {CUDA_RULES[w.family]: w for w in QUICK}  # the worker's setup is most of the cost
    items = [(w, scripts["cuda-sm80"][w.name]) for w in one_per_rule.values()]
    with Evaluator("cuda-sm80", EvalConfig(workers=1)) as ev:
        evaluations = ev.evaluate_many(items, progress=False)
    for (w, _), e in zip(items, evaluations):
        assert e.stage == "run" and "CUDA source" in e.reason and not e.repairs, (w.name, e)
