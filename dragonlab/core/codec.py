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
Decisions sit on their line, so decoding needs no workload.

This module is the public API and the writer. The instruction table, keywords and errors are in
`script_grammar`; the reader, a strict recursive descent over characters (never eval) that can
also vet a prefix for constrained decoding, is `script_parser`. docs/codec.md has the grammar,
examples and measurements.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence

from dragonlab.core import indexmap, tensor_intrinsics
from dragonlab.core.script_grammar import (ALIASES, BOOL_ANNOTATIONS, BY_MNEMONIC, IDENT, INT64, KEY_ALIASES,
                                           KEYWORDS, KINDS, MNEMONICS, SPELLING, CodecError, Kind, Param,
                                           ScriptSyntaxError, TraceFormatError, UnknownInstructionError)
from dragonlab.core.script_parser import (MAX_LINE_CHARS, MAX_LINES, MAX_SCRIPT_CHARS, MAX_VARIABLES, LineReader,
                                          decode_index_map, read_script)

__all__ = [  # what other modules use; the names from script_grammar and script_parser are re-exported
    "BY_MNEMONIC", "KEY_ALIASES", "KINDS", "MNEMONICS", "MAX_LINE_CHARS", "MAX_LINES", "MAX_NESTING",
    "MAX_SCRIPT_CHARS", "MAX_VARIABLES", "CodecError", "LineReader", "ScriptSyntaxError", "TraceFormatError",
    "UnknownInstructionError", "apply", "check_prefix", "decode", "decode_index_map", "design_part", "encode",
    "plain_value", "quote", "to_plain",
]

MAX_NESTING = 64  # of lists in a trace's JSON form
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")  # string attributes that need no quotes
_RUN_NAME = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]{0,8})\Z")  # a variable that can start a run


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
    TVM can tell apart: bool attributes (and the annotation in BOOL_ANNOTATIONS) that the database file
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
        for p in KINDS[kind].params if kind in KINDS else ():
            if p.src == "a" and p.index < len(attrs) and p.type == "bool" and _is_bit(attrs[p.index]):
                attrs[p.index] = bool(attrs[p.index])
            elif p.src == "a" and p.index < len(attrs) and p.type == "at":
                attrs[p.index] = _canonical_graph(attrs[p.index], indent=2)
        if kind == "Annotate" and len(inputs) == 2 and attrs and isinstance(attrs[0], str) \
                and attrs[0] in BOOL_ANNOTATIONS and _is_bit(inputs[1]):
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
        if name not in KINDS:
            raise UnknownInstructionError(f"instruction {i}: unknown instruction kind {name!r}")
        try:
            lines.append(_encode_line(KINDS[name], inputs, attrs, outputs, by_index.get(i, ()), defined, start))
        except TraceFormatError as e:
            raise TraceFormatError(f"instruction {i} ({name}): {e}") from None
        defined.update(outputs)
        start += len(outputs)  # TVM numbers every output by how many came before it
    return "\n".join(lines)


def _encode_line(kind: Kind, inputs, attrs, outputs, decision, defined: set, start: int) -> str:
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


def _is_default(p: Param, v, values: list, decision) -> bool:
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
    return name if IDENT.match(name) and name not in KEYWORDS else "$" + quote(name)


def _fmt(v, ctx: str, typ: str, defined: set) -> str:
    """One value. In ctx "i" (inputs) a string is a variable, "None", '"literal"' or an index map."""
    if typ == "rv" and not (isinstance(v, str) and v in defined):
        raise TraceFormatError(f"expected a defined variable, got {v!r}")
    if v is None or isinstance(v, bool):
        return "None" if v is None else "true" if v else "false"
    if isinstance(v, int):
        if not INT64[0] <= v <= INT64[1]:
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
        word = SPELLING.get(typ, {}).get(v, v)
        bare = typ in ALIASES and _BARE.match(word) and word not in KEYWORDS and ALIASES[typ].get(word, word) == v
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
    return read_script(text, verbatim=verbatim)


def check_prefix(text: str, *, verbatim: bool = True) -> None:
    """Raise ScriptSyntaxError unless `text` can still be continued into a valid script."""
    read_script(text, prefix=True, verbatim=verbatim)


def apply(script_or_plain, mod, *, seed: int = 1):
    """A fresh `Schedule(mod)` with a script (or a plain JSON form, or a Trace) replayed on it.
    A tensorize names an intrinsic that only `tvm.s_tir.tensor_intrin` registers, so that is
    imported the first time one is missing (`dragonlab.core.tensor_intrinsics`)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    plain = decode(script_or_plain) if isinstance(script_or_plain, str) else to_plain(script_or_plain)

    def replayed():
        sch = Schedule(mod, seed=seed)
        Trace.apply_json_to_schedule(plain, sch)
        return sch

    return tensor_intrinsics.retrying(replayed)


def _imap_text(graph: str, ctx: str) -> str:
    """The readable form of an index map if it regenerates `graph` exactly, else the graph verbatim."""
    try:
        text = "{" + indexmap.Printer(json.loads(graph)).map(None) + "}"
        if decode_index_map(text, pretty=ctx == "a") == graph:
            return text
    except (indexmap.NotReadable, ValueError, LookupError, TypeError, AttributeError, RecursionError):
        pass  # ScriptSyntaxError is a ValueError
    return "{" + quote(graph) + "}"
