"""The fuzzer's red-team mutations write the constructs they claim, and `fuzz` survives whatever
the evaluator does with them.

Most tests only generate text (no TVM build): a real sampled matmul script is mutated and the
text is checked for the construct. The last two run `fuzz` on a real Evaluator; the red-team one
also asserts that no construct the evaluator must refuse is judged correct.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from dragonlab.core import codec
from dragonlab.core.targets import get_target
from dragonlab.evaluation import fuzz, redteam, workers
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluation, Evaluator
from dragonlab.evaluation.fuzz import MUTATIONS, FuzzReport
from dragonlab.evaluation.redteam import RED_TEAM, Mutant, apply_case, red_team_cases

OLD_MUTATIONS = ("random_bytes", "truncate", "swap_lines", "drop_line", "wrong_reference", "decision",
                 "huge_number", "unknown_kind", "duplicate_postproc", "unsafe", "clean")


@pytest.fixture(scope="module")
def matmul(quick):
    return quick["matmul"]


@pytest.fixture(scope="module")
def script(matmul):
    """A postprocessed sample of the quick matmul's design space, as a script."""
    return fuzz.sample_scripts([matmul], get_target("cpu"), per_workload=1, seed=0)[0][1]


@pytest.fixture(scope="module")
def made(script):
    """Every red-team case applied to the script once: {mutation: [Mutant, ...]}."""
    return {name: [apply_case(c, script, random.Random(k)) for k, c in enumerate(cases)]
            for name, cases in red_team_cases().items()}


def _design(script: str) -> str:
    return script.split("\npostproc")[0]


def _tail(m: str, script: str) -> str:
    """What a mutant added to the script's design part."""
    design = _design(script)
    return m[len(design) + 1:] if m.startswith(design + "\n") else m


def test_red_team_mutations_join_the_old_ones():
    assert set(OLD_MUTATIONS) | set(RED_TEAM) == set(MUTATIONS)
    assert set(red_team_cases()) == set(RED_TEAM)
    assert all(len(red_team_cases()[name]) >= 30 for name in RED_TEAM)


def test_red_team_mutations_are_deterministic_for_a_seed(script):
    for name in RED_TEAM:
        first = [MUTATIONS[name](random.Random(seed), script) for seed in range(20)]
        again = [MUTATIONS[name](random.Random(seed), script) for seed in range(20)]
        assert first == again and [m.case for m in first] == [m.case for m in again], name
        assert len(set(first)) > 5, name  # and they do vary with the seed
        assert all(isinstance(m, Mutant) and isinstance(m, str) for m in first)


def test_red_team_lines_are_appended_to_the_design_part_or_after_postprocessing(script):
    rng = random.Random(0)
    mutants = [MUTATIONS[name](rng, script) for name in RED_TEAM for _ in range(40)]
    post = [m for m in mutants if m.case.endswith("+post")]
    assert post and len(post) < len(mutants) / 2
    assert all(m.startswith(script + "\n") for m in post)
    assert all(m.startswith(_design(script) + "\n") for m in mutants if m not in post and "\n" in m
               and not m.case.startswith(("just_under", "max_lines", "script_2MB", "line_2MB")))


def test_graphs_are_real_tvm_graphs_that_call_out(script):
    import tvm

    graphs = redteam.graphs()
    for name, text in graphs.items():
        obj = tvm.ir.load_json(text)  # a real tvm-ffi graph of this TVM
        types = {node["type"] for node in json.loads(text)["nodes"]}
        assert ("tirx.IndexMap" in types) == name.startswith(("map_", "harmless_map")), name
        if name.startswith("harmless"):
            assert "ir.Call" not in types and "ir.TensorLoad" not in types, name
        else:
            assert {"ir.Call", "ir.TensorLoad"} & types, name
        assert obj is not None
    assert f'"touch {redteam.MARKER}"' in str(tvm.ir.load_json(graphs["expr_system"]))
    texts = {name: json.dumps(json.loads(text)) for name, text in graphs.items()}
    for needle, names in {"tirx.call_extern": ("system", "execve", "socket", "fork", "popen", "dlopen"),
                          "tirx.tvm_call_packed": ("packed_load_module", "packed_load_so"),
                          "ir.TensorLoad": ("buffer_load",)}.items():
        for n in names:
            assert needle in texts[f"map_{n}"] and needle in texts[f"expr_{n}"], n
    assert "execve" in texts["map_execve"] and "socket" in texts["map_socket"]
    assert "system" in texts["map_system_in_inverse"]


