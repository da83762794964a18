"""The vocabulary of scripts, shared by their reader (`script_parser`) and writer (`codec`).

Every MetaSchedule instruction kind with its mnemonic, parameters and outputs; the keywords and
the short spellings of annotation keys and thread axes; the codec's errors. `docs/codec.md` has
the grammar these fill in.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from dragonlab.core.errors import InputError

MAX_OUTPUTS = 1024  # per instruction; real blocks have a few dozen loops at most
INT64 = (-(1 << 63), (1 << 63) - 1)  # the integers a script may hold
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")  # a variable name written bare


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
ALIASES = {
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
SPELLING = {typ: {s: alias for alias, s in table.items()} for typ, table in ALIASES.items()}
# MetaSchedule annotates this key with `true`, which the database file stores as 1.
BOOL_ANNOTATIONS = {"meta_schedule.layout_rewrite_preproc"}
KEYWORDS = {"None": None, "true": True, "false": False, "inf": math.inf, "nan": math.nan}


@dataclass(frozen=True)
class Param:
    src: str  # "i" (an input) or "a" (an attribute)
    index: int | None  # None: the variadic inputs
    type: str
    default: object = ()  # () means required; a callable is derived from the line


@dataclass(frozen=True)
class Kind:
    name: str
    mnemonic: str
    params: tuple[Param, ...]
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


def _default(text: str, src: str):
    """A default of the table as a script's reader reads it (tests/core/test_codec.py checks that):
    derived from the line, a keyword (None is "None" among inputs), a number or [], or a bare word."""
    if text in _DERIVED:
        return _DERIVED[text]
    if text in KEYWORDS:
        return "None" if text == "None" and src == "i" else KEYWORDS[text]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _kinds():
    kinds = {}
    for name, (mnemonic, spec, outputs) in _TABLE.items():
        params = []
        for item in spec.split():
            head, _, default = item.partition("=")
            src, typ = head.split(":")
            value = _default(default, src[0]) if default else ()
            params.append(Param(src[0], None if src[1] == "*" else int(src[1:]), typ, value))
        kinds[name] = Kind(name, mnemonic, tuple(params), outputs[0], outputs[1:])
    return kinds, {k.mnemonic: k for k in kinds.values()}


KINDS, BY_MNEMONIC = _kinds()  # every instruction kind, by its name and by its script mnemonic
MNEMONICS = {name: kind.mnemonic for name, kind in KINDS.items()}  # every kind a script can hold
KEY_ALIASES = dict(ALIASES["key"])  # short spelling -> the annotation key MetaSchedule writes
