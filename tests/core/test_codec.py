"""The codec: scripts decode to exactly the trace they came from, and bad scripts fail clearly."""

import json
import math
import re
import statistics

import pytest
import tvm_ffi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dragonlab.core import codec
from dragonlab.core.codec import ScriptSyntaxError, TraceFormatError, UnknownInstructionError
from dragonlab.testing import trace_corpus

INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@pytest.fixture(scope="module")
def exotic():
    return trace_corpus.exotic()


def exact(a, b) -> bool:
    """`==` that also tells True from 1 and 1 from 1.0."""
    return a == b and json.dumps(a) == json.dumps(b)


def as_json(trace) -> list:
    """`Trace.as_json()` in plain Python, converted here independently of the codec."""
    from tvm.tirx import FloatImm, IntImm

    def plain(o):
        if isinstance(o, IntImm):
            return bool(o.value) if o.ty.dtype == "bool" else int(o.value)
        if isinstance(o, FloatImm):
            return float(o.value)
        return str(o) if isinstance(o, str) else o if o is None or isinstance(o, (bool, int, float)) \
            else [plain(x) for x in o]

    return plain(trace.as_json(remove_postproc=False))


def kinds(samples) -> set:
    return {inst[0] for s in samples for inst in codec.to_plain(s.trace)[0]}


def test_corpus_covers_cpu_cuda_tensor_core_and_postprocessing(corpus):
    seen = kinds(corpus)
    for kind in ("GetSBlock", "GetLoops", "GetConsumers", "GetProducers", "GetChildBlocks", "Annotate", "Unannotate",
                 "Split", "Fuse", "Reorder", "Bind", "CacheRead", "CacheWrite", "SetScope", "ComputeAt",
                 "ReverseComputeAt", "ComputeInline", "ReverseComputeInline", "RFactor", "Parallel", "Vectorize",
                 "DecomposeReduction", "EnterPostproc", "Blockize", "Tensorize", "ReIndex", "TransformLayout",
                 "TransformBlockLayout", "StorageAlign", "SamplePerfectTile", "SampleCategorical",
                 "SampleComputeLocation"):
        assert kind in seen, kind
    assert {s.target for s in corpus} == {"llvm", "cuda"} and {s.source for s in corpus} == {"space", "post"}


def test_round_trip_is_exact_on_design_spaces_and_postprocessed_traces(corpus):
    for s in corpus:
        script = codec.encode(s.trace)
        assert exact(codec.decode(script), codec.to_plain(s.trace)), s.name
        assert exact(codec.decode(script), as_json(s.trace)), s.name  # live traces are already canonical
        assert codec.encode(codec.decode(script)) == script


def test_applying_a_decoded_script_rebuilds_the_same_module(corpus):
    for s in corpus:
        rebuilt = codec.apply(codec.encode(s.trace), s.mod)
        assert tvm_ffi.structural_equal(rebuilt.mod, s.sch.mod), s.name
        assert tvm_ffi.structural_equal(rebuilt.mod, codec.apply(codec.to_plain(s.trace), s.mod).mod), s.name


def test_rarely_emitted_primitives_round_trip_and_rebuild(exotic):
    assert {"AddUnitLoop", "AnnotateBufferAccess", "CacheIndex", "DecomposePadding", "FuseReductionEpilogue",
            "GetOutputBlocks", "LoopPartition", "Merge", "PadEinsum", "ReadAt", "ReindexCacheRead",
            "ReindexCacheWrite", "ReorderBlockIterVar", "SamplePartitionedTile", "TransformBlockLayout",
            "Unroll", "UnsafeHideBufferAccess", "UnsafeSetDType", "WriteAt"} <= kinds(exotic)
    for s in exotic:
        script = codec.encode(s.trace)
        assert exact(codec.decode(script), codec.to_plain(s.trace)), s.name
        assert exact(codec.decode(script), as_json(s.trace)), s.name
        assert tvm_ffi.structural_equal(codec.apply(script, s.mod).mod, s.sch.mod), s.name


def test_every_kind_in_the_table_is_registered_in_tvm():
    from tvm.s_tir.schedule import InstructionKind

    for kind in codec.MNEMONICS:
        InstructionKind.get(kind)
    assert len(set(codec.MNEMONICS.values())) == len(codec.MNEMONICS)


