"""Scripts: the compact, lossless text of MetaSchedule traces that the model reads and writes.

A trace's JSON form is `[insts, decisions]`, each instruction `[kind, inputs, attrs, outputs]`
(`docs/codec.md`). A script has one instruction per line, read left to right:

    get C                      b0 = sch.get_sblock("C")
    loops b0 >3                l1, l2, l3 = sch.get_loops(b0)
    tile l1 =[4,4,2,8]         v4..v7 = sch.sample_perfect_tile(l1, n=4, decision=[4, 4, 2, 8])
    split l1 v4..7             l8..l11 = sch.split(l1, [v4, v5, v6, v7])
    ann b0 par 32              sch.annotate(b0, "meta_schedule.parallel", 32)

`decode(encode(t)) == to_plain(t)` for every trace: kinds, inputs, attributes, decisions and
output names all come back. A script leaves out only what is derivable: output names that follow
TVM's numbering (b0, l1, v2, ...: prefix by kind, number by position), attribute defaults, and
two attributes implied by their line (a tile's length, `cat`'s uniform probabilities); runs of
consecutive variables are abbreviated (v4..7), index maps written as lambdas (indexmap.py).
Decisions sit on their line, so decoding needs no workload. Parsing is a strict recursive descent
over characters (never eval) that can also vet a prefix, for constrained decoding. docs/codec.md
has the grammar, examples and measurements.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dragonlab.core import indexmap
from dragonlab.core.errors import InputError
from dragonlab.core.indexmap import MAX_DEPTH

# Bounds on what a script may ask of the parser (real scripts: a few KB, under 400 lines and 2,000
# variables; the longest line, a layout with a verbatim index map, about 3 KB). Without them a
# 150 KB script of `loops b0 >1024` lines took 1.5 GB and 9 s to decode.
MAX_SCRIPT_CHARS = 1 << 18
MAX_LINES = 4096
MAX_LINE_CHARS = 1 << 16
MAX_VARIABLES = 1 << 14  # outputs of all instructions together
MAX_OUTPUTS = 1024  # per instruction; real blocks have a few dozen loops at most
MAX_NESTING = 64  # of lists in a trace's JSON form
_INT64 = (-(1 << 63), (1 << 63) - 1)


class CodecError(InputError):
    """Base class of everything the codec rejects."""


class ScriptSyntaxError(CodecError):
    """A script (or prefix) that cannot be decoded; `.line` and `.column` are 1-based."""

    def __init__(self, message: str, line: int, column: int):
        super().__init__(f"line {line}, column {column}: {message}")
        self.line, self.column = line, column


class TraceFormatError(CodecError):
    """A trace JSON form that is not a well-formed trace, so it has no script."""


class UnknownInstructionError(TraceFormatError):
    """An instruction kind that the codec's table does not cover."""


