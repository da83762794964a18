"""What a script may contain: what MetaSchedule's own rules and post-processors write, nothing else.

A script is an attacker's input. The codec reads any trace TVM can replay, which is far more than
MetaSchedule's search ever writes: TVM turns any input string `{...}` into an object graph
(an index map whose expressions may call `system`), passes unknown annotation keys to its code
generators as pragmas (`pragma_import_llvm` links arbitrary LLVM IR), and crashes on a zero tile
factor. So the evaluator checks every script against this allowlist before a worker sees it:

- every instruction kind is one MetaSchedule's rules, post-processors or TVM's default (dlight)
  schedules write for the target kind, with each input and attribute of the type they write it
  with (a block where a block goes, a loop where a loop goes, a bounded integer, a flag);
- annotation keys, storage scopes and thread axes come from fixed sets, each key with the value
  type MetaSchedule gives it; `meta_schedule.layout_rewrite_preproc` only after EnterPostproc,
  where the post-processors put it (the evaluator never builds that part);
- an index map is arithmetic over its own and sampled variables: it must be exactly what the
  readable notation (`{i,j->i//16,j%16}`) writes, so no call, no buffer load, no other object;
- decisions are in range: tile factors positive, categorical indices within their candidates.

The sets were taken from every trace MetaSchedule writes for the quick suite on llvm and cuda
(design spaces, post-processed samples, tensor-core schedules, dlight); `tests/core/test_allowlist.py`
checks that all of them are still accepted. `refusal` returns the first reason, or None.
"""

from __future__ import annotations

import json
import math
import re

from dragonlab.core import indexmap

MAX_INT = (1 << 31) - 1  # tile factors, extents, buffer indices: 32-bit in TVM's schedules

_ANY = "block|loop"
# kind: (output type, input slots, attribute slots); a slot ending in "*" takes the rest.
_KINDS = {
    "GetSBlock": ("block", (), ("name", "func")),
    "GetLoops": ("loop", ("block",), ()),
    "GetChildBlocks": ("block", (_ANY,), ()),
    "GetProducers": ("block", ("block",), ()),
    "GetConsumers": ("block", ("block",), ()),
    "SamplePerfectTile": ("var", ("loop",), ("tile_n", "tile_max")),
    "SampleCategorical": ("var", (), ("candidates", "probabilities")),
    "SampleComputeLocation": ("loop", ("block",), ()),
    "Split": ("loop", ("loop", "factor*"), ("flag", "false")),
    "Fuse": ("loop", ("loop*",), ("flag",)),
    "Reorder": (None, ("loop*",), ()),
    "AddUnitLoop": ("loop", (_ANY,), ()),
    "Parallel": (None, ("loop",), ()),
    "Vectorize": (None, ("loop",), ()),
    "Unroll": (None, ("loop",), ()),
    "Bind": (None, ("loop",), ("thread",)),
    "Annotate": (None, (_ANY, "annotation"), ("key",)),
    "Unannotate": (None, (_ANY,), ("key",)),
    "CacheRead": ("block", ("block", "blocks"), ("buffer", "scope")),
    "CacheWrite": ("block", ("block", "blocks"), ("buffer", "scope")),
    "SetScope": (None, ("block",), ("buffer", "scope")),
    "StorageAlign": (None, ("block",), ("buffer", "int", "int", "int")),
    "ComputeAt": (None, ("block", "loop"), ("flag", "int")),
    "ReverseComputeAt": (None, ("block", "loop"), ("flag", "int")),
    "ComputeInline": (None, ("block",), ()),
    "ReverseComputeInline": (None, ("block",), ()),
    "DecomposeReduction": ("block", ("block", "loop"), ()),
    "RFactor": ("block", ("loop",), ("axis",)),
    "ReIndex": ("block", ("block",), ("buffer", "read_write")),
    "Blockize": ("block", ("loop",), ("flag",)),
    "Tensorize": (None, (_ANY,), ("intrinsic", "flag")),
    "TransformLayout": (None, ("block", "index_map"), ("buffer", "read_write", "none", "flag")),
    "TransformBlockLayout": (None, ("block",), ("index_map",)),
    "PadEinsum": (None, ("block",), ("paddings",)),
    "EnterPostproc": (None, (), ()),
}
# The cuda-only kinds: an llvm kernel has no threads or GPU memory scopes to bind, and the plain
# llvm rules tensorize nothing (a Tensorize there would also import TVM's 248 tensor intrinsics,
# 20-60 s, in the worker that applies it).
_GPU_ONLY = {"Bind", "SetScope", "StorageAlign", "Tensorize"}
_GPU_ONLY_KEYS = {"meta_schedule.auto_tensorize", "meta_schedule.auto_tensorize_init"}
# The longest variable-length input lists (MetaSchedule: a split into 5 factors, a reorder of 26
# loops); TVM takes minutes over a split into 1,024 factors.
_MOST = {"Split": 8, "Fuse": 64, "Reorder": 64}
# The integer slots and the ranges MetaSchedule writes in them ("factor" also takes None or a
# sampled variable). Constrained decoding keeps a number being written inside these.
INT_RANGES = {"int": (-MAX_INT, MAX_INT), "axis": (-16, 16), "buffer": (0, 63), "read_write": (0, 1), "tile_n": (1, 8),
              "tile_max": (1, 1 << 16), "factor": (1, MAX_INT),
              "annotation": (0, 1 << 16),  # an annotation's int value (its key says whether it takes one)
              "candidate": (-MAX_INT, MAX_INT), "padding": (1, MAX_INT)}  # the items of those lists
