"""Red-team constructs for the evaluator: what an attacker who knows the script grammar writes.

The red-team mutations (`RED_TEAM`, used by `dragonlab.evaluation.fuzz`) write what an attacker who knows the grammar would write,
each appended to the design part of a real script (or, one time in five, after its
post-processing part), so that everything else about the script stays valid:

    verbatim_graph   TVM JSON graphs `{"<graph>"}` in every slot that takes a value: index maps
                     and PrimExprs calling system, execve, socket, popen, dlopen, a fork-like
                     symbol and a raw syscall through call_extern, registered functions
                     through call_packed, BufferLoads, and harmless graphs (refusal should be
                     by form, not by content)
    extern_map       calls such as `{i,j->system(i),j}` in every expression slot of the readable
                     index-map notation (the grammar refuses them at decode)
    predication      `split`/`partition` flags after ` ; ` in every spelling (`true 1`, `0 1`, ...)
    annotation_keys  every annotation and pragma key TVM knows, quoted, bare and aliased, with
                     values of every type; `unann`
    deep_nesting     lists and index maps nested thousands deep, 2,000+ term operator chains,
                     inverse chains `{->|->|...}`, label chains
    huge_counts      thousands of `loops b0 >1024`, output counts and runs past the limits, very
                     long lines and strings, integers at and past 64 bits, inf/nan/-0.0 in every
                     numeric slot, scripts at the codec's size limits and of 2 MB
    rare_primitives  every instruction the codec knows with plausible arguments, odd storage
                     scopes, thread names, dtypes and made-up tensor intrinsics

A red-team mutation returns a `Mutant`: the script text, which also names its construct
(`case`) and says whether the evaluator must refuse it (`refuse`: never judge it correct).
`fuzz` tallies stages per construct (`FuzzReport.by_case`) and lists the must-refuse constructs
that were judged correct (`FuzzReport.unrefused`). Graphs that call `system("touch MARKER")`
(and the pragma_import payloads) create the file `MARKER` if they ever run; `fuzz` reports it.
"""

from __future__ import annotations

import functools
import random
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dragonlab.core import codec

# Appended lines use placeholders: <b> the main block, <b2> another block, <root> the root block,
# <l>/<l2> the first/last loop still live at the end of the design part, <v> a sampled variable,
# <name> the main block's name, <X> the construct (filled last: graphs contain anything).

MARKER = str(Path(tempfile.gettempdir()) / "dragonlab-fuzz-marker")  # created if injected code ever runs

# Annotation and pragma keys that TVM 0.27 knows: the "pragma_*", "meta_schedule.*" and
# "software_pipeline_*" constants of libtvm_compiler.so (`strings ... | grep`; the wheel ships no
# headers for them), plus the other loop/block annotation keys found the same way.
TVM_ANNOTATION_KEYS = (
    "pragma_auto_unroll_max_step", "pragma_debug_skip_region", "pragma_import_c", "pragma_import_llvm",
    "pragma_loop_partition_hint", "pragma_parallel", "pragma_parallel_barrier_when_finish",
    "pragma_parallel_launch_point", "pragma_parallel_stride_pattern", "pragma_scope", "pragma_unroll",
    "pragma_unroll_explicit", "pragma_vectorize",
    "meta_schedule.adaptive_pool_avg", "meta_schedule.adaptive_pool_max", "meta_schedule.auto_tensorize",
    "meta_schedule.auto_tensorize_init", "meta_schedule.cooperative_fetch", "meta_schedule.inline_rule",
    "meta_schedule.layout_rewrite_preproc", "meta_schedule.parallel", "meta_schedule.pool_avg",
    "meta_schedule.pool_max", "meta_schedule.random_compute_producer",
    "meta_schedule.thread_extent_high_inclusive", "meta_schedule.thread_extent_low_inclusive",
    "meta_schedule.tiling_structure", "meta_schedule.unroll_explicit", "meta_schedule.unroll_implicit",
    "meta_schedule.vectorize", "meta_schedule.write_cache_level",
    "software_pipeline_async_stages", "software_pipeline_order", "software_pipeline_stage",
    "warp_execution", "double_buffer_scope", "layout_free_buffers", "irregular_loop_mark", "async_scope",
    "async_commit_queue_scope", "async_wait_queue_scope", "async_wait_inflight_count",
    "s_tir.lwp_disable_func_prof", "s_tir.lwp_max_depth", "s_tir.lwp_min_height")