# kind: (mnemonic, parameters in script order, outputs). A parameter is "src:type[=default]":
# src is i<n> (the n-th input), a<n> (the n-th attribute) or i* (the inputs after the fixed ones);
# type is rv (a variable), in (any input), at (any attribute), or int/bool/str/key/thread (an
# attribute; bools canonicalise from 1/0, the last three may be bare words). Required parameters
# come first so that trailing defaults can be dropped; a variadic i* runs to the end of the
# arguments, or to " ;" when an attribute after it is written. Outputs are "<prefix><count>":
# count is a number, "*" (written >N), "#" (one per variadic input) or "a0" (attribute 0's value).
# These are all 52 kinds that TVM 0.27 registers.
_TABLE = {
    "GetSBlock": ("get", "a0:str a1:str=main", "b1"),
    "GetLoops": ("loops", "i0:rv", "l*"),
    "GetChildBlocks": ("children", "i0:rv", "b*"),
    "GetProducers": ("producers", "i0:rv", "b*"),
    "GetConsumers": ("consumers", "i0:rv", "b*"),
    "GetOutputBlocks": ("output_blocks", "i0:rv", "b*"),
    "SamplePerfectTile": ("tile", "i0:rv a1:int=64 a0:int=decision_length", "va0"),
    "SamplePartitionedTile": ("ptile", "i0:rv a1:int a2:int a0:int=decision_length", "va0"),
    "SampleCategorical": ("cat", "a0:at a1:at=uniform", "v1"),
    "SampleComputeLocation": ("loc", "i0:rv", "l1"),
    "Split": ("split", "i0:rv i*:in a0:bool=true a1:bool=false", "l#"),
    "LoopPartition": ("partition", "i0:rv i*:in a0:int=1", "l#"),
    "Fuse": ("fuse", "i*:rv a0:int=1", "l1"),
    "Merge": ("merge", "i*:rv", "l1"),
    "Reorder": ("reorder", "i*:rv", "_0"),
    "AddUnitLoop": ("unit_loop", "i0:rv", "l1"),
    "Parallel": ("par", "i0:rv", "_0"),
    "Vectorize": ("vec", "i0:rv", "_0"),
    "Unroll": ("unroll", "i0:rv", "_0"),
    "Bind": ("bind", "i0:rv a0:thread", "_0"),
    "Annotate": ("ann", "i0:rv a0:key i1:in=1", "_0"),
    "Unannotate": ("unann", "i0:rv a0:key", "_0"),
    "CacheRead": ("cache_read", "i0:rv a0:int a1:str i1:in=[]", "b1"),
    "CacheWrite": ("cache_write", "i0:rv a0:int a1:str i1:in=[]", "b1"),
    "CacheInplace": ("cache_inplace", "i0:rv a0:int a1:str", "b*"),
    "CacheIndex": ("cache_index", "i0:rv a0:str a1:int", "b*"),
    "ReindexCacheRead": ("reindex_read", "i0:rv i1:in a0:int a1:str", "b1"),
    "ReindexCacheWrite": ("reindex_write", "i0:rv i1:in a0:int a1:str", "b1"),
    "ReIndex": ("reindex", "i0:rv a0:int a1:int", "b1"),
    "ReadAt": ("read_at", "i0:rv i1:rv a0:int a1:str", "b1"),
    "WriteAt": ("write_at", "i0:rv i1:rv a0:int a1:str", "b1"),
    "SetScope": ("set_scope", "i0:rv a0:int a1:str", "_0"),
    "StorageAlign": ("align", "i0:rv a0:int a1:int a2:int a3:int", "_0"),
    "UnsafeSetDType": ("set_dtype", "i0:rv a0:int a1:str", "_0"),
    "ComputeAt": ("at", "i0:rv i1:rv a0:int=1 a1:int=-1", "_0"),
    "ReverseComputeAt": ("rev_at", "i0:rv i1:rv a0:int=1 a1:int=-1", "_0"),
    "ComputeInline": ("inline", "i0:rv", "_0"),
    "ReverseComputeInline": ("rev_inline", "i0:rv", "_0"),
    "FuseReductionEpilogue": ("fuse_epilogue", "i0:rv i1:rv", "_0"),
    "DecomposeReduction": ("decomp", "i0:rv i1:rv", "b1"),
    "DecomposePadding": ("decomp_padding", "i0:rv i1:rv", "b1"),
    "RFactor": ("rfactor", "i0:rv a0:int", "b1"),
    "Blockize": ("blockize", "i0:in a0:bool=true", "b1"),
    "Tensorize": ("tensorize", "i0:rv a0:str a1:bool=true", "_0"),
    "TransformLayout": ("layout", "i0:rv i1:in a0:int a1:int a2:at=None a3:bool=true", "_0"),
    "TransformBlockLayout": ("block_layout", "i0:rv a0:at", "_0"),
    "PadEinsum": ("pad_einsum", "i0:rv a0:at", "_0"),
    "RollingBuffer": ("rolling_buffer", "i0:rv a0:int", "_0"),
    "ReorderBlockIterVar": ("reorder_iters", "i0:rv i1:in", "_0"),
    "AnnotateBufferAccess": ("ann_access", "i0:rv i1:in i2:in i3:in", "_0"),
    "UnsafeHideBufferAccess": ("hide_access", "i0:rv i1:in i2:in", "_0"),
    "EnterPostproc": ("postproc", "", "_0"),
}
# Defaults computed from the rest of the line (None: not derivable, so the value must be written).
_DERIVED = {
    "decision_length": lambda values, decision: len(decision) if isinstance(decision, list) else None,
    "uniform": lambda values, decision: [1.0 / len(values[0])] * len(values[0])
    if isinstance(values[0], list) and values[0] else None,
}
# Short spellings for two attribute types: the annotation keys MetaSchedule writes (s_tir/stmt.h)
# and `bind`'s thread axes. There a bare word is an alias or else the string itself, so a string
# spelled like an alias is quoted.
_ALIASES = {
    "key": {
        "tiling": "meta_schedule.tiling_structure", "coop": "meta_schedule.cooperative_fetch",
        "thread_lo": "meta_schedule.thread_extent_low_inclusive",
        "thread_hi": "meta_schedule.thread_extent_high_inclusive",
        "rand_producer": "meta_schedule.random_compute_producer", "par": "meta_schedule.parallel",
        "vec": "meta_schedule.vectorize", "unroll": "meta_schedule.unroll_explicit",
        "unroll_implicit": "meta_schedule.unroll_implicit", "intrin": "meta_schedule.auto_tensorize",
        "intrin_init": "meta_schedule.auto_tensorize_init", "inline_rule": "meta_schedule.inline_rule",
        "layout_rewrite_preproc": "meta_schedule.layout_rewrite_preproc",
        "auto_unroll": "pragma_auto_unroll_max_step", "explicit": "pragma_unroll_explicit",
        "pipeline_stage": "software_pipeline_stage", "pipeline_order": "software_pipeline_order",
        "pipeline_async": "software_pipeline_async_stages",
    },
    "thread": {f"{t[0]}{axis}": f"{t}.{axis}" for t in ("threadIdx", "blockIdx", "vthread") for axis in "xyz"},
    "str": {},
}
_SPELLING = {typ: {s: alias for alias, s in table.items()} for typ, table in _ALIASES.items()}
# MetaSchedule annotates this key with `true`, which the database file stores as 1.
_BOOL_ANNOTATIONS = {"meta_schedule.layout_rewrite_preproc"}
_KEYWORDS = {"None": None, "true": True, "false": False, "inf": math.inf, "nan": math.nan}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")  # string attributes that need no quotes
_NUMBER = re.compile(r"-?(?:inf|nan|[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)")
_NUMBER_PREFIX = re.compile(r"-?(?:i(?:nf?)?|n(?:an?)?|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?)?\Z")
_HEX = set("0123456789abcdef")
_RUN_NAME = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]{0,8})\Z")  # a variable that can start a run
_RUN = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]{0,8})\.\.(0|[1-9][0-9]{0,8})\Z")  # l4..7
_RUN_PREFIX = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]{0,8})\.\.?(0|[1-9][0-9]{0,8})?\Z")  # l4., l4..
_WORDS = {extra: re.compile(f"[A-Za-z0-9_{re.escape(extra)}]*") for extra in ("_", "_.")}