def test_index_maps_are_readable_when_they_regenerate_exactly(corpus, exotic):
    lines = [line for s in corpus + exotic for line in codec.encode(s.trace).split("\n")
             if line.startswith(("layout ", "block_layout ", "reindex_"))]
    assert len(lines) >= 10 and not any('{"' in line for line in lines)
    assert any("|" in line for line in lines)  # an inverse map (RewriteLayout on llvm)
    assert any("@1" in line for line in lines)  # a shared sub-expression (tensor-core tiling)


def test_index_map_from_another_tvm_version_stays_verbatim(corpus):
    plain = next(codec.to_plain(s.trace) for s in corpus if "TransformLayout" in kinds([s]))
    inst = next(inst for inst in plain[0] if inst[0] == "TransformLayout")
    inst[1][1] = inst[1][1].replace('"tvm_version":"0.27.0.post1"', '"tvm_version":"9.9.9"')
    script = codec.encode(plain)
    assert '9.9.9' in script and exact(codec.decode(script), plain)


def test_database_records_decode_to_the_same_script(corpus, tmp_path):
    import tvm.s_tir.meta_schedule as ms
    from tvm.target import Target

    # Bool attributes (Split, Blockize, Tensorize, TransformLayout) and layout_rewrite_preproc.
    samples = [s for s in corpus if s.source == "post" and s.family in ("batch_matmul", "matmul_fp16_tc")]
    assert {"Blockize", "TransformLayout"} <= kinds(samples)
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    for s in samples:
        db.commit_tuning_record(ms.database.TuningRecord(s.trace, db.commit_workload(s.mod), run_secs=[1.0],
                                                         target=Target(trace_corpus.CPU)))
    lines = (tmp_path / "database_tuning_record.json").read_text().splitlines()
    stored = [json.loads(line)[1][0] for line in lines]
    assert any([1, 0] == inst[2] for trace in stored for inst in trace[0] if inst[0] == "Split")
    assert sorted(codec.encode(t) for t in stored) == sorted(codec.encode(s.trace) for s in samples)


def test_scripts_are_four_times_shorter_than_as_python(corpus):
    scripts = [len(codec.encode(s.trace)) for s in corpus]
    python = [len("\n".join(s.trace.as_python(remove_postproc=False))) for s in corpus]
    assert statistics.mean(p / c for p, c in zip(python, scripts)) >= 4.2  # 4.33 measured
    assert sum(python) / sum(scripts) >= 4.1  # 4.17: long tensor-core traces compress least


def small_plain() -> list:
    """A real trace with every decision kind, built without MetaSchedule (milliseconds)."""
    from tvm.s_tir import Schedule

    sch = Schedule(trace_corpus.matmul(64))
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    sch.split(i, sch.sample_perfect_tile(i, n=3))
    sch.annotate(block, "meta_schedule.unroll_explicit", sch.sample_categorical([0, 16, 64], [0.5, 0.25, 0.25]))
    sch.annotate(j, "pragma_auto_unroll_max_step", 16)
    sch.compute_at(sch.cache_read(block, 0, "global"), sch.sample_compute_location(block))
    sch.enter_postproc()
    return codec.to_plain(sch.trace)


SMALL = small_plain()
ANN = next(n for n, inst in enumerate(SMALL[0]) if inst[0] == "Annotate")  # its value is a variable
TEXT = st.text(max_size=30)
VALUES = st.recursive(
    st.none() | st.booleans() | INT64 | st.floats(allow_nan=False) | TEXT.map(lambda s: f'"{s}"'),
    lambda inner: st.lists(inner, max_size=4), max_leaves=8)