def test_verbatim_graphs_go_in_every_slot_that_takes_a_value(script, made):
    seen = Counter()
    for m in made["verbatim_graph"]:
        slot, graph = m.case.split(":")
        line = _tail(m, script)
        assert line == redteam.context(script).fill(redteam.VALUE_SLOTS[slot], redteam.verbatim(redteam.graphs()[graph]))
        assert '{"{\\"root_index\\":' in line
        if graph == "map_system":
            assert "\\\"system\\\"" in line and f"touch {redteam.MARKER}".replace("/", "\\\\/") in line
        seen[slot] += 1
    assert set(seen) == set(redteam.VALUE_SLOTS) and len(set(seen.values())) == 1
    for slot in ("layout.map", "layout.pad_value", "block_layout", "reindex_read", "reindex_write", "ann_access",
                 "pad_einsum", "split.factor", "ann.pragma_value", "cat.candidates"):
        assert slot in seen
    # each verbatim graph survives decoding: the plain trace holds the graph text itself
    m = next(m for m in made["verbatim_graph"] if m.case == "layout.map:map_system")
    assert redteam.graphs()["map_system"] in codec.decode(m)[0][-1][1]
    m = next(m for m in made["verbatim_graph"] if m.case == "split.factor:expr_system")
    assert redteam.graphs()["expr_system"] in codec.decode(m)[0][-1][1]


def test_extern_calls_in_readable_maps_are_refused_at_decode(script, made):
    patterns = set()
    for m in made["extern_map"]:
        slot, pattern = m.case.split(":")
        patterns.add(pattern)
        line = _tail(m, script)
        assert any(re.search(rf"\b{re.escape(f)}\b", line) for f in redteam.EXTERN_NAMES), line
        if pattern != "free_var":  # a free variable named `system` is only a name
            with pytest.raises(codec.ScriptSyntaxError):
                codec.decode(m)
    assert patterns == set(redteam.EXTERN_MAPS)
    texts = {_tail(m, script) for m in made["extern_map"]}
    assert any(re.fullmatch(r"layout b\d+ \{i->i\|j->\w+\(\)\} 0 1", t) for t in texts)


def test_predication_flags_are_written_in_every_spelling(script, made):
    lines = {_tail(m, script) for m in made["predication"]}
    loop = redteam.context(script).l
    for flags in ("true 1", "true true", "1 1", "0 1", "true 2", "true -1", 'true "x"', "true [1]", "true None"):
        assert f"split {loop} 5 13 ; {flags}" in lines
        assert f"partition {loop} 5 13 ; {flags}" in lines
    split = [m for m in made["predication"] if m.case.startswith("split;")]
    assert all(m.refuse for m in split)
    decoded = codec.decode(next(m for m in split if m.case == "split;1 1"))[0][-1]
    assert decoded[0] == "Split" and decoded[2] == [1, 1]  # 1/0 spellings reach the evaluator as ints


def test_annotation_keys_cover_every_key_tvm_knows_aliases_and_value_types(script, made):
    lines = [_tail(m, script) for m in made["annotation_keys"]]
    text = "\n".join(lines)
    for key in redteam.TVM_ANNOTATION_KEYS:
        assert f' "{key}" ' in text or f" {key} " in text, key
        assert f'unann {redteam.context(script).b} "{key}"' in text
    for alias in codec.KEY_ALIASES:
        assert re.search(rf"^ann \S+ {alias}( |$)", text, re.M), alias
        assert f"unann {redteam.context(script).b} {alias}" in lines
    assert f"ann {redteam.context(script).b} layout_rewrite_preproc true" in lines
    assert "pragma_import_llvm" in text and "llvm.global_ctors" in text and "__attribute__((constructor))" in text
    types = Counter(m.case.rsplit("=", 1)[1] for m in made["annotation_keys"]
                    if "=" in m.case and not m.case.startswith("unann"))
    assert set(types) >= {"int", "bool", "float", "string", "list", "variable", "index_map", "none", "default"}
    refused = {m.case for m in made["annotation_keys"] if m.refuse}
    assert "'pragma_import_llvm'=string" in refused and "alias:par=int" not in refused