@dataclass(frozen=True)
class _Param:
    src: str  # "i" (an input) or "a" (an attribute)
    index: int | None  # None: the variadic inputs
    type: str
    default: object = ()  # () means required; a callable is derived from the line


@dataclass(frozen=True)
class _Kind:
    name: str
    mnemonic: str
    params: tuple[_Param, ...]
    prefix: str  # of the canonical output names
    count: str

    def derived_count(self, values: list) -> int | None:
        """How many outputs a line has when it does not say so (None: it must say so)."""
        if self.count == "*":
            return 0
        if self.count == "#":
            return len(next(v for p, v in zip(self.params, values) if p.index is None))
        if self.count == "a0":
            n = next(v for p, v in zip(self.params, values) if (p.src, p.index) == ("a", 0))
            return n if type(n) is int and 0 <= n <= MAX_OUTPUTS else None
        return int(self.count)


def _is_start(c: str) -> bool:
    return c.isascii() and (c.isalpha() or c == "_")


def _same(a, b) -> bool:
    """Equality that tells True from 1 and 1 from 1.0, which `==` does not."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def quote(s: str) -> str:
    """A string literal of the script grammar (JSON-like escapes, lower-case \\u hex)."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or 0xD800 <= ord(ch) <= 0xDFFF or ch in "\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")  # keeps each script line one printable UTF-8 line
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def to_plain(trace_or_json) -> list:
    """The canonical plain-Python JSON form `[insts, decisions]` of a Trace or of its JSON.

    The canonicalisation makes a database record agree with the live trace, and changes nothing
    TVM can tell apart: bool attributes (and the bool annotation above) that the database file
    writes as 1/0 become bools; an index map's JSON graph, which the database indents everywhere,
    is compact in inputs and indented in attributes, as `Trace.as_json` writes it; a null input
    becomes "None" (TVM reads both as None); decisions are sorted by instruction index.
    """
    raw = trace_or_json.as_json(remove_postproc=False) if hasattr(trace_or_json, "as_json") else trace_or_json
    plain = plain_value(raw, 0)
    if not (isinstance(plain, list) and len(plain) == 2 and all(isinstance(p, list) for p in plain)):
        raise TraceFormatError("a trace's JSON form is [instructions, decisions]")
    insts, decisions = plain
    for i, inst in enumerate(insts):
        if not (isinstance(inst, list) and len(inst) == 4 and isinstance(inst[0], str)
                and all(isinstance(part, list) for part in inst[1:])):
            raise TraceFormatError(f"instruction {i} is not [kind, inputs, attrs, outputs]")
        kind, inputs, attrs, _ = inst
        inst[1] = inputs = _canonical_inputs(inputs)
        for p in _KINDS[kind].params if kind in _KINDS else ():
            if p.src == "a" and p.index < len(attrs) and p.type == "bool" and _is_bit(attrs[p.index]):
                attrs[p.index] = bool(attrs[p.index])
            elif p.src == "a" and p.index < len(attrs) and p.type == "at":
                attrs[p.index] = _canonical_graph(attrs[p.index], indent=2)
        if kind == "Annotate" and len(inputs) == 2 and attrs and isinstance(attrs[0], str) \
                and attrs[0] in _BOOL_ANNOTATIONS and _is_bit(inputs[1]):
            inputs[1] = bool(inputs[1])
    if not all(isinstance(d, list) and len(d) == 2 and type(d[0]) is int for d in decisions):
        raise TraceFormatError("each decision is [instruction index, value]")
    decisions.sort(key=lambda d: d[0])
    return [insts, decisions]