NAMES = TEXT.filter(lambda n: n and n != "None" and not (n[0] == "{" and n[-1] == "}")
                    and not (len(n) >= 2 and n[0] == n[-1] == '"'))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_round_trip_survives_mutated_decisions(data):
    plain = json.loads(json.dumps(SMALL))
    for decision in plain[1]:
        value = decision[1]
        decision[1] = data.draw(st.lists(INT64, max_size=6) if isinstance(value, list) else INT64)
    assert exact(codec.decode(codec.encode(plain)), plain)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_round_trip_survives_mutated_annotations_and_block_names(data):
    plain = json.loads(json.dumps(SMALL))
    for kind, inputs, attrs, _ in plain[0]:
        if kind == "Annotate":
            inputs[1] = data.draw(VALUES)
            attrs[0] = data.draw(TEXT)
        if kind == "GetSBlock":
            attrs[:] = [data.draw(TEXT), data.draw(TEXT)]
    expected = codec.to_plain(plain)  # None inputs become "None", as TVM reads them
    assert exact(codec.decode(codec.encode(plain)), expected)


@settings(max_examples=150, deadline=None)
@given(st.lists(NAMES, min_size=40, max_size=40, unique=True))
def test_round_trip_survives_non_canonical_output_names(names):
    plain = json.loads(json.dumps(SMALL))
    rename = {}
    for inst in plain[0]:
        inst[1] = [rename.get(v, v) if isinstance(v, str) else [rename.get(x, x) for x in v] if isinstance(v, list)
                   else v for v in inst[1]]
        for k, old in enumerate(inst[3]):
            rename[old] = inst[3][k] = names[len(rename)]
    script = codec.encode(plain)
    assert exact(codec.decode(script), plain)


def test_special_floats_round_trip():
    plain = json.loads(json.dumps(SMALL))
    for value in (1e-300, 5e-324, -0.0, 1.7976931348623157e308, math.inf, -math.inf):
        plain[0][ANN][1][1] = value
        assert exact(codec.decode(codec.encode(plain)), plain)
    plain[0][ANN][1][1] = math.nan
    assert math.isnan(codec.decode(codec.encode(plain))[0][ANN][1][1])


def test_weird_strings_are_quoted_and_come_back():
    plain = json.loads(json.dumps(SMALL))
    for text in ('a"b', "line\nbreak", "tab\t\\", "üñí©ødé ✓", "\x00\x1f\x7f\u2028", "{not a map}", "ms.x", "true",
                 "", "None", "C D"):
        plain[0][0][2][0] = text  # GetSBlock name
        plain[0][ANN][1][1] = f'"{text}"'  # an Annotate string value
        script = codec.encode(plain)
        assert len(script.split("\n")) == len(plain[0]) and exact(codec.decode(script), plain), text


def test_database_style_bools_canonicalise():
    plain = json.loads(json.dumps(SMALL))
    split = next(inst for inst in plain[0] if inst[0] == "Split")
    assert split[2] == [True, False]
    split[2] = [1, 0]
    assert exact(codec.to_plain(plain), SMALL)


def test_every_prefix_is_accepted_and_truncations_fail_with_a_position(corpus, exotic):
    tensor_core = codec.encode(next(s.trace for s in corpus if s.family == "matmul_fp16_tc")).split("\n")
    shared = next(n for n, line in enumerate(tensor_core) if "@1" in line)  # index map with shared terms
    scripts = [codec.encode(SMALL), "\n".join(tensor_core[:shared + 1])]
    scripts += [codec.encode(s.trace) for s in exotic if s.family in ("annotations", "layouts", "partition")]
    for script in scripts:
        check_every_prefix(script)


def check_every_prefix(script: str):
    for end in range(len(script) + 1):
        prefix = script[:end]
        codec.check_prefix(prefix)
        try:
            codec.decode(prefix)
        except ScriptSyntaxError as e:
            assert e.line == prefix.count("\n") + 1 and 1 <= e.column <= len(prefix.split("\n")[-1]) + 1
            assert f"line {e.line}, column {e.column}" in str(e)


@pytest.mark.parametrize("text, line, message", [
    ("get C\nloops b9 >3", 2, "b9"),
    ("get C\nlopz b0", 2, "unknown instruction 'lopz'"),
    ("get C\nloops b0 >3 extra", 2, "expected end of line"),
    ("get C\ntile b0 =[1,", 2, "a value"),
    ("get C\n\nloops b0", 2, "empty line"),
    ("get C\ntile b0 64 =[1,2] >x None", 2, "variable name"),
    ("get C\nann b0 unroll \"open", 2, "closing"),
    ("get C\nlayout b0 {i->i//} 0 0", 2, "expression"),
    ("get C\nlayout b0 {i->@3} 0 0", 2, "label @3"),
    ('get "C\\q"', 1, "escape"),
    ("split", 1, "argument (rv)"),
])
def test_decode_errors_name_line_column_and_what_was_expected(text, line, message):
    with pytest.raises(ScriptSyntaxError, match=r"line \d+, column \d+: .*" + re.escape(message)) as info:
        codec.decode(text)
    assert info.value.line == line and info.value.column >= 1


