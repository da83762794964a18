"""The schedule oracle: what the schedule of a script prefix permits next.

Contract: given a workload's IRModule and a prefix of a script (plain instructions and
decisions, as `codec.apply` takes them), `Replayer` applies the prefix in a sandboxed worker
process (`dragonlab.evaluation.workers`) and answers, as plain data, what the checks of
constrained decoding ask of the live schedule, never touching TVM in the caller:

- `Replayer.facts`: the variables still usable, by kind (block, loop, expression, compute
  location), their annotations, loop extents, the blocks and functions of the module, and the
  decision TVM kept for the last instruction (None if the prefix does not apply);
- `Replayer.counts`: how many outputs a query (`get_loops`, ...) gives for each live variable;
- `Replayer.first_applying`: the first of several candidate instructions that applies after the prefix;
- `Replayer.locations`: the compute locations TVM keeps as written for a block;
- `Replayer.sketches`: MetaSchedule's design-space sketches of the workload, as scripts.

A crash or a timeout in the worker means "does not apply" (`Replayer.crashes` counts them).
Every other answer is kept (the last `_MEMO`): the followers of one batch ask the same questions
of the prefixes their scripts share, and only the first goes to the worker (`Replayer.asked`).
`State` is the caller's view of one prefix's facts; `TAKES` says what kind of variable each
argument of an instruction may name, in `State.usable`'s letters; `tile_ok` says whether a text
begins a perfect-tile decision that TVM keeps for a loop's extent. `facts`, `counts`,
`first_applying`, `locations` and `sketches` are the functions the worker runs (module-level so it
imports them by reference).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import OrderedDict

from dragonlab.core.allowlist import INT_RANGES
from dragonlab.core.codec import apply, plain_value
from dragonlab.evaluation.replay import module_json, worker_module
from dragonlab.evaluation.workers import Limits, RemoteError, Worker, WorkerError

# What each argument of an instruction may name, one letter per parameter in script order:
# b a block, l a loop, v an expression (a sampled value), x a block or a loop, @ a loop or a
# compute location (`loc`'s output, which may be the inline or root marker), . anything live.
TAKES = {
    "get": "..", "loops": "b", "children": "x", "producers": "b", "consumers": "b", "output_blocks": "b",
    "tile": "l..", "ptile": "l...", "cat": "..", "loc": "b", "split": "lv..", "partition": "lv.",
    "fuse": "l.", "merge": "l", "reorder": "l", "unit_loop": "x", "par": "l", "vec": "l", "unroll": "l",
    "bind": "l.", "ann": "x.v", "unann": "x.", "cache_read": "b..b", "cache_write": "b..b",
    "cache_inplace": "b..", "cache_index": "b..", "reindex_read": "b...", "reindex_write": "b...",
    "reindex": "b..", "read_at": "lb..", "write_at": "lb..", "set_scope": "b..", "align": "b....",
    "set_dtype": "b..", "at": "b@..", "rev_at": "b@..", "inline": "b", "rev_inline": "b",
    "fuse_epilogue": "bb", "decomp": "bl", "decomp_padding": "bl", "rfactor": "l.", "blockize": "x.",
    "tensorize": "x..", "layout": "b.....", "block_layout": "b.", "pad_einsum": "b.", "rolling_buffer": "b.",
    "reorder_iters": "b.", "ann_access": "b...", "hide_access": "b..", "postproc": "",
}

_MODULES: dict = {}  # in a worker: key -> the module's JSON, loaded afresh for every replay
# (TVM can change a module in place through a schedule made from it: replay.worker_module)
_SCHEDULES: OrderedDict = OrderedDict()  # in a worker: the last prefixes replayed, and their schedules
_KEEP = 32
_MEMO = 4096  # answers a Replayer keeps (a few kilobytes each)


def _module(key: str, mod_json: str | None):
    if key not in _MODULES:
        if mod_json is None:
            raise LookupError(f"module {key} is not loaded")
        _MODULES[key] = mod_json
    return worker_module(key, _MODULES[key])


def _replayed(key: str, mod_json: str | None, plain: list, *, fresh: bool = False):
    """The schedule of `plain` applied to the module, and its variables by name (the outputs of
    `loc` excepted: they may be the inline/root markers, which only a replay understands).
    The last few are kept: a line's look-ahead and its output counts use the replay of its
    facts. `fresh`: replay anyway (the look-ahead applies primitives to copies of a kept
    schedule, and TVM schedules have changed what they were made from before)."""
    ident = (key, json.dumps(plain))
    if ident in _SCHEDULES and not fresh:
        _SCHEDULES.move_to_end(ident)
        return _SCHEDULES[ident]
    sch = apply(plain, _module(key, mod_json))
    if len(sch.trace.insts) != len(plain[0]):
        raise ValueError("the schedule's trace does not match the script")
    names = {n: rv for inst, live in zip(plain[0], sch.trace.insts) for n, rv in zip(inst[3], live.outputs)
             if inst[0] != "SampleComputeLocation"}
    _SCHEDULES.pop(ident, None)
    _SCHEDULES[ident] = sch, names  # the newest
    while len(_SCHEDULES) > _KEEP:
        _SCHEDULES.popitem(last=False)
    return sch, names


def facts(key: str, mod_json: str | None, plain: list, *, progress=None) -> dict:
    """Run in a worker process: apply `plain` to the module and return, as plain data,
    everything the checks ask of the schedule but the output counts (`counts`: only lines
    that query them need them). A primitive on an odd argument can crash TVM, as `children`
    of a compute-location marker does, so none of this runs in the caller."""
    from tvm.s_tir.schedule import LoopRV, SBlockRV, _ffi_api
    from tvm.s_tir.stmt import SBlock
    from tvm.tirx import IntImm

    insts = plain[0]
    sch, _ = _replayed(key, mod_json, plain, fresh=True)
    trace = sch.trace
    out = {"usable": {k: [] for k in "blv@"}, "annotations": {}, "extents": {}}
    for inst, applied in zip(insts, trace.insts):
        for name, rv in zip(inst[3], applied.outputs):
            kind = "b" if isinstance(rv, SBlockRV) else "l" if isinstance(rv, LoopRV) else "v"
            if inst[0] == "SampleComputeLocation":
                out["usable"]["@"].append(name)  # a loop, or the inline/root marker: only `at` takes it
            if kind == "v":
                out["usable"]["v"].append(name)
                continue
            try:
                node = _ffi_api.ScheduleGet(sch, rv)  # Schedule.get without its (10x slower) type checks
            except Exception:  # a block or loop that is gone
                continue
            out["usable"][kind].append(name)
            out["annotations"][name] = sorted(str(k) for k in node.annotations)
            if kind == "l":
                out["extents"][name] = int(node.extent.value) if isinstance(node.extent, IntImm) else None
    blocks, stack = set(), [func.body for func in sch.mod.functions.values()]
    while stack:  # every statement that holds others keeps them in one of these fields
        node = stack.pop()
        if isinstance(node, SBlock):
            blocks.add(node.name_hint)
        for field in ("body", "seq", "block", "init", "then_case", "else_case"):
            child = getattr(node, field, None)
            if child is not None:
                stack.extend(child) if field == "seq" else stack.append(child)
    out["blocks"] = sorted(blocks)
    out["functions"] = sorted(gv.name_hint for gv in sch.mod.functions)
    last = trace.get_decision(trace.insts[-1]) if insts else None
    out["decision"] = None if last is None else plain_value(last)
    return out


def counts(key: str, mod_json: str | None, plain: list, method: str, *, progress=None) -> dict[str, int]:
    """Run in a worker: how many outputs the Schedule query `method` (get_loops, ...) gives for
    each live variable after `plain` that it takes (blocks; loops too for get_child_blocks)."""
    from tvm.s_tir.schedule import LoopRV, SBlockRV, _ffi_api

    sch, names = _replayed(key, mod_json, plain)
    query = sch.copy()  # a query adds to a schedule's trace
    ffi = getattr(_ffi_api, "Schedule" + method.title().replace("_", ""))  # Get...: no type checks
    out = {}
    for name, rv in names.items():
        if isinstance(rv, SBlockRV) or method == "get_child_blocks" and isinstance(rv, LoopRV):
            try:
                out[name] = len(ffi(query, rv))
            except Exception:  # gone
                pass
    return out


# The primitives a look-ahead tries most, applied directly to a copy of the schedule (a replay of
# the whole script per candidate costs 100x more). Others are replayed. inputs/attrs: TVM's.
_DIRECT = {
    "ComputeInline": lambda s, i, a: s.compute_inline(i[0]),
    "ReverseComputeInline": lambda s, i, a: s.reverse_compute_inline(i[0]),
    "Parallel": lambda s, i, a: s.parallel(i[0]),
    "Vectorize": lambda s, i, a: s.vectorize(i[0]),
    "Unroll": lambda s, i, a: s.unroll(i[0]),
    "ComputeAt": lambda s, i, a: s.compute_at(i[0], i[1], preserve_unit_loops=bool(a[0]), index=a[1]),
    "ReverseComputeAt": lambda s, i, a: s.reverse_compute_at(i[0], i[1], preserve_unit_loops=bool(a[0]),
                                                             index=a[1]),
    "DecomposeReduction": lambda s, i, a: s.decompose_reduction(i[0], i[1]),
    "RFactor": lambda s, i, a: s.rfactor(i[0], a[0]),
}


def first_applying(key: str, mod_json: str | None, plain: list, insts: list, *, progress=None) -> int | None:
    """Run in a worker: the index of the first instruction that applies after the script
    `plain`, trying them in order (each try of a primitive outside `_DIRECT` replays the whole
    script), or None if none does."""
    sch, names = _replayed(key, mod_json, plain)
    for index, inst in enumerate(insts):
        kind, inputs, attrs, _ = inst
        try:
            if kind in _DIRECT and all(isinstance(v, str) and v in names for v in inputs):
                _DIRECT[kind](sch.copy(), [names[v] for v in inputs], attrs)
            else:
                apply([plain[0] + [inst], plain[1]], _module(key, None))
            return index
        except Exception:
            continue
    return None


def locations(key: str, mod_json: str | None, plain: list, block: str, *, progress=None) -> list[int]:
    """Run in a worker: the compute locations TVM keeps as written for `block` after `plain`
    (-2 inline, -1 root, else a loop's index). TVM repairs a decision it cannot take to the
    largest valid one below it, so sampling (on a copy of the schedule: it changes no IR) with a
    huge decision gives the largest, with one below that the next, and so on: one replay and a
    sample per location."""
    sch, names = _replayed(key, mod_json, plain, fresh=True)
    rv = names[block]

    def kept(decision: int) -> int:
        probe = sch.copy()
        probe.sample_compute_location(rv, decision=decision)
        return int(probe.trace.get_decision(probe.trace.insts[-1]))

    found, below = [], 2**31 - 1
    while below >= -2 and (valid := kept(below)) <= below and valid not in found:
        found.append(valid)
        below = valid - 1
    return sorted(found)


def sketches(key: str, mod_json: str | None, target_config: dict, *, progress=None) -> list[str]:
    """Run in a worker process: the design parts of MetaSchedule's design-space sketches for the
    module on the target, as scripts, each once. Each sketch comes as it is (what a replay of the
    design space writes) and simplified as evolutionary search simplifies the candidates it
    measures (dead queries dropped: the corpus's scripts). Its decisions are random ones: only
    its lines' shape is meant."""
    from dragonlab.core.codec import design_part, encode, to_plain
    from dragonlab.search.explore import tune_context

    scripts = []
    for space in tune_context(_module(key, mod_json), target_config).generate_design_space():
        for trace in (space.trace, space.trace.simplified(remove_postproc=True)):
            text = encode(design_part(to_plain(trace)))
            if text not in scripts:
                scripts.append(text)
    return scripts


class Replayer:
    """Applies scripts to a workload in a worker process (dragonlab.evaluation.workers) and caches what it
    learns. A crash or a timeout there means the script does not apply; `crashes` counts them."""

    # A first tensorize imports TVM's tensor intrinsics: 20 s on an idle 2-core machine, over 60 s on a busy one.
    def __init__(self, limits: Limits = Limits(timeout_sec=180.0, memory_bytes=4 << 30)):
        self.worker = Worker(limits)
        self.crashes = 0
        self.asked = 0  # questions the worker answered or refused (the memo's are not counted)
        # question -> answer: the followers of one batch share prefixes (every sampled script of a
        # prompt begins with the same sketch lines), and an answer depends only on the question
        # (each replay starts from the module's JSON). A crash's None is not kept: it may be the load.
        self._memo: OrderedDict = OrderedDict()
        self._sketches: dict = {}  # (module id, target) -> its sketches
        self._json: dict = {}
        self._pid, self._sent = None, set()  # which modules the worker holds

    def facts(self, mod, plain: list) -> dict | None:
        return self._call(facts, mod, plain)

    def counts(self, mod, plain: list, method: str) -> dict[str, int]:
        """How many outputs the query `method` gives for each live variable after `plain`."""
        return self._call(counts, mod, plain, method) or {}

    def locations(self, mod, plain: list, block: str) -> list[int]:
        """The compute locations TVM keeps as written for `block` after `plain` (none if the
        worker fails)."""
        return self._call(locations, mod, plain, block) or []

    def sketches(self, mod, target_config: dict) -> tuple[str, ...]:
        """MetaSchedule's design-space sketches of `mod` on the target, as scripts (none if the
        worker fails); asked of the worker once per module and target."""
        key = (id(mod), json.dumps(target_config, sort_keys=True))
        if key not in self._sketches:
            found = self._ask(sketches, self._key(mod), target_config)  # kept for good, not in the memo
            if found is None:
                return ()  # not kept: a restarted worker may answer next time
            self._sketches[key] = tuple(found)
        return self._sketches[key]

    def first_applying(self, mod, plain: list, insts: list) -> int | None:
        """The index of the first instruction (in the order given) that applies after `plain`,
        or None: none does, or the worker died."""
        return self._call(first_applying, mod, plain, insts)

    def _key(self, mod) -> str:
        key = str(id(mod))
        if key not in self._json:
            self._json[key] = (mod, module_json(mod))  # the module is kept so its id stays unique
        return key

    def _call(self, fn, mod, *args):
        key = self._key(mod)
        question = (fn.__name__, key, json.dumps(args))
        if question in self._memo:
            self._memo.move_to_end(question)
            return self._memo[question]
        crashes = self.crashes
        answer = self._ask(fn, key, *args)
        if self.crashes == crashes:
            self._memo[question] = answer
            if len(self._memo) > _MEMO:
                self._memo.popitem(last=False)
        return answer

    def _ask(self, fn, key: str, *args):
        pid = self.worker.pid
        if pid != self._pid:  # a fresh worker (or a restarted one) has no modules yet
            self._pid, self._sent = pid, set()
        self.asked += 1
        try:
            result = self.worker.call(fn, key, None if key in self._sent else self._json[key][1], *args)
            self._sent.add(key)
            return result
        except RemoteError as e:
            if "is not loaded" in str(e):  # the worker was restarted between the calls
                self._pid = None
                return self._ask(fn, key, *args)
            return None  # TVM refused the script: it does not apply
        except WorkerError:
            self.crashes += 1
            return None

    def close(self) -> None:
        self.worker.close()


class State:
    """The complete lines so far, applied (in the worker): what each variable names there."""

    _serials = itertools.count()

    def __init__(self, insts: list, decisions: list, facts: dict, counts=None):
        """`counts(method)`: the output counts of a query for every variable, asked when needed."""
        self.insts, self.decisions, self.facts = insts, decisions, facts
        self._count, self._counts = counts, {}
        self.serial = next(self._serials)
        self.defined = {name for inst in insts for name in inst[3]}
        self.count = sum(len(inst[3]) for inst in insts)
        self.usable = {k: set(v) for k, v in facts["usable"].items()}
        self.usable["x"] = self.usable["b"] | self.usable["l"]
        self.usable["@"] |= self.usable["l"]
        self.usable["."] = set().union(*self.usable.values())
        self.annotated = {n for n, keys in facts["annotations"].items() if keys}
        self.types = {**dict.fromkeys(self.usable["v"], "var"), **dict.fromkeys(self.usable["l"], "loop"),
                      **dict.fromkeys(self.usable["b"], "block")}  # as the allowlist names them
        self._blocks, self._functions = set(facts["blocks"]), set(facts["functions"])
        self.after_postproc = any(inst[0] == "EnterPostproc" for inst in insts)
        self.values = {}  # each sampled variable's value, as its decision gives it
        for index, decision in decisions:
            kind, _, attrs, outputs = insts[index]
            if kind == "SamplePerfectTile":
                self.values.update(zip(outputs, decision))
            elif kind == "SampleCategorical" and outputs and isinstance(decision, int):
                self.values[outputs[0]] = attrs[0][decision]

    def blocks(self) -> set[str]:
        return self._blocks

    def functions(self) -> set[str]:
        return self._functions

    def annotations(self, name: str) -> set[str]:
        return set(self.facts["annotations"].get(name, ()))

    def extent(self, loop: str) -> int | None:
        return self.facts["extents"].get(loop)

    def query(self, method: str, name: str) -> int | None:
        """How many outputs `method` (a Schedule method) gives for variable `name`."""
        if method not in self._counts:
            self._counts[method] = self._count(method) if self._count else {}
        return self._counts[method].get(name)


def tile_ok(text: str, extent: int, n: int | None, inner: int, most: int = INT_RANGES["tile_n"][1],
            sizes: tuple[int, ...] | None = None) -> bool:
    """Whether `text` begins a legal perfect-tile decision `[f1,...,fn]` of a loop of `extent`:
    every factor divides what is left, the product is the extent, the innermost is at most
    `inner` (when positive), at least two factors and at most `most` (the allowlist's), one of
    `sizes` factors when given, and exactly `n` when `n` is given. The empty text begins one
    if any exists."""
    if not text.startswith("["):
        return text == "" and tile_ok("[", extent, n, inner, most, sizes)
    closed = text.endswith("]")
    items = text[1:-1 if closed else None].split(",")
    if not all(s.isdigit() and not s.startswith("0") for s in items[:-1]):
        return False
    left = extent
    for s in items[:-1]:
        f = int(s)
        if left % f:
            return False
        left //= f
    last = items[-1]
    done = len(items) - 1  # complete factors before the last item
    counts = [c for c in range(2, most + 1) if (n is None or c == n) and (sizes is None or c in sizes)]
    if closed:
        if not (last.isdigit() and not last.startswith("0")):
            return False
        return left == int(last) and done + 1 in counts and (inner <= 0 or left <= inner)
    if last and not last.isdigit():
        return False

    def option(q: int, k: int) -> bool:
        """Whether q can be factor done + 1 of k, the rest multiplying to what is left."""
        rest, slots = left // q, k - done - 1
        if slots == 0:  # q is the innermost
            return rest == 1 and (inner <= 0 or q <= inner)
        return slots >= 2 or inner <= 0 or rest <= inner  # rest, then 1s

    return any(str(q).startswith(last) and any(option(q, k) for k in counts if k > done) for q in _divisors(left))


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]