def plain_value(o, depth: int = 0):
    if o is None or isinstance(o, (bool, int, float)):
        return o
    if isinstance(o, str):
        return str(o)
    if depth >= MAX_NESTING:
        raise TraceFormatError(f"values nested more than {MAX_NESTING} deep")
    if isinstance(o, Mapping):
        return {plain_value(k, depth + 1): plain_value(v, depth + 1) for k, v in o.items()}
    if isinstance(o, Sequence) and not isinstance(o, (bytes, bytearray)):
        return [plain_value(v, depth + 1) for v in o]
    from tvm.tirx import FloatImm, IntImm

    if isinstance(o, IntImm):
        return bool(o.value) if o.ty.dtype == "bool" else int(o.value)
    if isinstance(o, FloatImm):
        return float(o.value)
    raise TraceFormatError(f"cannot convert {type(o).__name__} to plain JSON")


def _is_bit(v) -> bool:
    return type(v) is int and v in (0, 1)


def _canonical_inputs(inputs: list) -> list:
    return ["None" if v is None else _canonical_inputs(v) if isinstance(v, list) else _canonical_graph(v, None)
            for v in inputs]


def _canonical_graph(v, indent: int | None):
    """An index map's JSON graph laid out as `Trace.as_json` lays it out; anything else unchanged."""
    if not (isinstance(v, str) and v[:1] == "{" and v[-1:] == "}"):
        return v
    try:
        graph = json.loads(v)
    except (ValueError, RecursionError):
        return v
    if not (isinstance(graph, dict) and "root_index" in graph and "nodes" in graph):
        return v
    return json.dumps(graph, indent=indent, separators=None if indent else (",", ":"), ensure_ascii=False)


def encode(trace) -> str:
    """The script of a Trace (or of its JSON form); raises TraceFormatError if it has none."""
    insts, decisions = to_plain(trace)
    by_index = {}
    for index, value in decisions:
        if not 0 <= index < len(insts) or index in by_index:
            raise TraceFormatError(f"decision for instruction {index} is out of range or repeated")
        by_index[index] = value
    defined, lines, start = set(), [], 0
    for i, (name, inputs, attrs, outputs) in enumerate(insts):
        if name not in _KINDS:
            raise UnknownInstructionError(f"instruction {i}: unknown instruction kind {name!r}")
        try:
            lines.append(_encode_line(_KINDS[name], inputs, attrs, outputs, by_index.get(i, ()), defined, start))
        except TraceFormatError as e:
            raise TraceFormatError(f"instruction {i} ({name}): {e}") from None
        defined.update(outputs)
        start += len(outputs)  # TVM numbers every output by how many came before it
    return "\n".join(lines)


def _encode_line(kind: _Kind, inputs, attrs, outputs, decision, defined: set, start: int) -> str:
    fixed = sum(p.src == "i" and p.index is not None for p in kind.params)
    n_attrs = sum(p.src == "a" for p in kind.params)
    variadic = any(p.index is None for p in kind.params)
    if len(inputs) < fixed or (len(inputs) > fixed and not variadic) or len(attrs) != n_attrs:
        raise TraceFormatError(f"expected {fixed} inputs and {n_attrs} attributes")
    if not all(isinstance(o, str) for o in outputs):
        raise TraceFormatError("output names must be strings")
    values = [inputs[fixed:] if p.index is None else (inputs if p.src == "i" else attrs)[p.index]
              for p in kind.params]
    keep = len(values)
    while keep and _is_default(kind.params[keep - 1], values[keep - 1], values, decision):
        keep -= 1
    words = [kind.mnemonic]
    for k, (p, v) in enumerate(zip(kind.params[:keep], values)):
        if p.index is None:
            words += _fmt_runs(v, p.type, defined) + ([";"] if k + 1 < keep else [])
        else:
            words.append(_fmt(v, p.src, p.type, defined))
    if decision != ():
        words.append("=" + _fmt(decision, "a", "at", defined))
    if outputs != [f"{kind.prefix}{start + j}" for j in range(len(outputs))]:
        words.append(">" + " ".join(_fmt_name(o) for o in outputs))
    elif len(outputs) != kind.derived_count(values):
        words.append(f">{len(outputs)}")
    return " ".join(words)


def _is_default(p: _Param, v, values: list, decision) -> bool:
    if callable(p.default):
        derived = p.default(values, decision)
        return derived is not None and _same(v, derived)
    return p.default != () and _same(v, p.default)


def _fmt_runs(values: list, typ: str, defined: set) -> list[str]:
    """Variadic inputs; three or more variables numbered one apart are written as a run `l4..7`."""
    words, i = [], 0
    while i < len(values):
        m = isinstance(values[i], str) and values[i] in defined and _RUN_NAME.match(values[i])
        j = i
        while m and j + 1 < len(values) and values[j + 1] == f"{m[1]}{int(m[2]) + j + 1 - i}" \
                and values[j + 1] in defined:
            j += 1
        words.append(f"{values[i]}..{int(m[2]) + j - i}" if j >= i + 2 else _fmt(values[i], "i", typ, defined))
        i = j + 1 if j >= i + 2 else i + 1
    return words


def _fmt_name(name: str) -> str:
    return name if _IDENT.match(name) and name not in _KEYWORDS else "$" + quote(name)