def test_reordered_lines_fail_on_the_reference_before_its_definition():
    script = codec.encode(SMALL).split("\n")
    script[1], script[2] = script[2], script[1]  # tile l1 ... before loops b0 >3
    with pytest.raises(ScriptSyntaxError, match="used before it is defined: 'l1'") as info:
        codec.decode("\n".join(script))
    assert (info.value.line, info.value.column) == (2, 6)


@pytest.mark.parametrize("prefix", ["xyz", "get C\nloops b9", "get C\nloops b0 >3\ntile l1 =[1,,", "get C\nloops b0 >3 x",
                                    "get C \n", "get \"C\"\nann b0 k \"\\q",
                                    "get C\nloops b0 >3\nfuse l1..40282346638",  # no run is that long
                                    "get C\nloops b0 >3\nfuse l3.."])  # nothing after l3 to run to
def test_check_prefix_rejects_what_cannot_be_continued(prefix):
    with pytest.raises(ScriptSyntaxError):
        codec.check_prefix(prefix)


def test_unknown_instruction_kind_fails_loudly_both_ways():
    plain = json.loads(json.dumps(SMALL))
    plain[0][1][0] = "SampleBogus"
    with pytest.raises(UnknownInstructionError, match="SampleBogus"):
        codec.encode(plain)
    with pytest.raises(ScriptSyntaxError, match="unknown instruction 'sample_bogus'"):
        codec.decode("get C\nsample_bogus b0")


def test_malformed_traces_are_rejected_when_encoding():
    plain = json.loads(json.dumps(SMALL))
    for broken in ([plain[0]], [[["GetLoops", ["b7"], [], ["l1"]]], []], [[["GetLoops", [], [], []]], []],
                   [plain[0], [[99, 1]]], [[["GetSBlock", [], ["C", "main"], ["b0"]], ["Annotate", ["b0", {"a": 1}], ["k"], []]], []],
                   [[["GetSBlock", [], ["C", "main"], ["b0"]], ["Annotate", ["b0", 1 << 70], ["k"], []]], []]):
        with pytest.raises(TraceFormatError):
            codec.encode(broken)


def test_oversized_and_absurd_input_is_rejected():
    with pytest.raises(ScriptSyntaxError, match="longer than"):
        codec.decode("get C\n" * (codec.MAX_SCRIPT_CHARS // 6 + 1))
    for text in ("get C\nloops b0 >3\ntile l1 =[" + "9" * 5000 + "]", "get C\nloops b0 >100000",
                 "get C\nann b0 k " + "[" * 100 + "]" * 100, "get C\nloops b0 >3\ntile l1 64 99999"):
        with pytest.raises(ScriptSyntaxError):
            codec.decode(text)


@pytest.mark.parametrize("text, limit", [
    ("get C\nlayout b0 {i->" + "(" * 2000 + "i" + ")" * 2000 + "} 0 1", "nested too deeply"),
    ("get C\nlayout b0 {i->" + "+".join(["i"] * 2000) + "} 0 1", "nested too deeply"),
    ("get C\nlayout b0 {i->" + ",".join(["i+1"] * 300) + "} 0 1", "more than 256 operations"),
    ("get C\nlayout b0 {" + "->|" * 2000 + "->} 0 1", "index maps nested too deeply"),
    ("get C\nann b0 k " + "[" * 2000 + "]" * 2000, "nested too deeply"),
    ("get C\n" + "loops b0 >1024\n" * 10_000, "more than 4096 lines"),
    ("get C\n" + "loops b0 >1024\n" * 17, "more than 16384 variables"),
    ("get C\nloops b0 >3\nreorder " + " ".join(["l1"] * 40_000), "longer than 65536"),
])
def test_decoding_is_bounded_and_says_which_bound(text, limit):
    """A bound is a ScriptSyntaxError naming it, from decode, check_prefix and LineReader alike;
    never a RecursionError, never gigabytes (10,000 `loops b0 >1024` lines took 1.5 GB and 9 s)."""
    import time

    start = time.perf_counter()
    for check in (codec.decode, codec.check_prefix):
        with pytest.raises(ScriptSyntaxError, match=limit):
            check(text)
    reader = codec.LineReader(("b0", "l1"), 2)
    for line in text.split("\n"):
        try:
            inst = reader.read(line, open_end=False)
            reader.commit(inst[0])
        except ScriptSyntaxError:
            break
    assert time.perf_counter() - start < 5


def test_deeply_nested_trace_json_is_a_format_error():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(TraceFormatError, match="nested more than"):
        codec.to_plain([[["GetSBlock", [], ["C", "main"], ["b0"]], ["Annotate", ["b0", deep], ["k"], []]], []])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=80) | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
def test_garbage_is_a_syntax_error_never_a_crash(text):
    for check in (codec.decode, codec.check_prefix):
        try:
            check(text)
        except ScriptSyntaxError:
            pass


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 400), st.text(max_size=3))
def test_corrupted_real_scripts_fail_only_with_syntax_errors(cut, junk):
    script = codec.encode(SMALL)
    broken = script[:cut % (len(script) + 1)] + junk + script[cut % (len(script) + 1):]
    try:
        codec.decode(broken)
    except ScriptSyntaxError:
        pass