LIST_MOST = {"candidates": 64, "probabilities": 64, "paddings": 8}  # the longest lists of these slots
SCOPES = frozenset({"global", "local", "shared", "shared.dyn", "wmma.matrix_a", "wmma.matrix_b",
                    "wmma.accumulator"})
THREADS = frozenset(f"{t}.{axis}" for t in ("blockIdx", "threadIdx", "vthread") for axis in "xyz")
VALUES = {"scope": SCOPES, "thread": THREADS}  # the slots that take one of a fixed set of words
# Annotation keys and the values MetaSchedule writes with them: "int" (a literal or a sampled
# variable), "structure" (a tiling structure such as "SSRSRS"), "intrinsic" (a tensor intrinsic's
# name), "ints" (a software pipeline), "true".
ANNOTATIONS = {
    "meta_schedule.parallel": "int", "meta_schedule.vectorize": "int",
    "meta_schedule.unroll_explicit": "int", "meta_schedule.unroll_implicit": "int",
    "meta_schedule.cooperative_fetch": "int", "meta_schedule.random_compute_producer": "int",
    "meta_schedule.thread_extent_low_inclusive": "int", "meta_schedule.thread_extent_high_inclusive": "int",
    "meta_schedule.tiling_structure": "structure",
    "meta_schedule.auto_tensorize": "intrinsic", "meta_schedule.auto_tensorize_init": "intrinsic",
    "pragma_auto_unroll_max_step": "int", "pragma_unroll_explicit": "int", "warp_execution": "int",
    "software_pipeline_stage": "ints", "software_pipeline_order": "ints",
    "software_pipeline_async_stages": "ints",
}
# Written by the RewriteLayout post-processor on the block it creates: the evaluator drops what
# follows EnterPostproc and runs the post-processors itself, so the key never reaches a build
# from a script; before EnterPostproc it would mark real work as removable weight preprocessing.
POSTPROC_ANNOTATIONS = {"meta_schedule.layout_rewrite_preproc": "true"}
# ApplyCustomRule removes the workload's own rule hint (pooling blocks carry one) once used.
UNANNOTATED = frozenset({"schedule_rule"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}\Z")
_STRUCTURE = re.compile(r"[SR]{1,16}\Z")
_INDEX_DTYPES = frozenset({"int32", "int64"})
MAX_GRAPH_CHARS = 1 << 16


def refusal(plain: list, target_kind: str = "llvm") -> str | None:
    """Why the trace `[insts, decisions]` is outside what MetaSchedule writes, or None.

    `target_kind` is TVM's ("llvm" or "cuda"). Every reason names the instruction."""
    insts, decisions = plain
    types: dict[str, str] = {}  # variable -> "block", "loop" or "var"
    after_postproc = False
    for i, inst in enumerate(insts):
        kind, inputs, attrs, outputs = inst
        if not writes(kind, target_kind):
            return f"instruction {i}: {kind} is not an instruction MetaSchedule writes for {target_kind}"
        output_type, input_slots, attr_slots = _KINDS[kind]
        if len(inputs) > _MOST.get(kind, len(inputs)) + (kind == "Split"):
            return f"instruction {i} ({kind}): more than {_MOST[kind]} {'factors' if kind == 'Split' else 'loops'}"
        why = (_slots(inputs, input_slots, types, after_postproc, "input")
               or _slots(attrs, attr_slots, types, after_postproc, "attribute")
               or _annotation(kind, inputs, attrs, types, after_postproc, target_kind))
        if why:
            return f"instruction {i} ({kind}): {why}"
        if output_type is None and outputs:
            return f"instruction {i} ({kind}): it has no outputs"
        for name in outputs:
            types[name] = output_type
        after_postproc |= kind == "EnterPostproc"
    seen = set()
    for index, decision in decisions:
        if index in seen or not 0 <= index < len(insts):
            return f"decision for instruction {index}: out of range or repeated"
        seen.add(index)
        why = _decision(insts[index], decision)
        if why:
            return f"instruction {index} ({insts[index][0]}): {why}"
    return None


def _slots(values: list, slots: tuple, types: dict, after_postproc: bool, what: str) -> str | None:
    variadic = bool(slots) and slots[-1].endswith("*")
    fixed = len(slots) - variadic
    if len(values) < fixed or (len(values) > fixed and not variadic):
        return f"{len(values)} {what}s, expected {fixed}{' or more' if variadic else ''}"
    for k, value in enumerate(values):
        slot = slots[min(k, len(slots) - 1)].rstrip("*")
        if not fits(value, slot, types):
            return f"{what} {k + 1} ({_show(value)}) is not a {slot.replace('_', ' ')}"
    return None


def writes(kind: str, target_kind: str = "llvm") -> bool:
    """Whether MetaSchedule writes instructions of `kind` for TVM's target kind `target_kind`."""
    return kind in _KINDS and (kind not in _GPU_ONLY or target_kind == "cuda")


def annotation_keys(target_kind: str = "llvm", *, after_postproc: bool = False) -> frozenset[str]:
    """The annotation keys MetaSchedule writes for `target_kind` (the post-processors' own only
    after EnterPostproc)."""
    keys = {**ANNOTATIONS, **(POSTPROC_ANNOTATIONS if after_postproc else {})}
    return frozenset(k for k in keys if target_kind == "cuda" or k not in _GPU_ONLY_KEYS)


def slot_of(kind: str, src: str, index: int | None) -> str | None:
    """The slot type of input (`src` "i") or attribute ("a") `index` of the instruction `kind`
    (`index` None: its variadic inputs); None where the allowlist has no such slot."""
    spec = _KINDS.get(kind)
    slots = () if spec is None else spec[1] if src == "i" else spec[2]
    variadic = bool(slots) and slots[-1].endswith("*")
    if index is None:
        return slots[-1].rstrip("*") if variadic else None
    return slots[index].rstrip("*") if index < len(slots) - variadic else None


def most_inputs(kind: str) -> int | None:
    """How many variadic inputs `kind` may have (None: no bound here)."""
    return _MOST.get(kind)


def int_prefix_fits(text: str, slot: str) -> bool:
    """Whether some integer of an integer slot's range (`INT_RANGES`) is written beginning
    with `text`, as the encoder writes integers (no leading zeros, no '+')."""
    return int_prefix_in(text, *INT_RANGES[slot])


def int_prefix_in(text: str, lo: int, hi: int) -> bool:
    """Whether some integer in [lo, hi] is written beginning with `text` (no leading zeros)."""
    negative, digits = text.startswith("-"), text.removeprefix("-")
    if digits == "":
        return lo < 0 if negative else lo <= hi
    if not digits.isdigit() or digits.startswith("0"):
        return digits == "0" and not negative and lo <= 0 <= hi
    for more in range(len(str(max(abs(lo), abs(hi)))) - len(digits) + 1):  # the digits still to come
        low, high = int(digits) * 10 ** more, (int(digits) + 1) * 10 ** more - 1
        if negative:
            low, high = -high, -low
        if max(low, lo) <= min(high, hi):
            return True
    return False


def fits(v, slot: str, types: dict) -> bool:
    """Whether `v` is what MetaSchedule writes in a slot of type `slot` (`slot_of`); `types`
    maps variable names to "block", "loop" or "var"."""
    if slot in ("block", "loop", _ANY):
        return isinstance(v, str) and types.get(v) in slot.split("|")
    if slot == "factor":  # a split factor: a sampled tile size, a constant, or None (inferred)
        return v == "None" or _int(v, 1) or (isinstance(v, str) and types.get(v) == "var")
    if slot == "blocks":
        return isinstance(v, list) and all(isinstance(b, str) and types.get(b) == "block" for b in v)
    if slot == "annotation":  # checked with its key by _annotation
        return True
    if slot == "index_map":
        return is_index_map(v)
    if slot == "name":
        return isinstance(v, str) and 0 < len(v) <= 256 and v.isprintable()
    if slot == "func":
        return v == "main"
    if slot in ("flag", "false"):  # TVM reads 0/1 as booleans, and the database file writes them so
        return v in ((False, 0) if slot == "false" else (False, True, 0, 1)) and type(v) in (bool, int)
    if slot == "none":
        return v is None
    if slot in INT_RANGES:  # read_write is BufferIndexType: 0 read, 1 write (another value aborts TVM)
        return _int(v, *INT_RANGES[slot])
    if slot in LIST_MOST and not (isinstance(v, list) and 0 < len(v) <= LIST_MOST[slot]):
        return False
    if slot in ("candidates", "paddings"):
        return all(_int(x, *INT_RANGES[slot[:-1]]) for x in v)
    if slot == "probabilities":
        return all(type(x) is float and math.isfinite(x) and 0.0 <= x <= 1.0 for x in v)
    if slot in VALUES:
        return v in VALUES[slot]
    if slot == "intrinsic":
        return isinstance(v, str) and bool(_NAME.match(v))
    if slot == "key":  # which keys, with which values: _annotation
        return isinstance(v, str)
    raise AssertionError(f"unknown slot type {slot}")


def _annotation(kind: str, inputs: list, attrs: list, types: dict, after_postproc: bool,
                target_kind: str) -> str | None:
    if kind not in ("Annotate", "Unannotate"):
        return None
    key = attrs[0]
    allowed = {k: v for k, v in {**ANNOTATIONS, **(POSTPROC_ANNOTATIONS if after_postproc else {})}.items()
               if target_kind == "cuda" or k not in _GPU_ONLY_KEYS}
    if kind == "Unannotate" and key in UNANNOTATED:
        return None
    if key not in allowed:
        return f"annotation key {key!r} is not one MetaSchedule writes{'' if after_postproc else ' here'}"
    if kind == "Unannotate":
        return None
    value, typ = inputs[1], allowed[key]
    literal = value[1:-1] if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"' else None
    ok = {"int": lambda: _int(value, *INT_RANGES["annotation"]) or isinstance(value, str) and types.get(value) == "var",
          "structure": lambda: literal is not None and bool(_STRUCTURE.match(literal)),
          "intrinsic": lambda: literal is not None and bool(_NAME.match(literal)),
          "ints": lambda: isinstance(value, list) and len(value) <= 16 and all(_int(x, 0, 64) for x in value),
          "true": lambda: value in (True, 1) and type(value) in (bool, int)}[typ]()
    return None if ok else f"annotation {key!r} takes {'an int' if typ == 'int' else typ}, not {_show(value)}"


def _decision(inst: list, decision) -> str | None:
    kind, _, attrs, outputs = inst
    if kind == "SamplePerfectTile":
        if not (isinstance(decision, list) and len(decision) == len(outputs) and all(_int(x, 1) for x in decision)):
            return f"tile decision {_show(decision)} is not {len(outputs)} positive factors"
    elif kind == "SampleCategorical":
        if not _int(decision, 0, len(attrs[0]) - 1):
            return f"decision {_show(decision)} is not an index into {len(attrs[0])} candidates"
    elif kind == "SampleComputeLocation":
        if not _int(decision, -2):  # -2 inline, -1 root, else a loop's index
            return f"compute location {_show(decision)} is below -2"
    else:
        return "only sampling instructions take a decision"
    return None


def _int(v, lo: int, hi: int = MAX_INT) -> bool:
    return type(v) is int and lo <= v <= hi


def _show(v) -> str:
    text = json.dumps(v) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def is_index_map(graph) -> bool:
    """Whether `graph` (an input string as TVM reads it) is an index map that the readable
    notation writes exactly: arithmetic on int32/int64 variables and constants, nothing else."""
    if not (isinstance(graph, str) and graph[:1] == "{" and graph[-1:] == "}" and len(graph) <= MAX_GRAPH_CHARS):
        return False
    try:
        nodes = json.loads(graph)
        text = "{" + indexmap.Printer(nodes).map(None) + "}"
    except (ValueError, LookupError, TypeError, AttributeError, RecursionError, indexmap.NotReadable):
        return False
    if any(n.get("type") == "ir.PrimType" and n["data"].get("dtype") not in _INDEX_DTYPES for n in nodes["nodes"]):
        return False
    from dragonlab.core.codec import CodecError, decode_index_map

    try:
        return decode_index_map(text, pretty=graph.startswith("{\n")) == graph
    except CodecError:
        return False


# Calls that reach code outside the kernel: an extern symbol, a packed function, an LLVM intrinsic.
_FOREIGN_OPS = frozenset({"tirx.call_extern", "tirx.call_pure_extern", "tirx.call_llvm_intrin",
                          "tirx.call_llvm_pure_intrin", "tirx.call_packed", "tirx.call_cpacked",
                          "tirx.tvm_call_packed", "tirx.tvm_call_cpacked", "tirx.tvm_call_packed_lowered",
                          "tirx.tvm_call_cpacked_lowered", "tirx.call_spirv_pure_glsl450"})


def escapes(mod) -> set[str]:
    """What in `mod` could leave the computation it describes: calls to extern or packed
    functions, LLVM intrinsics or other functions ("call OP SYMBOL", "call function NAME"), and
    annotation or attribute keys that are not MetaSchedule's ("annotation KEY"), which TVM's code
    generators read as pragmas (`pragma_import_llvm` links code into the kernel).

    Read from the module's JSON graph: a flat node list, so no recursion (and TVM 0.27's Python
    API has no TIR visitor)."""
    import tvm

    nodes = json.loads(tvm.ir.save_json(mod))["nodes"]

    def text(i):
        node = nodes[i]
        if node["type"] == "ir.StringImm":
            return text(node["data"]["value"])
        return node["data"] if node["type"] == "ffi.String" else node["type"]

    found = set()
    for node in nodes:
        kind, data = node["type"], node.get("data")
        if kind in ("ir.Call", "tirx.Call"):
            callee = nodes[data["op"]]
            if callee["type"] == "ir.Op" and callee["data"] in _FOREIGN_OPS:
                args = nodes[data["args"]]["data"]
                found.add(f"call {callee['data']} {text(args[0]) if args else ''}")
            elif callee["type"] != "ir.Op":
                found.add(f"call function {text(callee['data']['name_hint']) if isinstance(callee['data'], dict) else ''}")
        elif kind in ("tirx.For", "s_tir.SBlock") and data.get("annotations"):
            keys = nodes[data["annotations"]]["data"][0::2]
            found.update(f"annotation {text(k)}" for k in keys if text(k) not in _KNOWN_KEYS)
        elif kind == "tirx.AttrStmt":
            key = text(data["attr_key"])
            if key not in _KNOWN_KEYS:
                found.add(f"annotation {key}")
    return found


# Annotation keys that allowed primitives write themselves: StorageAlign records its alignment
# as `buffer_dim_align` on the block.
_KNOWN_KEYS = frozenset(ANNOTATIONS) | frozenset(POSTPROC_ANNOTATIONS) | UNANNOTATED | {"buffer_dim_align"}


def known_crash(plain: list) -> str | None:
    """What TVM turns into a process crash rather than an error when replayed (SIGFPE on a zero
    factor, an abort on a ReIndex buffer type other than read or write): refused before a worker
    spends its setup on it. A subset of `refusal`, for callers that apply any trace (widgets)."""
    insts, decisions = plain
    for index, value in decisions:
        if (0 <= index < len(insts) and insts[index][0] in ("SamplePerfectTile", "SamplePartitionedTile")
                and isinstance(value, list) and 0 in value):
            return f"instruction {index}: tile decision {value} has a zero factor (TVM would crash with SIGFPE)"
    for index, (kind, inputs, attrs, _) in enumerate(insts):
        if kind in ("Split", "LoopPartition") and any(type(v) is int and v == 0 for v in inputs[1:]):
            return f"instruction {index}: {kind} has a zero factor (TVM would crash with SIGFPE)"
        if kind == "ReIndex" and len(attrs) > 1 and attrs[1] not in (0, 1):
            return f"instruction {index}: reindex buffer type {attrs[1]} is neither 0 (read) nor 1 (write)"
    return None