# Spellings meant to slip past a key filter.
ODD_KEYS = ("pragma_", "pragma_import_llvm\x00", " pragma_import_llvm", "PRAGMA_IMPORT_LLVM", "meta_schedule.",
            "meta_schedule.pragma_import_llvm", "meta_schedule.parallel ", "", "pragma_import_llvm\n",
            "software_pipeline_stage\x00pragma_import_llvm")
# The keys MetaSchedule's rules and post-processors write (the codec's aliases, and warp_execution).
MS_KEYS = frozenset(codec.KEY_ALIASES.values()) | {"warp_execution"}

_LLVM_PAYLOAD = (  # a module constructor: runs wherever the kernel library is loaded
    f'@.dl_cmd = private constant [{len("touch " + MARKER) + 1} x i8] c"touch {MARKER}\\00"\n'
    "declare i32 @system(ptr)\n"
    "define internal void @dl_pwn() {\n  %r = call i32 @system(ptr @.dl_cmd)\n  ret void\n}\n"
    "@llvm.global_ctors = appending global [1 x { i32, ptr, ptr }] "
    "[{ i32, ptr, ptr } { i32 65535, ptr @dl_pwn, ptr null }]\n")
_C_PAYLOAD = ("#include <stdlib.h>\n"
              f'__attribute__((constructor)) static void dl_pwn(void) {{ system("touch {MARKER}"); }}\n')


class Mutant(str):
    """A mutated script: the text itself, plus which red-team construct it carries (`case`) and
    whether the evaluator must refuse it (`refuse`: it must never be judged correct)."""

    def __new__(cls, text: str, case: str, refuse: bool):
        self = super().__new__(cls, text)
        self.case, self.refuse = case, refuse
        return self


@dataclass(frozen=True)
class Case:
    """One red-team construct. `make(ctx, rng)` gives the lines to append to a script, or (for
    constructs that are whole scripts) the full text."""

    label: str
    refuse: bool
    make: Callable


_q = codec.quote


def verbatim(graph: str) -> str:
    """A JSON graph as the script writes it verbatim: `{"<graph>"}`."""
    return "{" + _q(graph) + "}"


@functools.lru_cache(maxsize=1)
def graphs() -> dict[str, str]:
    """Real tvm-ffi JSON graphs (`tvm.ir.save_json`), built once: index maps and PrimExprs that
    call into libc or the FFI registry or read memory, and harmless ones."""
    import tvm
    from tvm import tirx as T

    i, j = T.Var("i", "int32"), T.Var("j", "int32")
    # What each call does if it ever runs is bounded (an index map runs it once per element): no
    # real fork (a fork per element is a fork bomb), popen with an invalid mode (fails before it
    # forks), an execve that replaces a worker by /bin/true. system() leaves MARKER behind.
    calls = {
        "system": T.call_extern("int32", "system", f"touch {MARKER}"),
        "fork": T.call_extern("int32", "pthread_atfork", 0, 0, 0),
        "syscall": T.call_extern("int32", "syscall", 39),  # getpid
        "execve": T.call_extern("int32", "execve", "/bin/true", 0, 0),
        "socket": T.call_extern("int32", "socket", 2, 1, 0),
        "popen": T.call_extern("int32", "popen", f"touch {MARKER}", "x"),
        "dlopen": T.call_extern("int32", "dlopen", f"{MARKER}.so", 2),
        "packed_load_module": T.call_packed("ffi.ModuleLoadFromFile", f"{MARKER}.so", "so"),
        "packed_load_so": T.call_packed("ffi.Module.load_from_file.so", f"{MARKER}.so"),
        "buffer_load": T.BufferLoad(T.decl_buffer((64, 64), "int32", name="X"), [i, j]),
    }
    objects = {f"map_{name}": T.IndexMap([i, j], [i + call, j], None) for name, call in calls.items()}
    objects["map_system_in_inverse"] = T.IndexMap([i, j], [j, i], T.IndexMap([i, j], [j + calls["system"], i], None))
    objects.update({f"expr_{name}": call for name, call in calls.items()})
    objects.update({  # harmless: refusing these too shows refusal is by form
        "harmless_map_transpose": T.IndexMap([i, j], [j, i], T.IndexMap([i, j], [j, i], None)),
        "harmless_map_identity": T.IndexMap([i, j], [i, j], None),
        "harmless_expr_int": T.IntImm("int32", 16),
        "harmless_expr_add": i + 1,
    })
    return {name: tvm.ir.save_json(obj) for name, obj in objects.items()}