def test_annotation_keys_include_every_key_in_tvms_library():
    """Keys found in libtvm_compiler.so (the wheel has no headers for them) are all exercised."""
    import tvm

    lib = Path(tvm.__file__).parent / "lib" / "libtvm_compiler.so"
    data = lib.read_bytes()
    found = set()
    for prefix in (b"pragma_", b"meta_schedule.", b"software_pipeline_"):
        for m in re.finditer(re.escape(prefix) + rb"[a-z_]+\x00", data):
            if data[m.start() - 1:m.start()] == b"\x00":  # a whole C string, not the tail of another
                found.add(m.group()[:-1].decode())
    assert found, "no annotation keys found in TVM's library"
    assert found - {"pragma_", "meta_schedule.cc"} <= set(redteam.TVM_ANNOTATION_KEYS)


def test_deep_nesting_goes_thousands_deep(script, made):
    def depth(s: str) -> int:
        d = best = 0
        for ch in s:
            d += ch in "[(" or -(ch in "])")
            best = max(best, d)
        return best

    tails = {m.case: _tail(m, script) for m in made["deep_nesting"]}
    assert depth(tails["list5000:cat"]) == 5000 and depth(tails["parens5000"]) >= 5000
    assert tails["chain+20000"].count("i+") >= 19999 and tails["chain+2000"].count("+") >= 1999
    assert tails["inverse_chain5000"].count("->|") == 5000
    assert tails["labels_defined2000"].count("@") == 2000 and tails["labels_cited5000"].count("+@1") == 5000
    assert all(m.refuse for m in made["deep_nesting"] if not m.case.startswith("label_1e18"))  # a name, not depth


def test_huge_counts_pass_every_limit(script, made):
    by = {m.case: m for m in made["huge_counts"]}
    b = redteam.context(script).b
    assert _tail(by["loops_1024_x3000"], script).count(f"loops {b} >1024\n") == 2999
    assert _tail(by["loops_99999"], script) == f"loops {b} >99999"
    assert _tail(by["run_99999"], script).endswith("..99999")
    assert len(by["script_2MB"]) > 2_000_000 - 1000 and len(by["line_2MB"]) > 2_000_000
    for case in ("just_under_size_limit", "max_lines"):
        assert len(by[case]) <= codec.MAX_SCRIPT_CHARS and len(by[case]) > 20_000
        codec.decode(by[case])  # valid up to its last byte
    assert len(by["just_under_size_limit"]) > codec.MAX_SCRIPT_CHARS - 100
    assert len(_tail(by["string_500k_block_name"], script)) > 500_000
    for slot in redteam.NUMERIC_SLOTS:
        for label in ("int64_max", "int64_max+1", "int64_min-1", "5000_digits", "inf", "nan", "-0.0"):
            assert f"{slot}={label}" in by, (slot, label)
    assert "9223372036854775808" in _tail(by["split.factor=int64_max+1"], script)
    assert _tail(by["ann.parallel=-0.0"], script).endswith(" par -0.0")


def test_rare_primitives_cover_every_mnemonic_with_arguments_that_decode(script, made):
    decodes = Counter()
    for m in made["rare_primitives"]:
        mnemonic = m.case.split(":")[0]
        try:
            codec.decode(m)
            decodes[mnemonic] += 1
        except codec.ScriptSyntaxError:
            decodes[mnemonic] += 0
    assert set(decodes) == set(codec.MNEMONICS.values())
    assert [k for k, n in decodes.items() if n == 0] == []
    text = "\n".join(_tail(m, script) for m in made["rare_primitives"])
    for construct in ("set_dtype", "hide_access", "ann_access", "rolling_buffer", "decomp_padding", "cache_inplace",
                      "cache_index", "read_at", "write_at", "partition", "merge", "fuse_epilogue", "reorder_iters",
                      "pad_einsum", "unit_loop", "tensorize", "bind"):
        assert re.search(rf"^{construct} ", text, re.M), construct
    scopes = {redteam.context(script).fill("cache_read <b> 0 <X>", s) for s in ("global.texture", "local.xyz", '""')}
    options = {_tail(apply_case(c, script, random.Random(k)), script)
               for c in red_team_cases()["rare_primitives"] if c.label == "cache_read:0" for k in range(200)}
    assert scopes <= options