def _fmt(v, ctx: str, typ: str, defined: set) -> str:
    """One value. In ctx "i" (inputs) a string is a variable, "None", '"literal"' or an index map."""
    if typ == "rv" and not (isinstance(v, str) and v in defined):
        raise TraceFormatError(f"expected a defined variable, got {v!r}")
    if v is None or isinstance(v, bool):
        return "None" if v is None else "true" if v else "false"
    if isinstance(v, int):
        if not _INT64[0] <= v <= _INT64[1]:
            raise TraceFormatError(f"integer {v} does not fit in 64 bits")
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ",".join(_fmt(x, ctx, "in" if ctx == "i" else "at", defined) for x in v) + "]"
    if not isinstance(v, str):
        raise TraceFormatError(f"cannot write a {type(v).__name__} value")
    if v[:1] == "{" and v[-1:] == "}" and (ctx == "i" or typ == "at"):  # how TVM tells an index map
        return _imap_text(v, ctx)
    if ctx == "a":
        word = _SPELLING.get(typ, {}).get(v, v)
        bare = typ in _ALIASES and _BARE.match(word) and word not in _KEYWORDS and _ALIASES[typ].get(word, word) == v
        return word if bare else quote(v)
    if v == "None":
        return "None"
    if len(v) >= 2 and v[0] == v[-1] == '"':
        return quote(v[1:-1])
    if v not in defined:
        raise TraceFormatError(f"uses undefined variable {v!r}")
    return _fmt_name(v)