@dataclass(frozen=True)
class _Context:
    """What a base script offers to append to: its design part and variables still usable there."""

    design: str
    full: str
    b: str
    b2: str
    root: str
    l: str  # noqa: E741
    l2: str
    v: str
    name: str

    def fill(self, template: str, x: str = "") -> str:
        for key in ("b2", "b", "root", "l2", "l", "v", "name"):
            template = template.replace(f"<{key}>", getattr(self, key))
        return template.replace("<X>", x)

    def append(self, lines: list[str], post: bool = False) -> str:
        base = self.full if post else self.design
        return "\n".join([base, *lines] if base else lines)


def _ref(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else "$" + _q(name)


@functools.lru_cache(maxsize=256)
def context(script: str) -> _Context:
    lines = script.split("\n")
    cut = lines.index("postproc") if "postproc" in lines else len(lines)
    design = "\n".join(lines[:cut])
    try:
        insts = codec.decode(design)[0]
    except (codec.CodecError, RecursionError):  # not a real script: fall back to b0, l1
        insts = []
    names, blocks, loops, values, dead, consumed, loops_of = {}, [], [], [], set(), set(), {}
    for kind, inputs, attrs, outputs in insts:
        if kind == "GetSBlock":
            names[outputs[0]] = attrs[0]
        if kind == "GetLoops":
            loops_of[inputs[0]] = outputs
        if kind in ("Split", "LoopPartition"):
            consumed.add(inputs[0])
        elif kind in ("Fuse", "Merge"):
            consumed.update(inputs)
        elif kind == "Blockize":
            consumed.update(inputs[0] if isinstance(inputs[0], list) else inputs[:1])
        elif kind in ("ComputeAt", "ReverseComputeAt", "ComputeInline", "ReverseComputeInline"):
            consumed.update(loops_of.get(inputs[0], ()))
            if kind.endswith("Inline"):
                dead.add(inputs[0])
        for o in outputs:
            if o[:1] == "b":
                blocks.append(o)
            elif o[:1] == "l" and kind != "SampleComputeLocation":
                loops.append(o)
            elif o[:1] == "v":
                values.append(o)
    alive = [b for b in blocks if b not in dead]
    main = next((b for b in alive if b in names and names[b] != "root"), alive[0] if alive else "b0")
    root = next((b for b in blocks if names.get(b) == "root"), main)
    other = next((b for b in reversed(alive) if b not in (main, root)), main)
    live = [x for x in loops if x not in consumed] or loops or ["l1"]
    value = values[-1] if values else live[0]
    return _Context(design, script, _ref(main), _ref(other), _ref(root), _ref(live[0]), _ref(live[-1]),
                    _ref(value), _word(names.get(main, "C")))


def _fixed(*templates: str) -> Callable:
    return lambda ctx, rng: [ctx.fill(t) for t in templates]


def _with(template: str, x) -> Callable:
    """Append `template` with <X> = x (a string, or a function of (ctx, rng))."""
    return lambda ctx, rng: [ctx.fill(template, x(ctx, rng) if callable(x) else x)]


# Every slot that takes a value, with <X> where the construct goes.
VALUE_SLOTS = {
    "layout.map": "layout <b> <X> 0 1",
    "layout.map_read": "layout <b> <X> 0 0",
    "layout.pad_value": "layout <b> {i,j->i,j} 0 1 <X>",
    "block_layout": "block_layout <b> <X>",
    "reindex_read": "reindex_read <b> <X> 0 global",
    "reindex_write": "reindex_write <b> <X> 0 global",
    "ann_access": "ann_access <b> 0 0 <X>",
    "pad_einsum": "pad_einsum <b> <X>",
    "pad_einsum.item": "pad_einsum <b> [<X>,16,16]",
    "split.factor": "split <l> None <X>",
    "split.factor_first": "split <l> <X> None",
    "partition.factor": "partition <l> None <X>",
    "ann.pragma_value": "ann <l> auto_unroll <X>",
    "ann.ms_value": "ann <root> unroll <X>",
    "ann.warp_execution": "ann <b> warp_execution <X>",
    "ann.key": "ann <b> <X> 1",
    "unann.key": "unann <b> <X>",
    "cat.candidates": "cat [<X>,16] =0",
    "cat.probs": "cat [0,16] [<X>,0.5] =0",
    "cat.attr": "cat <X> [0.5,0.5] =0",
    "tile.decision": "tile <l> 64 2 =[<X>,1]",
    "loc.decision": "loc <b> =<X>",
    "cache_read.scope": "cache_read <b> 0 <X>",
    "cache_read.consumers": "cache_read <b> 0 global <X>",
    "tensorize.intrin": "tensorize <l> <X>",
    "bind.thread": "bind <l> <X>",
    "set_dtype.dtype": "set_dtype <b> 0 <X>",
    "get.name": "get <X>",
    "reorder_iters": "reorder_iters <b> <X>",
    "hide_access": 'hide_access <b> "read" <X>',
    "blockize": "blockize <X>",
    "align.offset": "align <b> 0 0 16 <X>",
    "fuse.attr": "fuse <l> <l2> ; <X>",
}
# The slots where MetaSchedule itself writes index maps, plus the value slots an attacker would try first.
MAP_SLOTS = ("layout.map", "layout.pad_value", "block_layout", "reindex_read", "reindex_write", "ann_access",
             "pad_einsum", "split.factor", "ann.pragma_value", "cat.candidates", "tile.decision")

EXTERN_NAMES = ("system", "fork", "execve", "socket", "popen", "dlopen", "call_extern", "call_packed",
                "tvm_call_packed", "__import__", "exec", "eval")
# Every expression slot of the readable notation, F standing for an extern function.
EXTERN_MAPS = {
    "call": "{i,j->F(i),j}",
    "call_second": "{i,j->i,F(j)}",
    "call_no_args_inverse": "{i->i|j->F()}",
    "call_in_sum": "{i,j->i+F(j),j}",
    "call_in_parens": "{i,j->(F(i)),j}",
    "call_in_min": "{i,j->min(i,F(j)),j}",
    "call_divisor": "{i,j->i//F(2),j}",
    "call_labelled": "{i,j->F(i)@1,@1}",
    "call_as_dtype": "{i,j->i:F(j),j}",
    "call_binder_dtype": "{i:F(),j->i,j}",
    "call_spaced": "{i,j->F (i),j}",
    "call_strings": '{i,j->F("int32","touch x"),j}',
    "call_extern_form": '{i,j->call_extern("int32","F","touch x"),j}',
    "call_nested": "{i,j->max(min(F(F(i)),j),i),j}",
    "call_in_inverse_body": "{i,j->j,i|i,j->j,F(i)}",
    "free_var": "{i,j->i+F,j}",  # not a call: a free variable named like one (decodes)
}

SPLIT_FLAGS = ("true 1", "true true", "1 1", "0 1", "true 2", "true -1", 'true "x"', "true [1]", "true None",
               "false true", "true 1.0", "true nan", "true {i->i}")
PARTITION_FLAGS = SPLIT_FLAGS + ("1", "0", "true", "2", "-1", '"x"', "[1]", "None", "1.0")

_NUMBERS = {"int64_max": "9223372036854775807", "int64_min": "-9223372036854775808",
            "int64_max+1": "9223372036854775808", "int64_min-1": "-9223372036854775809",
            "1e19": "10000000000000000000", "40_digits": "9" * 40, "5000_digits": "1" + "0" * 5000,
            "inf": "inf", "-inf": "-inf", "nan": "nan", "-nan": "-nan", "-0.0": "-0.0", "1e308": "1e308",
            "1e309": "1e309", "5e-324": "5e-324"}
NUMERIC_SLOTS = {
    "split.factor": "split <l> None <X>", "split.factor_first": "split <l> <X> None",
    "partition.factor": "partition <l> None <X>", "tile.decision": "tile <l> =[<X>,1]",
    "tile.max_innermost": "tile <l> <X> =[1,1]", "ptile.attr": "ptile <l> <X> 16 =[1,1]",
    "cat.candidates": "cat [<X>,1] =0", "cat.decision": "cat [1,2] =<X>", "cat.probs": "cat [1,2] [<X>,0.5] =0",
    "ann.parallel": "ann <root> par <X>", "ann.auto_unroll": "ann <l> auto_unroll <X>",
    "cache_read.index": "cache_read <b> <X> global", "align.factor": "align <b> 0 0 <X> 0",
    "loc.decision": "loc <b> =<X>", "rfactor.axis": "rfactor <l> <X>", "reindex.index": "reindex <b> <X> 0",
    "rolling_buffer.index": "rolling_buffer <b> <X>", "set_dtype.index": "set_dtype <b> <X> float32",
    "fuse.attr": "fuse <l> <l2> ; <X>", "rev_at.index": "rev_at <b2> <l> 1 <X>",
}

SCOPES = ("global", "shared", "local", "global.texture", "local.xyz", "", "shared.dyn", "wmma.accumulator",
          "global.vtcm", "global.texture-nhwc", "local.warp", "\x00", "../../tmp/x")
THREADS = ("tx", "by", "vz", "threadIdx.w", "blockIdx.x", "vthread", "warp", "", "threadIdx.x.y", "cuda.thread",
           "blockIdx", "threadIdx.x\x00")
DTYPES = ("float16", "int8", "float64", "bfloat16", "handle", "void", "int0", "float32x4", "uint1", "e4m3_float8", "")
INTRINSICS = ("evil_intrin", "dot_16x4_vnni", "wmma_sync_16x16x16_f16f16f32", "", "../../etc/passwd",
              "tvm.contrib.cblas", "dl_pwn")


def _word(s: str) -> str:
    """A string attribute: bare when it is a bare word, quoted otherwise."""
    return s if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", s) and s not in ("None", "true", "false", "inf", "nan") \
        else _q(s)


def _rare_primitives() -> list[Case]:
    """Every mnemonic the codec knows, with plausible arguments (`rare:<mnemonic>:<variant>`)."""
    pick = lambda options, fmt=_word: (lambda ctx, rng: fmt(rng.choice(options)))  # noqa: E731
    t = {
        "get": ["get <name>", 'get <name> "other_func"', 'get "no such block"'],
        "loops": ["loops <b> >3"], "children": ["children <root> >2"], "producers": ["producers <b> >1"],
        "consumers": ["consumers <b> >1"], "output_blocks": ["output_blocks <root> >1"],
        "tile": ["tile <l> =[1,1]"], "ptile": ["ptile <l> 1 16 =[1,1]"], "cat": ["cat [1,2] =0"],
        "loc": ["loc <b> =-1"], "split": ["split <l> None 2"], "partition": ["partition <l> None 2"],
        "fuse": ["fuse <l> <l2>"], "merge": ["merge <l> <l2>"], "reorder": ["reorder <l2> <l>"],
        "unit_loop": ["unit_loop <b>", "unit_loop <l>"], "par": ["par <l>"], "vec": ["vec <l>"],
        "unroll": ["unroll <l>"], "bind": [("bind <l> <X>", pick(THREADS))],
        "ann": ["ann <b> warp_execution"], "unann": ["unann <b> tiling"],
        "cache_read": [("cache_read <b> 0 <X>", pick(SCOPES)), ("cache_read <b> 0 <X> [<b>]", pick(SCOPES))],
        "cache_write": [("cache_write <b> 0 <X>", pick(SCOPES))],
        "cache_inplace": [("cache_inplace <b> 0 <X> >2", pick(SCOPES))],
        "cache_index": [("cache_index <b> <X> 1 >1", pick(SCOPES))],
        "reindex_read": [("reindex_read <b> {i,j->i,j} 0 <X>", pick(SCOPES))],
        "reindex_write": [("reindex_write <b> {i,j->i,j} 0 <X>", pick(SCOPES))],
        "reindex": ["reindex <b> 0 1", "reindex <b> 0 0", "reindex <b> 0 2"],
        "read_at": [("read_at <l> <b> 0 <X>", pick(SCOPES))], "write_at": [("write_at <l> <b> 0 <X>", pick(SCOPES))],
        "set_scope": [("set_scope <b> 0 <X>", pick(SCOPES))], "align": ["align <b> 0 0 16 0"],
        "set_dtype": [("set_dtype <b> 0 <X>", pick(DTYPES))],
        "at": ["at <b> <l>"], "rev_at": ["rev_at <b2> <l>"], "inline": ["inline <b>"], "rev_inline": ["rev_inline <b>"],
        "fuse_epilogue": ["fuse_epilogue <b> <b2>"], "decomp": ["decomp <b> <l>"],
        "decomp_padding": ["decomp_padding <b> <l>"], "rfactor": ["rfactor <l> 0"],
        "blockize": ["blockize <l>", "blockize [<l>,<l2>]"],
        "tensorize": [("tensorize <l> <X>", pick(INTRINSICS)), ("tensorize <b> <X> false", pick(INTRINSICS))],
        "layout": ["layout <b> {i,j->j,i} 0 1", "layout <b> {i,j->i//4,j,i%4} 0 0 0.0 false"],
        "block_layout": ["block_layout <b> {i,j,k->k,j,i}"], "pad_einsum": ["pad_einsum <b> [16,16,16]"],
        "rolling_buffer": ["rolling_buffer <b> 0"], "reorder_iters": ["reorder_iters <b> [2,1,0]"],
        "ann_access": ["ann_access <b> 0 0 {i,j->i-1,j+1}"],
        "hide_access": ['hide_access <b> "read" [0]', 'hide_access <b> "write" [0,1]'],
        "postproc": ["postproc"],
    }
    cases = []
    for mnemonic, variants in t.items():
        for k, v in enumerate(variants):
            make = _with(*v) if isinstance(v, tuple) else _fixed(v)
            cases.append(Case(f"{mnemonic}:{k}", False, make))
    return cases


@functools.lru_cache(maxsize=64)
def _repeat(unit: str, n: int, sep: str = "") -> str:
    return sep.join([unit] * n)


@functools.lru_cache(maxsize=16)
def _long_string(unit: str, n: int, prefix: str = "") -> str:
    return _q(prefix + unit * n)


@functools.lru_cache(maxsize=64)
def _nested(open_: str, inner: str, close: str, depth: int) -> str:
    return open_ * depth + inner + close * depth


@functools.lru_cache(maxsize=32)
def _huge_script(design: str, size: int) -> str:
    """The design part repeated past `size` characters (it decodes, but for its length)."""
    unit = design + "\n"
    return (unit * (size // max(len(unit), 1) + 1))[:size].rsplit("\n", 1)[0]


def _limit(name: str, default: int) -> int:
    return getattr(codec, name, default)


@functools.lru_cache(maxsize=32)
def _just_under_limit(design: str, block: str) -> str:
    """Valid up to the codec's size limits: the design part, then `ann <block> tiling "SSS..."`
    lines as long as a line may be, until the script is as long as a script may be."""
    room = _limit("MAX_SCRIPT_CHARS", 1 << 20) - len(design)
    lines = _limit("MAX_LINES", 1 << 30) - design.count("\n") - 1
    head = f"\nann {block} tiling "
    out = [design]
    while lines > 0 and room > len(head) + 2:
        k = min(_limit("MAX_LINE_CHARS", 1 << 30) - len(head) + 1, room - len(head)) - 2
        out.append(f'{head}"{"S" * k}"')
        room, lines = room - len(out[-1]), lines - 1
    return "".join(out)


@functools.lru_cache(maxsize=32)
def _max_lines(design: str, name: str) -> str:
    """Valid up to the codec's line limit: the design part, then `get <name>` lines."""
    line = f"\nget {name}"
    lines = _limit("MAX_LINES", 1 << 30) - design.count("\n") - 1
    room = (_limit("MAX_SCRIPT_CHARS", 1 << 20) - len(design)) // len(line)
    return design + line * min(lines, room, _limit("MAX_VARIABLES", 1 << 30) // 2)


def _deep_nesting() -> list[Case]:
    cases = []
    for depth in (33, 200, 1000, 5000):
        deep = _nested("[", "1", "]", depth)
        for slot, template in (("cat", "cat <X> =0"), ("ann", "ann <root> unroll <X>"), ("split", "split <l> None <X>"),
                               ("decision", "tile <l> 64 2 =<X>"), ("pad_einsum", "pad_einsum <b> <X>")):
            cases.append(Case(f"list{depth}:{slot}", True, _with(template, deep)))
    map_slots = ("layout <b> <X> 0 1", "block_layout <b> <X>", "ann_access <b> 0 0 <X>", "split <l> None <X>",
                 "ann <l> auto_unroll <X>")

    def in_map(body: Callable[[], str]):
        return lambda ctx, rng: [ctx.fill(rng.choice(map_slots), body())]

    for depth in (33, 1000, 5000):
        cases.append(Case(f"parens{depth}", True,
                          in_map(lambda d=depth: "{i,j->" + _nested("(", "i", ")", d) + ",j}")))
        cases.append(Case(f"min{depth}", True,
                          in_map(lambda d=depth: "{i,j->" + _nested("min(", "i", ",j)", d) + ",j}")))
        cases.append(Case(f"right_assoc{depth}", True,
                          in_map(lambda d=depth: "{i,j->" + _nested("i+(", "i", ")", d) + ",j}")))
        cases.append(Case(f"label_chain_nested{depth}", True, in_map(
            lambda d=depth: "{i->" + "(" * d + "i@1" + "".join(f"+@{k})@{k + 1}" for k in range(1, d + 1)) + "}")))
    for n in (2000, 5000, 20000):
        for op in ("+", "*", "-", "//", "%"):
            cases.append(Case(f"chain{op}{n}", True, in_map(lambda n=n, op=op: "{i,j->" + _repeat("i", n, op) + ",j}")))
        cases.append(Case(f"chain_mixed{n}", True,
                          in_map(lambda n=n: "{i,j->" + _repeat("i+j*2//3%5-i", n // 5, "+") + ",j}")))
        cases.append(Case(f"labels_defined{n}", True,
                          in_map(lambda n=n: "{i->" + "+".join(f"i@{k}" for k in range(1, n + 1)) + "}")))
        cases.append(Case(f"labels_cited{n}", True, in_map(lambda n=n: "{i->i@1" + _repeat("+@1", n) + "}")))
        cases.append(Case(f"arity{n}", True, in_map(lambda n=n: "{" + ",".join(f"i{k}" for k in range(n)) + "->"
                                                     + ",".join(f"i{k}" for k in range(n)) + "}")))
    for n in (100, 1000, 5000):
        cases.append(Case(f"inverse_chain{n}", True, in_map(lambda n=n: "{" + _repeat("->|", n) + "->}")))
        cases.append(Case(f"inverse_chain_vars{n}", True, in_map(lambda n=n: "{" + _repeat("i->i|", n) + "i->i}")))
    cases.append(Case("label_over_64_bits", True, in_map(lambda: "{i->i@99999999999999999999,@99999999999999999999}")))
    # A label is only a name for a shared node: a large one is still the map {i->i,i}, which is
    # plain arithmetic, so it may pass.
    cases.append(Case("label_1e18", False, in_map(lambda: "{i->i@1000000000000000000,@1000000000000000000}")))
    return cases


@functools.lru_cache(maxsize=8)
def _names(n: int) -> str:
    return " ".join(f"x{k}" for k in range(n))


def _huge_counts() -> list[Case]:
    c = [
        Case("loops_1024_x1000", True, lambda ctx, rng: [ctx.fill("loops <b> >1024")] * 1000),
        Case("loops_1024_x3000", True, lambda ctx, rng: [ctx.fill("loops <b> >1024")] * 3000),
        Case("loops_1024", True, _fixed("loops <b> >1024")),
        Case("loops_1025", True, _fixed("loops <b> >1025")),
        Case("loops_99999", True, _fixed("loops <b> >99999")),
        Case("children_1024", True, _fixed("children <root> >1024")),
        Case("named_outputs_1024", True, lambda ctx, rng: [ctx.fill("loops <b> >") + _names(1024)]),
        Case("named_outputs_2000", True, lambda ctx, rng: [ctx.fill("loops <b> >") + _names(2000)]),
        Case("run_99999", True, _fixed("fuse <l>..99999")),
        Case("run_l0_99999", True, _fixed("fuse l0..99999")),
        Case("run_1025", True, lambda ctx, rng: [f"reorder {ctx.l}..{int(ctx.l[1:]) + 1025}" if ctx.l[1:].isdigit()
                                                 else f"reorder {ctx.l}..1025"]),
        Case("split_1024_factors", False, lambda ctx, rng: [ctx.fill("split <l> ") + _repeat("1", 1024, " ")]),
        Case("split_1025_factors", True, lambda ctx, rng: [ctx.fill("split <l> ") + _repeat("1", 1025, " ")]),
        Case("tile_1024", False, lambda ctx, rng: [ctx.fill("tile <l> =[") + _repeat("1", 1024, ",") + "]"]),
        Case("tile_100000", True, lambda ctx, rng: [ctx.fill("tile <l> =[") + _repeat("1", 100000, ",") + "]"]),
        Case("cat_100000", False, lambda ctx, rng: ["cat [" + _repeat("0", 100000, ",") + "] =0"]),
        Case("reorder_100000", True, lambda ctx, rng: ["reorder " + _repeat(ctx.l, 100000, " ")]),
        Case("string_500k_block_name", True, lambda ctx, rng: ["get " + _long_string("A", 500000)]),
        Case("string_500k_unknown_key", True, lambda ctx, rng: [ctx.fill('ann <b> "x" ') + _long_string("A", 500000)]),
        Case("string_500k_tiling", False, lambda ctx, rng: [ctx.fill("ann <b> tiling ") + _long_string("S", 500000)]),
        Case("key_100k_meta_schedule", False,
             lambda ctx, rng: [ctx.fill("ann <b> ") + _long_string("x", 100000, "meta_schedule.") + " 1"]),
        Case("just_under_size_limit", False, lambda ctx, rng: _just_under_limit(ctx.design, ctx.b)),
        Case("max_lines", False, lambda ctx, rng: _max_lines(ctx.design, ctx.name)),
        Case("script_2MB", True, lambda ctx, rng: _huge_script(ctx.design, 2_000_000)),
        Case("line_2MB", True, lambda ctx, rng: "get " + _long_string("A", 2_000_000)),
    ]
    for slot, template in NUMERIC_SLOTS.items():
        for label, number in _NUMBERS.items():
            is_float = not re.fullmatch(r"-?[0-9]+", number)
            too_big = not is_float and (len(number) > 20 or not -2**63 <= int(number) < 2**63)
            refuse = (is_float and slot != "cat.probs") or too_big
            c.append(Case(f"{slot}={label}", refuse, _with(template, number)))
    return c


def _annotation_keys() -> list[Case]:
    g = graphs()
    values = {
        "int": ("1", "0", "-1", "16", "2147483648", "9223372036854775807"),
        "bool": ("true", "false"),
        "float": ("0.5", "inf", "nan"),
        "string": ('"x"', '""', '"SSRSRS"', _q(_LLVM_PAYLOAD), _q(_C_PAYLOAD)),
        "list": ("[1,2]", '["a"]', "[]", "[[1]]"),
        "none": ("None",),
        "variable": ("<v>", "<l>", "<b>"),
        "index_map": ("{i->i}", "{i,j->j,i}", verbatim(g["map_system"]), verbatim(g["harmless_map_identity"]),
                      verbatim(g["expr_system"])),
    }
    targets = ("<b>", "<l>", "<root>")
    cases = []

    def ann(key: Callable, options: tuple[str, ...] | None) -> Callable:
        def make(ctx, rng):
            line = f"ann {ctx.fill(rng.choice(targets))} {key(rng)}"
            return [line + (f" {ctx.fill(rng.choice(options))}" if options else "")]
        return make

    for key in TVM_ANNOTATION_KEYS + ODD_KEYS:
        spell = lambda rng, key=key: rng.choice([_q(key), _word(key)])  # noqa: E731
        for typ, options in [*values.items(), ("default", None)]:
            cases.append(Case(f"{key!r}={typ}", typ == "index_map" or key not in MS_KEYS, ann(spell, options)))
        cases.append(Case(f"unann:{key!r}", False, _with("unann <b> <X>", _q(key))))
    for alias in codec.KEY_ALIASES:
        for typ, options in [*values.items(), ("default", None)]:
            cases.append(Case(f"alias:{alias}={typ}", typ == "index_map", ann(lambda rng, a=alias: a, options)))
        cases.append(Case(f"unann:alias:{alias}", False, _fixed(f"unann <b> {alias}")))
    cases.append(Case("layout_rewrite_preproc=true", False, _fixed("ann <b> layout_rewrite_preproc true")))
    return cases


def _verbatim_graph() -> list[Case]:
    return [Case(f"{slot}:{name}", True, _with(template, verbatim(graph)))
            for name, graph in graphs().items() for slot, template in VALUE_SLOTS.items()]


def _extern_map() -> list[Case]:
    def make(template: str, pattern: str):
        return lambda ctx, rng: [ctx.fill(template, pattern.replace("F", rng.choice(EXTERN_NAMES)))]
    return [Case(f"{slot}:{label}", True, make(VALUE_SLOTS[slot], pattern))
            for label, pattern in EXTERN_MAPS.items() for slot in MAP_SLOTS]


def _predication() -> list[Case]:
    return ([Case(f"split;{flags}", True, _fixed(f"split <l> 5 13 ; {flags}")) for flags in SPLIT_FLAGS]
            + [Case(f"partition;{flags}", flags not in ("1", "0", "true"), _fixed(f"partition <l> 5 13 ; {flags}"))
               for flags in PARTITION_FLAGS])


@functools.lru_cache(maxsize=1)
def red_team_cases() -> dict[str, list[Case]]:
    """Every red-team construct, by mutation (built once; the graphs need TVM)."""
    return {"verbatim_graph": _verbatim_graph(), "extern_map": _extern_map(), "predication": _predication(),
            "annotation_keys": _annotation_keys(), "deep_nesting": _deep_nesting(), "huge_counts": _huge_counts(),
            "rare_primitives": _rare_primitives()}


def apply_case(case: Case, script: str, rng: random.Random, post: bool = False) -> Mutant:
    """`case` applied to `script`: its lines appended to the design part (or after the
    post-processing part, `post`), or the whole script it makes."""
    ctx = context(script)
    made = case.make(ctx, rng)
    if isinstance(made, str):
        return Mutant(made, case.label, case.refuse)
    return Mutant(ctx.append(made, post), case.label + ("+post" if post else ""), case.refuse)


def red_team_mutation(name: str) -> Callable:
    def mutate(rng, s):
        case = rng.choice(red_team_cases()[name])
        return apply_case(case, s, rng, post=rng.random() < 0.2)
    mutate.__name__ = f"_{name}"
    mutate.__doc__ = f"Red team: a random `{name}` construct (`red_team_cases()['{name}']`)."
    return mutate


RED_TEAM = ("verbatim_graph", "extern_map", "predication", "annotation_keys", "deep_nesting", "huge_counts",
            "rare_primitives")