def test_mutations_are_cheap(script):
    rng = random.Random(3)
    MUTATIONS["huge_counts"](rng, script)  # builds the caches
    start = time.perf_counter()
    for _ in range(2000):
        name = rng.choice(list(MUTATIONS))
        MUTATIONS[name](rng, script)
    assert time.perf_counter() - start < 10


class _Flaky:
    """A stand-in evaluator whose batch call always raises and whose single calls raise
    RecursionError or MemoryError for some scripts."""

    def __init__(self):
        self.calls = 0

    def evaluate_many(self, items, progress=False):
        raise RecursionError("maximum recursion depth exceeded")

    def evaluate(self, w, script):
        self.calls += 1
        if self.calls % 3 == 1:
            raise RecursionError("maximum recursion depth exceeded while decoding")
        if self.calls % 3 == 2:
            raise MemoryError()
        return Evaluation(w.key, "cpu", "decode", "refused")


class _Refuses:
    def evaluate_many(self, items, progress=False):
        return [Evaluation(w.key, "cpu", "decode", "refused") for w, _ in items]


def test_recursion_and_memory_errors_in_the_evaluator_count_as_host_crashes(matmul, script):
    assert issubclass(RecursionError, Exception) and issubclass(MemoryError, Exception)
    report = fuzz.fuzz(30, 0, _Flaky(), [(matmul, script)], chunk=7, progress=False)
    assert report.evaluated == 30 and report.host_crashes == 20
    kinds = Counter(k.split(": ")[1] for k in report.crashes.elements())
    assert kinds == Counter({"RecursionError": 10, "MemoryError": 10})
    assert sum(report.stages.values()) == 10


def test_a_short_batch_from_the_evaluator_is_not_silently_dropped(matmul, script):
    class Short(_Refuses):
        def evaluate_many(self, items, progress=False):
            return super().evaluate_many(items)[:-1]

        def evaluate(self, w, s):
            return Evaluation(w.key, "cpu", "decode", "refused")

    report = fuzz.fuzz(12, 0, Short(), [(matmul, script)], chunk=5, progress=False)
    assert report.evaluated == 12 and report.host_crashes == 0 and report.stages["decode"] == 12


def test_fuzz_draws_only_the_chosen_mutations(matmul, script):
    report = fuzz.fuzz(40, 1, _Refuses(), [(matmul, script)], progress=False, mutations=RED_TEAM)
    assert set(report.by_mutation) <= set(RED_TEAM) and report.evaluated == 40
    assert sum(sum(c.values()) for c in report.by_case.values()) == 40
    report = fuzz.fuzz(10, 1, _Refuses(), [(matmul, script)], progress=False, mutations=["predication"])
    assert set(report.by_mutation) == {"predication"}
    with pytest.raises(ValueError, match="unknown mutations"):
        fuzz.fuzz(1, 0, _Refuses(), [(matmul, script)], mutations=["no_such_mutation"])
    assert fuzz.make_cases(25, 4, [(matmul, script)]) == fuzz.make_cases(25, 4, [(matmul, script)])


def test_report_ends_with_the_line_the_cli_prints():
    report = FuzzReport(evaluated=7, host_crashes=1, leaked_workers=2)
    report.by_mutation["clean"]["ok"] += 6
    report.stages["ok"] += 6
    report.crashes["deep_nesting: RecursionError"] += 1
    assert report.summary() == "evaluated: 7, host crashes: 1, leaked workers: 2"
    lines = report.table().splitlines()
    assert lines[-1] == report.summary()
    assert lines[0].split() == ["mutation", "decode", "apply", "validate", "build", "run", "check", "time", "ok"]
    assert lines[1].split() == ["clean", "0", "0", "0", "0", "0", "0", "0", "6"]
    assert "host crash: deep_nesting: RecursionError x1" in lines


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator("cpu", EvalConfig(workers=1, time=False, timeout_sec=60)) as ev:
        yield ev