def design_part(plain: list) -> list:
    """The design part of a plain trace: its instructions before EnterPostproc, with their decisions.

    What follows EnterPostproc is what the target's post-processors write, a function of the design
    part and the target; MetaSchedule's own search drops it (`remove_postproc=True`) and runs the
    post-processors again, and so does the evaluator."""
    insts, decisions = plain
    cut = next((i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc"), len(insts))
    return [insts[:cut], [d for d in decisions if d[0] < cut]]


def decode(text: str, *, verbatim: bool = True) -> list:
    """The plain JSON form `[insts, decisions]` of a script; raises ScriptSyntaxError.

    `verbatim=False` refuses index maps written as verbatim JSON graphs (`{"..."}`), the form the
    encoder keeps for graphs the readable notation cannot regenerate (another TVM version's):
    text from a model has only the readable notation, arithmetic and nothing else."""
    return _Parser(text, verbatim=verbatim).run()


def check_prefix(text: str, *, verbatim: bool = True) -> None:
    """Raise ScriptSyntaxError unless `text` can still be continued into a valid script."""
    _Parser(text, prefix=True, verbatim=verbatim).run()


def apply(script_or_plain, mod, *, seed: int = 1):
    """A fresh `Schedule(mod)` with a script (or a plain JSON form, or a Trace) replayed on it.
    A tensorize names an intrinsic that only `tvm.s_tir.tensor_intrin` registers (a 20 s import),
    so that is imported the first time one is missing."""
    import sys

    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    plain = decode(script_or_plain) if isinstance(script_or_plain, str) else to_plain(script_or_plain)
    sch = Schedule(mod, seed=seed)
    try:
        Trace.apply_json_to_schedule(plain, sch)
    except Exception as e:
        if "TensorIntrin" not in str(e) or "tvm.s_tir.tensor_intrin" in sys.modules:
            raise
        import tvm.s_tir.tensor_intrin  # noqa: F401

        sch = Schedule(mod, seed=seed)
        Trace.apply_json_to_schedule(plain, sch)
    return sch


class _Incomplete(Exception):
    """The open last line of a prefix ended where more text would still be valid."""


class _Parser(indexmap.MapReader):
    """Recursive descent over one line at a time; every choice is made on the next character.

    In prefix mode the last line is open: running out of it where more text could follow is not
    an error (`_Incomplete` ends the parse), and a word cut off there only has to begin some valid
    word. Everything before the cut is checked as strictly as in a full script.
    """

    def __init__(self, text: str, prefix: bool = False, verbatim: bool = True):
        if not isinstance(text, str):
            raise ScriptSyntaxError(f"a script is text, not {type(text).__name__}", 1, 1)
        if len(text) > MAX_SCRIPT_CHARS:
            raise ScriptSyntaxError(f"script is longer than {MAX_SCRIPT_CHARS} characters", 1, 1)
        self.lines = text.split("\n")
        if not prefix and self.lines[-1] == "":  # a final newline is allowed
            self.lines.pop()
        if len(self.lines) > MAX_LINES:
            raise ScriptSyntaxError(f"script has more than {MAX_LINES} lines", MAX_LINES + 1, 1)
        self.prefix, self.line, self.pos, self.lineno, self.open_end = prefix, text, 0, 1, False
        self.verbatim = verbatim
        self.defined, self.outputs, self.free, self.labels, self.scope = set(), 0, {}, {}, {}
        self._start_line()

    def _start_line(self) -> None:
        """How far the parser got in the current line (read by LineReader's users)."""
        self.kind: _Kind | None = None
        self.param: int | None = None  # index in kind.params of the argument being read
        self.values: list = []  # the arguments read so far
        self.written, self.value_end = 0, 0  # how many were written (not defaults), where the last ends
        self.value_start = 0  # where the argument being read starts
        self.decision_at = self.outputs_at = None  # where the text after ' =' and ' >' starts

    def run(self) -> list:
        insts, decisions = [], []
        for n, line in enumerate(self.lines):
            self.line, self.pos, self.lineno = line, 0, n + 1
            self.open_end = self.prefix and n == len(self.lines) - 1
            self._start_line()
            try:
                inst, decision = self._instruction()
            except _Incomplete:
                break
            self._count_outputs(inst)
            self.defined.update(inst[3])
            if decision != ():
                decisions.append([len(insts), decision])
            insts.append(inst)
        return [insts, decisions]

    def _count_outputs(self, inst: list) -> None:
        if self.outputs + len(inst[3]) > MAX_VARIABLES:
            self._error(f"script defines more than {MAX_VARIABLES} variables", 0)
        self.outputs += len(inst[3])

    def _error(self, message: str, pos: int | None = None):
        raise ScriptSyntaxError(message, self.lineno, (self.pos if pos is None else pos) + 1)

    def _peek(self) -> str:
        return self.line[self.pos:self.pos + 1]

    def _missing(self, expected: str):
        """The line ended where `expected` must follow: fine in an open prefix, else an error."""
        if self.open_end:
            raise _Incomplete
        self._error(f"expected {expected}, found end of line")

    def _fail(self, expected: str, start: int | None = None):
        """`expected` is not what comes next (or nothing comes next)."""
        if self._peek() == "":
            self._missing(expected)
        self._error(f"expected {expected}, found {self._peek()!r}", start)

    def _fail_item(self, expected: str):
        """`expected` should have been the next item, after a ' '."""
        if self._peek() == "":
            self._missing(expected)
        self._error(f"expected {expected}, found {self.line[self.pos + 1:self.pos + 2]!r}", self.pos + 1)

    def _expect(self, ch: str, expected: str):
        if self._peek() != ch:
            self._fail(expected)
        self.pos += 1

    def _word(self, extra: str = "_") -> str:
        """ASCII letters, digits and the characters of `extra`, from here on (maybe none)."""
        end = _WORDS[extra].match(self.line, self.pos).end()
        start, self.pos = self.pos, end
        return self.line[start:end]

    def _unknown(self, message: str, word: str, start: int, candidates):
        """A word that names nothing, unless the open prefix can still grow into a candidate."""
        if self.open_end and self.pos == len(self.line) and any(c.startswith(word) for c in candidates):
            raise _Incomplete
        self._error(f"{message} {word[:40] + ('...' if len(word) > 40 else '')!r}", start)

    def _next_item(self, expected: str) -> str:
        """After a ' ', the first character of the next item; '' at the end of the line."""
        if self._peek() == "":
            return ""
        if self._peek() != " ":
            self._error(f"expected ' ' or end of line, found {self._peek()!r}")
        if self.pos + 1 == len(self.line):
            self.pos += 1
            self._missing(expected)
        return self.line[self.pos + 1]

    def _instruction(self):
        if len(self.line) > MAX_LINE_CHARS:
            self._error(f"line is longer than {MAX_LINE_CHARS} characters", 0)
        if self._peek() == "":
            self._missing("an instruction") if self.open_end else self._error("empty line; expected an instruction")
        start, word = self.pos, self._word()
        kind = BY_MNEMONIC.get(word)
        if kind is None:
            self._unknown("unknown instruction", word, start, BY_MNEMONIC)
        self.kind = kind
        values = self._arguments(kind)
        decision, names = (), None
        if self._next_item("'=' or '>'") == "=":
            self.pos += 2
            self.decision_at = self.pos
            decision = self._value("a", "at", 0)
        for i, v in enumerate(values):
            if callable(v):
                values[i] = v(values, decision)
                if values[i] is None:
                    self._fail_item(f"a decision, or parameter {i + 1} of {kind.mnemonic}")
        count = kind.derived_count(values)
        if self._next_item("'>'") == ">":
            self.pos += 2
            self.outputs_at = self.pos
            count, names = self._outputs()
        if self._next_item("end of line") != "":
            self._error(f"expected end of line, found {self.line[self.pos + 1]!r}", self.pos + 1)
        if names is None:
            if count is None:
                self._missing(f"'>N' (the number of outputs of this {kind.mnemonic})")
            names = [f"{kind.prefix}{self.outputs + j}" for j in range(count)]
        by_index = sorted((p.src, p.index, k) for k, p in enumerate(kind.params) if p.index is not None)
        inputs = [values[k] for src, _, k in by_index if src == "i"]
        inputs += next((v for p, v in zip(kind.params, values) if p.index is None), [])
        return [kind.name, inputs, [values[k] for src, _, k in by_index if src == "a"], names], decision

    def _arguments(self, kind: _Kind) -> list:
        """One value per parameter: written, default, or (callable) derived from the line."""
        values, params = self.values, list(kind.params)
        expected = f"an argument of {kind.mnemonic}, '=' or '>'"
        while params:
            c = self._next_item(expected)
            if c in ("", "=", ">"):
                break
            p = params.pop(0)
            self.param, self.value_start = len(values), self.pos + 1
            if p.index is not None:
                self.pos += 1
                values.append(self._value(p.src, p.type, 0))
                self.value_end, self.written = self.pos, len(values)
                continue
            items = []
            while c not in ("", "=", ">", ";"):
                self.pos += 1
                items += self._run(p.type)
                c = self._next_item(expected)
            values.append(items)
            self.value_end, self.written = self.pos, len(values)
            if c != ";":
                break  # no ';': the attributes after a variadic input keep their defaults
            if not params:
                self._error("';' separates variadic inputs from the attributes after them", self.pos + 1)
            self.pos += 2
            if self._next_item("an attribute after ';'") in ("", "=", ">"):
                self._fail_item("an attribute after ';'")
        for p in params:
            if p.default == ():
                self._fail_item(f"an argument ({p.type}) of {kind.mnemonic}")
            values.append(p.default if callable(p.default) else json.loads(json.dumps(p.default)))  # a copy
        return values

    def _run_continues(self, prefix: str, lo: int, digits: str) -> bool:
        """Whether a run from `prefix``lo` whose last number begins with `digits` can still be
        completed: the last number has more digits to come, is above lo, and every variable
        up to it can be named here."""
        usable, top = self.names(), lo
        while top < lo + MAX_OUTPUTS and f"{prefix}{top + 1}" in usable:
            top += 1
        return any(str(n).startswith(digits) and str(n) != digits for n in range(lo + 1, top + 1))

    def _run(self, typ: str) -> list:
        """One variadic input, or a run `l4..7` of defined variables numbered one apart."""
        start = self.pos
        word = self._word("_.") if _is_start(self._peek()) else ""
        at_end = self.open_end and self.pos == len(self.line)
        m = _RUN.match(word)
        if m is None:
            p = _RUN_PREFIX.match(word)
            if at_end and p and self._run_continues(p[1], int(p[2]), p[3] or ""):  # l4. or l4..
                raise _Incomplete
            self.pos = start
            return [self._value("i", typ, 0)]
        lo, hi = int(m[2]), int(m[3])
        names = [f"{m[1]}{n}" for n in range(lo, hi + 1)] if lo < hi <= lo + MAX_OUTPUTS else []
        usable = self.names()
        undefined = next((n for n in names if n not in usable), None)
        if not names or undefined:
            if at_end and self._run_continues(m[1], lo, m[3]):  # l1..1 may become l1..12
                raise _Incomplete
            self._error(f"variable used before it is defined: {undefined!r}" if names
                        else "a run of variables counts up, as in l4..7", start)
        return names

    def _outputs(self):
        if self._peek().isdigit():
            start, n = self.pos, self._number()
            if type(n) is not int or n > MAX_OUTPUTS:
                self._error(f"an output count is an integer up to {MAX_OUTPUTS}", start)
            return n, None
        names = [self._name()]
        while self._peek() == " ":
            self.pos += 1
            names.append(self._name())
        return None, names

    def _name(self) -> str:
        if self._peek() == "$":
            self.pos += 1
            return self._string()
        start, word = self.pos, self._word()
        if not _IDENT.match(word) or word in _KEYWORDS:
            self.pos = start
            self._fail("a variable name")
        return word

    def _value(self, ctx: str, typ: str, depth: int):
        """One value. In inputs (ctx "i") strings come back as TVM stores them: names, "None", '"s"'."""
        if depth > MAX_DEPTH:
            self._error("values nested too deeply")
        c, start = self._peek(), self.pos
        if typ == "rv" and not (c == "$" or _is_start(c)):
            self._fail("a variable")
        if c == '"':
            s = self._string()
            return '"' + s + '"' if ctx == "i" else s
        if c == "[":
            self.pos += 1
            items = []
            while self._peek() != "]":
                if items:
                    self._expect(",", "',' or ']'")
                items.append(self._value(ctx, "in" if ctx == "i" else "at", depth + 1))
            self.pos += 1
            return items
        if c == "{":
            return self._imap(pretty=ctx == "a")
        if c == "-" or c.isdigit():
            return self._number()
        if c == "$" and ctx == "i":
            self.pos += 1
            return self._reference(self._string(), start)
        if _is_start(c):
            word = self._word("_.")
            if word in _KEYWORDS and typ != "rv":
                return "None" if word == "None" and ctx == "i" else _KEYWORDS[word]
            if typ in _ALIASES:
                return _ALIASES[typ].get(word, word)
            if ctx == "i" and "." not in word:
                return self._reference(word, start, keywords=typ != "rv")
            self._unknown("expected a value, found", word, start, _KEYWORDS)
        self._fail("a value")

    def _reference(self, name: str, start: int, keywords: bool = True) -> str:
        """A variable; `keywords`: the word may also be the start of None, true, ... instead."""
        usable = self.names()
        if name not in usable:
            message = "variable used before it is defined:" if name not in self.defined else \
                f"parameter {(self.param or 0) + 1} of {self.kind.mnemonic} cannot take the variable"
            self._unknown(message, name, start, set(usable) | (set(_KEYWORDS) if keywords else set()))
        return name

    def names(self):
        """The variables the argument being read may name: every one defined so far."""
        return self.defined

    def _number(self):
        start = self.pos
        m = _NUMBER.match(self.line, start)
        end = m.end() if m else start
        if end == start or _is_start(self.line[end:end + 1]) or self.line[end:end + 1] == ".":
            if self.open_end and _NUMBER_PREFIX.match(self.line, start):
                raise _Incomplete
            self._error(f"malformed number {self.line[start:end + 1]!r}", start)
        self.pos, text = end, m.group(0)
        if m.group(1) or m.group(2) or text.lstrip("-") in ("inf", "nan"):
            return float(text)
        if len(text) > 20 or not _INT64[0] <= int(text) <= _INT64[1]:  # no int() of a huge literal
            self._error(f"integer {text[:24]!r} does not fit in 64 bits", start)
        return int(text)

    def _string(self) -> str:
        self._expect('"', "'\"'")
        out = []
        while (c := self._peek()) != '"':
            if c == "":
                self._missing("a closing '\"'")
            if c < " " or c == "\x7f":
                self._error("control character in a string; write it as \\uxxxx")
            self.pos += 1
            if c != "\\":
                out.append(c)
                continue
            e, hex4 = self._peek(), self.line[self.pos + 1:self.pos + 5]
            if e in ('"', "\\", "n", "t", "r"):
                out.append({"n": "\n", "t": "\t", "r": "\r"}.get(e, e))
            elif e == "u" and len(hex4) == 4 and set(hex4) <= _HEX:
                out.append(chr(int(hex4, 16)))
                self.pos += 4
            elif e == "" or (e == "u" and self.pos + 1 + len(hex4) == len(self.line) and set(hex4) <= _HEX):
                self._missing("the rest of an escape")
            else:
                self._error("unknown escape; expected one of \\\" \\\\ \\n \\t \\r \\uxxxx (lower-case hex)")
            self.pos += 1
        self.pos += 1
        return "".join(out)


class LineReader(_Parser):
    """Reads a script one line at a time, for constrained decoding (`dragonlab.learn.constrain`).

    `defined` and `outputs` (how many variables came before) carry the state of the lines read
    so far; `read` leaves them alone and `commit` adds a line's outputs. After `read`, complete
    or not, `kind`, `param`, `values`, `decision_at` and `outputs_at` say how far it got. A
    subclass narrows which variables an argument may name by overriding `names()`.
    """

    def __init__(self, defined=(), outputs: int = 0):
        super().__init__("", prefix=True)
        self.defined, self.outputs = set(defined), outputs

    def read(self, line: str, *, open_end: bool = True):
        """`(inst, decision)` of a line, or None if `open_end` and the line can still grow into
        one; raises ScriptSyntaxError if it cannot."""
        if "\n" in line:
            raise ValueError("LineReader.read takes one line")
        self.line, self.pos, self.open_end = line, 0, open_end
        self._start_line()
        try:
            return self._instruction()
        except _Incomplete:
            return None

    def commit(self, inst: list) -> None:
        self._count_outputs(inst)
        self.defined.update(inst[3])


def decode_index_map(text: str, *, pretty: bool) -> str:
    """The JSON graph of one index map in the readable notation (`{i,j->i//16,j%16}`), as TVM
    writes it in an attribute (`pretty`, indented) or an input; raises ScriptSyntaxError."""
    parser = _Parser(text)
    graph = parser._imap(pretty=pretty)
    if parser.pos != len(text):
        parser._fail("the end of the index map")
    return graph


def _imap_text(graph: str, ctx: str) -> str:
    """The readable form of an index map if it regenerates `graph` exactly, else the graph verbatim."""
    try:
        text = "{" + indexmap.Printer(json.loads(graph)).map(None) + "}"
        parser = _Parser(text)
        if parser._imap(pretty=ctx == "a") == graph and parser.pos == len(text):
            return text
    except (indexmap.NotReadable, ValueError, LookupError, TypeError, AttributeError, RecursionError):
        pass
    return "{" + quote(graph) + "}"


def _kinds():
    kinds = {}
    for name, (mnemonic, spec, outputs) in _TABLE.items():
        params = []
        for item in spec.split():
            head, _, default = item.partition("=")
            src, typ = head.split(":")
            value = () if not default else _DERIVED.get(default) or _Parser(default)._value(src[0], typ, 0)
            params.append(_Param(src[0], None if src[1] == "*" else int(src[1:]), typ, value))
        kinds[name] = _Kind(name, mnemonic, tuple(params), outputs[0], outputs[1:])
    return kinds, {k.mnemonic: k for k in kinds.values()}


_KINDS, BY_MNEMONIC = _kinds()  # every instruction kind, by its script mnemonic
MNEMONICS = {name: kind.mnemonic for name, kind in _KINDS.items()}  # every kind a script can hold
KEY_ALIASES = dict(_ALIASES["key"])  # short spelling -> the annotation key MetaSchedule writes