def test_table_defaults_are_what_a_script_means_when_it_leaves_them_out():
    defaults = {(k.mnemonic, n): p.default for k in codec.KINDS.values() for n, p in enumerate(k.params)
                if not callable(p.default) and p.default != ()}
    expected = {
        ("get", 1): "main", ("tile", 1): 64, ("split", 2): True, ("split", 3): False, ("partition", 2): 1,
        ("fuse", 1): 1, ("ann", 2): 1, ("cache_read", 3): [], ("cache_write", 3): [], ("at", 2): 1, ("at", 3): -1,
        ("rev_at", 2): 1, ("rev_at", 3): -1, ("blockize", 1): True, ("tensorize", 2): True, ("layout", 4): None,
        ("layout", 5): True}
    assert defaults.keys() == expected.keys() and all(exact(v, expected[k]) for k, v in defaults.items())
    assert {(k.mnemonic, n) for k in codec.KINDS.values() for n, p in enumerate(k.params) if callable(p.default)} \
        == {("tile", 2), ("ptile", 3), ("cat", 1)}
    head = "get C\nloops b0 >3\n"
    for short, full in (("get D", "get D main"), ("ann b0 par", "ann b0 par 1"), ("tile l1 =[2,2]", "tile l1 64 2 =[2,2]"),
                        ("cache_read b0 0 global", "cache_read b0 0 global []"), ("at b0 l1", "at b0 l1 1 -1"),
                        ("split l1 4 8", "split l1 4 8 ; true false"), ("fuse l1..3", "fuse l1..3 ; 1"),
                        ("layout b0 {i->i} 0 0", "layout b0 {i->i} 0 0 None true"), ("cat [1,2] =0", "cat [1,2] [0.5,0.5] =0")):
        assert exact(codec.decode(head + short), codec.decode(head + full)), short


def test_line_reader_reports_how_far_an_open_line_got():
    reader = codec.LineReader(("b0", "l1"), 2)
    assert reader.read("tile l1 64 =[1,") is None
    assert (reader.kind.mnemonic, reader.written, reader.decision_at) == ("tile", 2, 12)  # "[1," starts at 12
    inst, decision = reader.read("tile l1 =[4,2]", open_end=False)
    assert inst == ["SamplePerfectTile", ["l1"], [2, 64], ["v2", "v3"]] and decision == [4, 2]
    reader.commit(inst)
    assert reader.outputs == 4 and {"v2", "v3"} <= reader.defined
    with pytest.raises(ScriptSyntaxError, match="line 7, column 7: .*'v9'") as info:
        reader.read("split v9", open_end=False, lineno=7)
    assert (info.value.line, info.value.column) == (7, 7)
