"""The allowlist accepts everything MetaSchedule writes and refuses what it does not."""

from __future__ import annotations

import json

import pytest

from dragonlab.core import allowlist, codec
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import suite
from dragonlab.search import defaults, explore
from dragonlab.testing import trace_corpus


def _refused(traces):
    return [(where, why) for where, plain in traces
            if (why := allowlist.refusal(plain, "cuda" if where.startswith("cuda") else "llvm"))]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cpu", "cuda-sm80"])
def test_every_trace_metaschedule_writes_for_the_quick_suite_is_accepted(target):
    """Design spaces, a post-processed sample of each, and dlight's defaults, on every workload."""
    traces = []
    for w in suite("quick"):
        for k, space in enumerate(explore.design_spaces(w.mod, get_target(target).tvm())):
            traces.append((f"{target} {w.name} space {k}", codec.to_plain(space.trace)))
        for s in explore.sample_traces(w, target, 2, 1, tries=20):
            traces.append((f"{target} {w.name} sample {s.seed}", codec.to_plain(s.sch.trace)))
        default = defaults.default_schedule(w, target)
        if default is not None:
            traces.append((f"{target} {w.name} dlight", codec.to_plain(default.trace)))
    assert len(traces) > 100
    assert _refused(traces) == []


def test_tensor_core_and_corpus_traces_are_accepted():
    traces = [(f"{'cuda' if s.target == 'cuda' else 'cpu'} corpus {i}", codec.to_plain(s.sch.trace))
              for i, s in enumerate(trace_corpus.build())]
    assert _refused(traces) == []


def _plain(script: str) -> list:
    return codec.decode(script)


MATMUL = "get C\nloops b0 >3\n"


@pytest.mark.parametrize("script, reason", [
    (MATMUL + "split l1 5 13 ; true 1", "not a false"),
    (MATMUL + "split l1 5 13 ; true true", "not a false"),
    (MATMUL + "split l1 0 64", "not a factor"),
    (MATMUL + "split l1 -1 64", "not a factor"),
    (MATMUL + 'ann b0 "pragma_import_llvm" "x"', "annotation key"),
    (MATMUL + "ann b0 layout_rewrite_preproc true", "annotation key"),
    (MATMUL + 'ann b0 par "32"', "takes an int"),
    (MATMUL + "ann b0 tiling 5", "takes structure"),
    (MATMUL + "set_dtype b0 0 float16", "not an instruction"),
    (MATMUL + 'hide_access b0 "read" [0]', "not an instruction"),
    (MATMUL + "bind l1 tx", "not an instruction MetaSchedule writes for llvm"),
    (MATMUL + "tile l1 =[0,8,8,1]", "positive factors"),
    (MATMUL + "tile l1 64 4 =[8,8,1]", "not 4 positive factors"),
    (MATMUL + "cat [1,2] =5", "index into 2"),
    (MATMUL + "par b0", "not a loop"),
    (MATMUL + "loops l1", "not a block"),
    (MATMUL + 'cache_write b0 0 "global.texture"', "not a scope"),
    (MATMUL + 'get C "other"', "not a func"),
    (MATMUL + "reindex b0 0 2", "not a read write"),
])
def test_constructs_metaschedule_never_writes_are_refused(script, reason):
    why = allowlist.refusal(_plain(script), "llvm")
    assert why is not None and reason in why, why


def test_layout_rewrite_annotation_is_accepted_only_after_enter_postproc():
    script = MATMUL + "postproc\nann b0 layout_rewrite_preproc true"
    assert allowlist.refusal(_plain(script), "llvm") is None
    assert "annotation key" in allowlist.refusal(_plain(MATMUL + "ann b0 layout_rewrite_preproc true"), "llvm")


def test_index_maps_must_be_arithmetic_in_the_readable_notation():
    import tvm
    from tvm import tirx

    readable = codec.decode("get C\nlayout b0 {i,j->j,i} 0 1")
    assert allowlist.refusal(readable, "cuda") is None
    graph = readable[0][1][1][1]
    assert allowlist.is_index_map(graph)
    # The same map with an extern call in it, as a verbatim graph: refused whatever it computes.
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    evil = tvm.tirx.IndexMap([i, j], [j + tirx.call_extern("int32", "system", "touch /tmp/x"), i], None)
    evil_graph = tvm.ir.save_json(evil)
    text = "get C\nlayout b0 {" + codec.quote(evil_graph) + "} 0 1"
    plain = codec.decode(text)
    assert "not a index map" in allowlist.refusal(plain, "cuda")
    assert not allowlist.is_index_map(json.dumps(json.loads(graph)) + " ")


def test_escapes_finds_extern_calls_and_pragmas():
    import tvm
    from tvm import te, tirx
    from tvm.s_tir import Schedule

    a = te.placeholder((4,), name="A")
    b = te.compute((4,), lambda i: a[i] + tirx.Cast("float32", tirx.call_extern("int32", "system", "x")), name="B")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    sch.annotate(sch.get_loops(sch.get_sblock("B"))[0], "pragma_import_llvm", "IR")
    sch.annotate(sch.get_sblock("B"), "meta_schedule.parallel", 4)
    assert allowlist.escapes(sch.mod) == {"call tirx.call_extern system", "annotation pragma_import_llvm"}
    assert all(not any(e.startswith("call") for e in allowlist.escapes(w.mod)) for w in suite("quick"))


@pytest.mark.parametrize("target", ["cpu", "cuda-sm80"])
def test_post_processed_samples_have_no_escapes(target):
    """The build-time check has no false alarms on what MetaSchedule builds."""
    found = {}
    for k, w in enumerate(suite("quick")):
        mods = [s.sch.mod for s in explore.sample_traces(w, target, 2, 1, tries=20)] if k % 3 == 0 else []
        default = defaults.default_schedule(w, target)  # dlight's cuda Matmul aligns shared buffers
        for mod in mods + ([default.mod] if default is not None else []):
            if allowlist.escapes(mod) - allowlist.escapes(w.mod):
                found[w.name] = allowlist.escapes(mod) - allowlist.escapes(w.mod)
    assert found == {}