def test_fuzz_on_a_real_evaluator_never_crashes_the_host(evaluator, matmul):
    bases = fuzz.sample_scripts([matmul], get_target("cpu"), per_workload=2, seed=0)
    report = fuzz.fuzz(30, 0, evaluator, bases, progress=False)
    assert report.evaluated == 30
    assert report.host_crashes == 0, report.crashes


def test_red_team_on_a_real_evaluator_is_refused_and_leaves_nothing_behind(matmul):
    bases = fuzz.sample_scripts([matmul], get_target("cpu"), per_workload=2, seed=0)
    before = {p.pid for p in workers.descendants()}
    with Evaluator("cpu", EvalConfig(workers=1, time=False, timeout_sec=60)) as ev:
        report = fuzz.fuzz(30, 7, ev, bases, progress=False, mutations=RED_TEAM)
    time.sleep(0.5)
    leaked = [p for p in workers.descendants() if p.pid not in before and p.is_running()
              and p.status() != psutil.STATUS_ZOMBIE]
    assert report.evaluated == 30 and report.host_crashes == 0, report.crashes
    assert not report.marker_touched, f"injected code ran: {redteam.MARKER} exists"
    assert leaked == []
    # MAY FAIL UNTIL THE EVALUATOR'S HARDENING LANDS (evaluate.py / codec.py, another engineer):
    # no construct that must be refused is judged correct ("ok", or "time" with a latency; with
    # time=False a correct kernel ends "ok"). `unrefused` names each one and the stage it reached.
    assert report.unrefused == [], report.unrefused


def _must_refuse_sample() -> list:
    """A fixed cross-section of the must-refuse constructs: graphs that call out and harmless
    ones in every value slot, every predication spelling, free variables named like externs,
    every decodable deep nesting, the code-injecting annotation keys and filter-dodging key
    spellings with every value type, and every huge count."""
    cases = red_team_cases()
    graphs = ("map_system", "expr_system", "harmless_map_identity", "harmless_expr_int")
    keys = ("'pragma_import_llvm'", "'pragma_import_c'", "'pragma_debug_skip_region'") + tuple(map(repr, redteam.ODD_KEYS))
    return [(name, c) for name, c in
            [("verbatim_graph", c) for c in cases["verbatim_graph"] if c.label.split(":")[1] in graphs]
            + [("predication", c) for c in cases["predication"]]
            + [("extern_map", c) for c in cases["extern_map"] if c.label.endswith(":free_var")]
            + [("deep_nesting", c) for c in cases["deep_nesting"]]
            + [("annotation_keys", c) for c in cases["annotation_keys"] if c.label.rsplit("=", 1)[0] in keys]
            + [("huge_counts", c) for c in cases["huge_counts"]]
            if c.refuse]


def test_red_team_constructs_that_must_be_refused_are_never_judged_correct(matmul, script):
    # MAY FAIL UNTIL THE EVALUATOR'S HARDENING LANDS (evaluate.py / codec.py, another engineer).
    # Deterministic: the same cross-section every run; the assertion lists each construct that
    # got through, with the stage it reached. Refusal should be by form: a verbatim graph is
    # refused even when its content is harmless.
    sample = _must_refuse_sample()
    mutants = [apply_case(c, script, random.Random(k)) for k, (_, c) in enumerate(sample)]
    with Evaluator("cpu", EvalConfig(workers=1, time=False, timeout_sec=20)) as ev:
        results = ev.evaluate_many([(matmul, m) for m in mutants], progress=False)
    assert len(sample) > 250
    through = [(f"{name}:{m.case}", e.stage) for (name, _), m, e in zip(sample, mutants, results)
               if e.stage in ("ok", "time")]
    assert through == [], through
