"""Constrained decoding: every script a model writes decodes, applies and keeps its decisions.

While a model writes a script, a `ScriptFollower` per sequence reads it with the codec's
`LineReader` and keeps a live schedule of the workload with every complete line applied.
`ScriptConstraint`, a transformers logits processor, lets a token through only if the text
stays on track:

- the open line can still become a line of the grammar (codec.LineReader);
- every variable it names is defined, still exists in the schedule (a loop that was split does
  not) and is of the kind the argument takes: block, loop or expression (`_TAKES`);
- decisions are legal: a tile's factors divide the loop's extent, multiply to it, and the
  innermost is at most `max_innermost_factor`; a categorical index is in range; a compute
  location is one that TVM offers for the block (and `loc` names only blocks that have one);
  an output count `>N` is the true count;
- fuse, reorder and merge name each loop once;
- a line ends (a newline or the end of the script) only if it applies to the live schedule and
  TVM keeps its decision as written (no silent repair).

The checks look ahead far enough that a legal prefix of a tile or a count can always be
finished. What they cannot foresee (a primitive that rejects its arguments only once the line
is complete) can leave no token to continue with: a *dead end*. Then the script ends, and, as
when `max_new_tokens` runs out, the unfinished last line is dropped, so what comes back is
always complete lines that apply. `ScriptConstraint.endings` counts how scripts ended.

Greedy decoding checks tokens in order of probability and takes the first legal one. Sampling
draws a token from the model's distribution (at the generation's temperature, within its top-p
nucleus) and checks it; a refused token is removed and another drawn, so what is sampled is
exactly the model's distribution restricted to legal tokens, at the cost of one check per draw.
The processor leaves only the chosen token unmasked. Only tokens whose text is printable ASCII
and newlines can be written, as in every script the encoder writes.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter, OrderedDict
from collections.abc import Mapping

from dragonlab.core.allowlist import ANNOTATIONS, POSTPROC_ANNOTATIONS, refusal
from dragonlab.core.codec import BY_MNEMONIC, KEY_ALIASES, LineReader, ScriptSyntaxError, apply, plain_value
from dragonlab.core.errors import InputError
from dragonlab.evaluation.evaluate import worker_module
from dragonlab.evaluation.workers import Limits, RemoteError, Worker, WorkerError

# What each argument of an instruction may name, one letter per parameter in script order:
# b a block, l a loop, v an expression (a sampled value), x a block or a loop, @ a loop or a
# compute location (`loc`'s output, which may be the inline or root marker), . anything live.
_TAKES = {
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
_SAMPLING = {"tile", "ptile", "cat", "loc"}  # the kinds that carry a decision
# Kinds whose output count depends on the workload, and how to count on a copy of the schedule.
_COUNTS = {"loops": "get_loops", "children": "get_child_blocks", "producers": "get_producers",
           "consumers": "get_consumers", "output_blocks": "get_output_blocks"}
_PRINTABLE = {chr(c) for c in range(0x20, 0x7F)} | {"\n"}
# The longest line a constrained script may have. The longest in the quick dataset is 129
# characters (a layout with its index map); without a bound a model can extend a list or a
# `reorder` without end, and each check re-reads the whole open line.
MAX_LINE = 512
# The annotation keys a constrained `ann` may write: those MetaSchedule writes in a design part,
# which are the ones the evaluator accepts (an `unann` may only remove one that is there).
# Free-form keys would also let a model write words without end.
_KEYS = set(ANNOTATIONS) | set(POSTPROC_ANNOTATIONS)  # the latter only after postproc (the allowlist says where)
_SPELLINGS = {key: alias for alias, key in KEY_ALIASES.items()}


_MODULES: dict = {}  # in a worker: key -> the module's JSON, loaded afresh for every replay
# (TVM can change a module in place through a schedule made from it: evaluate.worker_module)
_SCHEDULES: OrderedDict = OrderedDict()  # in a worker: the last prefixes replayed, and their schedules
_KEEP = 32


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
}


def try_lines(key: str, mod_json: str | None, plain: list, insts: list, *, progress=None) -> list[bool]:
    """Run in a worker: whether each instruction applies after the script `plain`."""
    sch, names = _replayed(key, mod_json, plain)
    out = []
    for inst in insts:
        kind, inputs, attrs, _ = inst
        try:
            if kind in _DIRECT and all(isinstance(v, str) and v in names for v in inputs):
                _DIRECT[kind](sch.copy(), [names[v] for v in inputs], attrs)
            else:
                apply([plain[0] + [inst], plain[1]], _module(key, None))
            out.append(True)
        except Exception:
            out.append(False)
    return out


class Replayer:
    """Applies scripts to a workload in a worker process (dragonlab.evaluation.workers) and caches what it
    learns. A crash or a timeout there means the script does not apply; `crashes` counts them."""

    # A first tensorize imports TVM's tensor intrinsics: 20 s on an idle 2-core machine, over 60 s on a busy one.
    def __init__(self, limits: Limits = Limits(timeout_sec=180.0, memory_bytes=4 << 30)):
        self.worker = Worker(limits)
        self.crashes = 0
        self._json: dict = {}
        self._pid, self._sent = None, set()  # which modules the worker holds

    def facts(self, mod, plain: list) -> dict | None:
        return self._call(facts, mod, plain)

    def counts(self, mod, plain: list, method: str) -> dict[str, int]:
        """How many outputs the query `method` gives for each live variable after `plain`."""
        return self._call(counts, mod, plain, method) or {}

    def try_lines(self, mod, plain: list, insts: list) -> list[bool]:
        """Whether each instruction applies after `plain` (all False if the worker dies)."""
        result = self._call(try_lines, mod, plain, insts)
        return result if result is not None else [False] * len(insts)

    def _call(self, fn, mod, *args):
        import tvm

        key = str(id(mod))
        if key not in self._json:
            self._json[key] = (mod, tvm.ir.save_json(mod))  # the module is kept so its id stays unique
        pid = self.worker.pid
        if pid != self._pid:  # a fresh worker (or a restarted one) has no modules yet
            self._pid, self._sent = pid, set()
        try:
            result = self.worker.call(fn, key, None if key in self._sent else self._json[key][1], *args)
            self._sent.add(key)
            return result
        except RemoteError as e:
            if "is not loaded" in str(e):  # the worker was restarted between the calls
                self._pid = None
                return self._call(fn, mod, *args)
            return None  # TVM refused the script: it does not apply
        except WorkerError:
            self.crashes += 1
            return None

    def close(self) -> None:
        self.worker.close()


class _State:
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
        self._blocks, self._functions = set(facts["blocks"]), set(facts["functions"])

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


class _Reader(LineReader):
    def __init__(self, state: _State):
        super().__init__((), state.count)
        self.defined = state.defined  # shared, not copied: a reader per candidate token, and none commits
        self.state = state

    def names(self):
        if self.kind is None or self.param is None:
            return self.defined
        takes = _TAKES[self.kind.mnemonic]
        if self.kind.mnemonic == "unann" and self.param == 0:
            return self.state.annotated  # only what has an annotation to remove
        return self.state.usable[takes[self.param]] if self.param < len(takes) else self.defined


class ScriptFollower:
    """Follows one script as it is written; `allows(piece)` says whether `piece` may come next."""

    def __init__(self, mod, replayer: Replayer | None = None, *, target_kind: str = "llvm"):
        """`replayer`: the worker to apply lines in, shared by followers (a private one if None);
        `target_kind`: TVM's kind of the target the script is for, whose allowlist it keeps."""
        self.mod, self.target_kind = mod, target_kind
        self.replayer = replayer or Replayer()
        self.state = self._state([], [])
        if self.state is None:
            raise ValueError("the workload has no schedule to follow (applying nothing failed)")
        self.lines: list[str] = []
        self.open = ""  # the line being written
        self.ending: str | None = None  # "eos", "dead end" or "length" once it has ended
        self.dead_end = False
        self._after_cache: dict = {}
        self._readers: dict = {}
        self._locations: dict = {}
        self._starts: dict = {}
        self._applies_cache: dict = {}

    def allows(self, piece: str) -> bool:
        if not piece or not set(piece) <= _PRINTABLE:
            return False
        state, line = self.state, self.open
        *complete, rest = piece.split("\n")
        for segment in complete:
            state = self._after(state, line + segment)
            if state is None:
                return False
            line = ""
        return len(line + rest) <= MAX_LINE and self._viable(state, line + rest)

    def advance(self, piece: str) -> None:
        """Write `piece` (which `allows` accepted)."""
        *complete, rest = piece.split("\n")
        for segment in complete:
            line = self.open + segment
            state = self._after(self.state, line)
            if state is None:
                raise ValueError(f"line {len(self.lines) + 1} does not apply: {line!r}")
            self.state, self.open = state, ""
            self.lines.append(line)
        self.open += rest

    def can_end(self) -> bool:
        return self.open == "" or self._after(self.state, self.open) is not None

    def end(self, how: str) -> None:
        """The script ended: "eos" (the model ended it), "dead end" or "length"."""
        if self.ending is None:
            self.ending = "dead end" if self.dead_end else how
            if self.open and self._after(self.state, self.open) is not None:
                self.lines.append(self.open)  # a complete last line without a newline
            self.open = ""

    def script(self) -> str:
        """The complete lines written so far: a script that decodes and applies."""
        return "\n".join(self.lines)

    def _reader(self, state: _State) -> _Reader:
        if state.serial not in self._readers:
            self._readers[state.serial] = _Reader(state)
        return self._readers[state.serial]

    def _after(self, state: _State, line: str) -> _State | None:
        """The state after the complete `line`, or None if it does not decode, apply or keep
        its decision."""
        key = (state.serial, line)
        if key not in self._after_cache:
            # the checks of an open line hold for a complete one too
            self._after_cache[key] = self._apply_line(state, line) if self._viable(state, line, complete=True) else None
        return self._after_cache[key]

    def _apply_line(self, state: _State, line: str) -> _State | None:
        reader = self._reader(state)
        try:
            inst, decision = reader.read(line, open_end=False)
        except ScriptSyntaxError:
            return None
        index = len(state.insts)
        decisions = state.decisions + ([[index, decision]] if decision != () else [])
        after = self._state(state.insts + [inst], decisions)
        return after if after is not None and after.facts["decision"] == (None if decision == () else decision) \
            else None

    def _state(self, insts: list, decisions: list) -> _State | None:
        plain = [insts, decisions]
        if refusal(plain, self.target_kind):  # the evaluator refuses these unapplied
            return None
        facts = self.replayer.facts(self.mod, plain)
        return None if facts is None else \
            _State(insts, decisions, facts, lambda method: self.replayer.counts(self.mod, plain, method))

    def _viable(self, state: _State, line: str, *, complete: bool = False) -> bool:
        """Whether the open `line` can still be completed into one that applies. `complete`:
        the line ends here (and will be applied), so only the checks of what it holds count."""
        if line == "":
            return True
        reader = _Reader(state)  # its own: the checks below read other lines
        try:
            reader.read(line, open_end=True)
        except ScriptSyntaxError:
            return False
        kind = reader.kind
        if kind is None or line == kind.mnemonic:  # the mnemonic is being written
            word = line.split(" ")[0]
            return complete or any(self._can_start(state, m) for m in BY_MNEMONIC if m.startswith(word))
        open_value = reader.written - 1 if reader.value_end == len(line) else None
        if not self._values_ok(state, kind, reader.values[:reader.written], open_value):
            return False
        if not complete and line.endswith(" ") and not self._more_can_follow(state, kind, reader):
            return False
        if kind.mnemonic in ("fuse", "reorder", "merge") and self._names_repeat(state, line, complete):
            return False
        in_arguments = reader.decision_at is None and reader.outputs_at is None
        if not complete and in_arguments:  # the argument being written: can some variable there make it apply?
            k = reader.written if line.endswith(" ") else open_value if open_value is not None else \
                reader.param if reader.param == reader.written else None
            if k is not None and k == reader.param and not line.endswith(" ") \
                    and not _starts_like("key" if kind.mnemonic == "get" else kind.params[k].type,  # block names
                                         line[reader.value_start:reader.value_start + 1]):
                return False
            if k is not None and k < len(kind.params) and self._deciding(kind, k):
                head, _, typed = line.rpartition(" ")
                if not self._some_completion_applies(state, kind, k, head, typed):
                    return False
            if kind.mnemonic == "loc" and k == 0:  # a block with somewhere to go (the root block has none)
                typed = "" if line.endswith(" ") else line.rpartition(" ")[2]
                if not any(self._valid_locations(state, b) for b in state.usable["b"] if b.startswith(typed)):
                    return False
            if kind.mnemonic == "loc" and reader.written == 1 and line.endswith(" ") \
                    and not self._valid_locations(state, reader.values[0]):
                return False
        if reader.decision_at is not None:
            if kind.mnemonic not in _SAMPLING:
                return False
            end = reader.outputs_at - 2 if reader.outputs_at is not None else len(line)
            if not self._decision_ok(state, kind.mnemonic, reader.values, line[reader.decision_at:end]):
                return False
        if reader.outputs_at is not None:
            return self._count_ok(state, kind.mnemonic, reader.values, line[reader.outputs_at:])
        return True

    @staticmethod
    def _names_repeat(state: _State, line: str, complete: bool) -> bool:
        """fuse, reorder and merge take each loop once (TVM refuses a repeat): whether the
        names of `line` repeat one, not counting a last name that may still grow into another."""
        reader = _Reader(state)
        try:
            reader.read(line.removesuffix(" "), open_end=not complete)
        except ScriptSyntaxError:
            return False
        names = reader.values[0] if reader.values and isinstance(reader.values[0], list) else []
        if names and not complete and not line.endswith(" ") \
                and any(n.startswith(names[-1]) and n != names[-1] for n in state.usable["l"]):
            names = names[:-1]
        return len(set(names)) < len(names)

    @staticmethod
    def _more_can_follow(state: _State, kind, reader) -> bool:
        """After a line's trailing ' ': another argument, a decision or an output count."""
        if reader.decision_at is not None or reader.outputs_at is not None:
            return False  # nothing follows them but ' >N'
        params = kind.params
        if reader.written < len(params) or kind.mnemonic in _SAMPLING \
                or reader.written and params[reader.written - 1].index is None:
            return True
        if kind.mnemonic in _COUNTS:
            return state.query(_COUNTS[kind.mnemonic], reader.values[0]) != 0
        return kind.count == "*"  # a count that only applying tells (cache_index, cache_inplace)

    @staticmethod
    def _variables_left(kind, k: int) -> int | None:
        """If parameter k and at most one after it are variables that the line needs, and the
        rest have defaults, how many such variables (1 or 2); else None. Then whether the line
        can apply is decided by those variables alone, so it can be checked by trying them."""
        params = kind.params
        if kind.mnemonic in _SAMPLING or k >= len(params):
            return None
        needed = [p for p in params[k:] if p.default == ()]
        if params[k].type != "rv" or params[k].index is None or len(needed) > 2:
            return None
        if any(p.type != "rv" or p.index is None for p in needed[1:]):
            return None
        return max(1, len(needed))

    def _deciding(self, kind, k: int) -> bool:
        return self._variables_left(kind, k) is not None

    def _can_start(self, state: _State, mnemonic: str) -> bool:
        """Whether a line of `mnemonic` can apply at all, when its variables decide it."""
        key = (state.serial, mnemonic)
        if key not in self._starts:
            kind, takes = BY_MNEMONIC[mnemonic], _TAKES[mnemonic]
            first = state.annotated if mnemonic == "unann" else state.usable[takes[0]] if takes else ()
            if kind.params and kind.params[0].type == "rv" and not first:
                self._starts[key] = False  # nothing it could name
            elif mnemonic == "loc":
                self._starts[key] = any(self._valid_locations(state, b) for b in first)
            else:
                self._starts[key] = not kind.params or not self._deciding(kind, 0) \
                    or self._some_completion_applies(state, kind, 0, mnemonic, "")
        return self._starts[key]

    def _some_completion_applies(self, state: _State, kind, k: int, head: str, typed: str,
                                 budget: int = 64) -> bool:
        """`head` is a line up to parameter k, a variable which `typed` begins, and after which
        at most one more variable is needed: some choice of them must make the line apply
        (`inline b` must not become `inline b0` if b0 cannot be inlined). After `budget`
        failed tries it gives up and says yes: the check is to avoid dead ends, not to be one."""
        takes, mnemonic = _TAKES[kind.mnemonic], kind.mnemonic
        newest_first = lambda names: sorted(names, key=lambda n: (len(n), n), reverse=True)  # noqa: E731
        first = newest_first(n for n in state.usable[takes[k]] if n.startswith(typed))
        if mnemonic in _COUNTS:  # a count query on a live variable always applies with its true count
            return any(state.query(_COUNTS[mnemonic], a) is not None for a in first)
        second = newest_first(state.usable[takes[k + 1]]) if self._variables_left(kind, k) == 2 else [None]
        lines = [f"{head} {a}" + (f" {b}" if b else "") for a in first for b in second]
        return any(self._applies(state, lines[:budget])) or len(lines) > budget

    def _applies(self, state: _State, lines: list[str]) -> list[bool]:
        """Whether each complete line applies after `state`, tried together in the worker (the
        full check of a line the model writes is `_after`; this one is for looking ahead)."""
        todo = [line for line in lines if (state.serial, line) not in self._applies_cache]
        insts = []
        for line in todo:
            try:
                inst, decision = self._reader(state).read(line, open_end=False)
            except ScriptSyntaxError:
                inst = None
            insts.append(inst)
        if any(insts):
            results = self.replayer.try_lines(self.mod, [state.insts, state.decisions], [i for i in insts if i])
            verdicts = iter(results)
            for line, inst in zip(todo, insts):
                self._applies_cache[(state.serial, line)] = bool(inst) and next(verdicts)
        return [self._applies_cache.get((state.serial, line), False) for line in lines]

    def _values_ok(self, state: _State, kind, values: list, open_value: int | None) -> bool:
        """Written attributes of the type their parameter takes; `get` names a block of the
        schedule. `open_value`: the index of a value that ends the text so far (it may grow)."""
        for k, (p, v) in enumerate(zip(kind.params, values)):
            if p.index is None:
                continue
            if p.type == "int" and not (type(v) is int):
                return False
            if p.type == "bool" and not isinstance(v, bool):
                return False
            if p.type in ("str", "key", "thread") and not isinstance(v, str):
                return False
            if p.type == "key":
                keys = state.annotations(values[0]) if kind.mnemonic == "unann" else _KEYS
                spellings = {_SPELLINGS.get(key, key) for key in keys}
                if not (v in keys or k == open_value and any(sp.startswith(v) for sp in spellings)):
                    return False
            if kind.mnemonic == "get":
                valid = state.blocks() if k == 0 else state.functions()
                if not (any(b.startswith(v) for b in valid) if k == open_value else v in valid):
                    return False
        return True

    def _decision_ok(self, state: _State, mnemonic: str, values: list, text: str) -> bool:
        if mnemonic == "tile":
            n = values[2] if isinstance(values[2], int) and not isinstance(values[2], bool) else None
            inner = values[1] if isinstance(values[1], int) else 0
            extent = state.extent(values[0])
            return extent is None or _tile_ok(text, extent, n, inner)
        if mnemonic == "cat":
            size = len(values[0]) if isinstance(values[0], list) else 0
            return _int_prefix_of(text, range(size))
        if mnemonic == "loc":
            return _int_prefix_of(text, self._valid_locations(state, values[0]))
        return True  # ptile: checked when its line is complete

    def _valid_locations(self, state: _State, block: str) -> list[int]:
        """The compute locations TVM keeps for `block`: -2 (root), -1 (inline), or the index
        of a loop. TVM repairs any other decision to the largest valid one below it, so the
        largest is what a huge decision becomes, and each one up to it is tried."""
        key = (state.serial, block)
        if key not in self._locations:
            self._locations[key] = []
            largest = self._repaired(state, f"loc {block} ={2**31 - 1}")
            if isinstance(largest, int):
                self._locations[key] = [d for d in range(-2, largest + 1)
                                        if self._apply_line(state, f"loc {block} ={d}") is not None]
        return self._locations[key]

    def _repaired(self, state: _State, line: str):
        """The decision TVM takes for the sampling `line` (None if it does not apply)."""
        try:
            inst, decision = self._reader(state).read(line, open_end=False)
        except ScriptSyntaxError:
            return None
        after = self._state(state.insts + [inst], state.decisions + [[len(state.insts), decision]])
        return None if after is None else after.facts["decision"]

    def _count_ok(self, state: _State, mnemonic: str, values: list, text: str) -> bool:
        if BY_MNEMONIC[mnemonic].count != "*" or not (text == "" or text.isdigit() and not text.startswith("0")):
            return False  # constrained scripts write only the counts the encoder would write
        if mnemonic not in _COUNTS:
            return True  # checked when the line is complete
        count = state.query(_COUNTS[mnemonic], values[0])
        return count is None or count > 0 and str(count).startswith(text)


_FIRST = {"int": set("-0123456789"), "bool": set("tf"), "rv": set("$_" + "abcdefghijklmnopqrstuvwxyz"
                                                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ")}
_FIRST["str"] = _FIRST["rv"] - {"$"} | {'"'}
_FIRST["key"] = _FIRST["thread"] = _FIRST["rv"] - {"$"}  # the keys and threads of _KEYS are bare words


def _starts_like(typ: str, first: str) -> bool:
    """Whether a value of type `typ` can begin with the character `first`."""
    return first == "" or typ not in _FIRST or first in _FIRST[typ]


def _tile_ok(text: str, extent: int, n: int | None, inner: int) -> bool:
    """Whether `text` begins a legal perfect-tile decision `[f1,...,fn]` of a loop of `extent`:
    every factor divides what is left, the product is the extent, the innermost is at most
    `inner` (when positive), at least two factors, and exactly `n` when `n` is given."""
    if not text.startswith("["):
        return text == ""
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

    def feasible(rest: int, slots: int | None) -> bool:
        """Can `slots` more factors (None: any number, at least one) multiply to `rest`?"""
        if slots is None:
            return True  # rest, then 1s if the innermost must be small
        if slots == 0:
            return rest == 1
        return slots >= 2 or inner <= 0 or rest <= inner

    if closed:
        if not (last.isdigit() and not last.startswith("0")) or left % int(last):
            return False
        k = done + 1
        return left == int(last) and k >= 2 and (n is None or k == n) and (inner <= 0 or int(last) <= inner)
    if last and not last.isdigit():
        return False
    slots = None if n is None else n - done  # factors still to write, the one being written included
    if slots is not None and slots < 1:
        return False
    for q in _divisors(left):
        if str(q).startswith(last) and feasible(left // q, None if slots is None else slots - 1):
            if slots == 1 and inner > 0 and q > inner:
                continue
            return True
    return False


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _int_prefix_of(text: str, valid) -> bool:
    return any(str(v).startswith(text) for v in valid)


def token_pieces(tokenizer) -> list[str | None]:
    """The text each token id adds when it follows another token (None: special or not ASCII)."""
    base = tokenizer.encode("a", add_special_tokens=False)[:1]
    head = tokenizer.decode(base, clean_up_tokenization_spaces=False)
    special = set(tokenizer.all_special_ids)
    texts = tokenizer.batch_decode([base + [i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False)
    pieces: list[str | None] = []
    for i, text in enumerate(texts):
        piece = text[len(head):] if text.startswith(head) else None
        pieces.append(piece if piece and i not in special and set(piece) <= _PRINTABLE else None)
    return pieces


class ScriptConstraint:
    """A transformers LogitsProcessor that keeps every sequence a legal script of its workload.

    `modules` maps each prompt (exactly as tokenized) to the IRModule its script schedules.
    Pass it to `generate(logits_processor=[constraint])`; `finish(completion_ids)` then gives
    the scripts. One instance serves generation after generation (a new one is recognised
    because its input is not the last one plus a token).
    """

    def __init__(self, tokenizer, modules: Mapping[str, object], *, greedy: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, first_checks: int = 64):
        """`greedy`, `temperature` and `top_p` are the generation's (`models.generate` sets them)."""
        self.tokenizer, self.modules = tokenizer, dict(modules)
        self.greedy, self.temperature, self.top_p, self.first_checks = greedy, temperature, top_p, first_checks
        self.pieces = token_pieces(tokenizer)
        eos = tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])
        self.followers: list[ScriptFollower] = []
        self.endings: Counter = Counter()  # over the constraint's life
        self._ended: list[str] = []
        self.checks = 0  # candidate tokens checked, over all calls
        self._seen = None
        self._prompt_len = 0
        self.replayer = Replayer()  # one worker applies the lines of every sequence

    def close(self) -> None:
        self.replayer.close()

    def __enter__(self) -> "ScriptConstraint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __call__(self, input_ids, scores):
        import torch

        if not self._continues(input_ids):
            self._start(input_ids)
        else:
            for follower, token in zip(self.followers, input_ids[:, -1].tolist()):
                self._feed(follower, token)
        self._seen = input_ids.clone()
        masked = torch.full_like(scores, -math.inf)
        for row, follower in enumerate(self.followers):
            if follower.ending is not None:
                masked[row] = scores[row]  # finished: generate pads it, whatever is chosen
                continue
            allowed = self._allowed(follower, scores[row])
            masked[row, allowed] = scores[row, allowed]
        return masked

    def finish(self, completion_ids) -> list[str]:
        """The scripts of the sequences whose generated tokens are `completion_ids` (one row per
        sequence, as the last call saw them plus what was generated after it)."""
        rows = completion_ids.tolist()
        for follower, ids in zip(self.followers, rows):
            for token in ids[self._seen.shape[1] - self._prompt_len:] if self._seen is not None else ():
                self._feed(follower, token)
            follower.end("length")
            self.endings[follower.ending] += 1
            self._ended.append(follower.ending)
        self._seen = None  # the next call starts a new generation
        return [f.script() for f in self.followers]

    def take_endings(self, n: int) -> list[list[str]]:
        """How each script finished since the last call ended, n per prompt (as `generate`
        returns them), and forget them."""
        ends, self._ended = self._ended, []
        return [ends[i:i + n] for i in range(0, len(ends), n)]

    def _continues(self, input_ids) -> bool:
        import torch

        seen = self._seen
        return (seen is not None and input_ids.shape[0] == seen.shape[0] and input_ids.shape[1] == seen.shape[1] + 1
                and torch.equal(input_ids[:, :-1], seen))

    def _start(self, input_ids) -> None:
        self._prompt_len = input_ids.shape[1]
        self.followers = []
        for ids in input_ids.tolist():
            prompt = self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            if prompt not in self.modules:
                raise InputError(f"constrained decoding: no workload for the prompt {prompt[:120]!r}...")
            self.followers.append(ScriptFollower(self.modules[prompt], self.replayer))

    def _feed(self, follower: ScriptFollower, token: int) -> None:
        if follower.ending is not None:
            return
        if token in self.eos:
            follower.end("eos")
        else:
            follower.advance(self.pieces[token])

    def _allowed(self, follower: ScriptFollower, scores) -> list[int]:
        """The one token to write next; EOS alone at a dead end."""
        def ok(token: int) -> bool:
            self.checks += 1
            return follower.can_end() if token in self.eos else \
                self.pieces[token] is not None and follower.allows(self.pieces[token])

        token = choose(scores, ok, greedy=self.greedy, temperature=self.temperature, top_p=self.top_p,
                       first_checks=self.first_checks)
        if token is None:  # nothing can continue this line, so the script ends here
            follower.dead_end = True
            return sorted(self.eos)[:1]
        return [token]


def choose(scores, ok, *, greedy: bool, temperature: float = 1.0, top_p: float = 1.0,
           first_checks: int = 64) -> int | None:
    """The token to write, among those `ok(token)` accepts; None if it accepts none.

    Greedy: the most probable one. Sampling: a draw from the model's distribution (at
    `temperature`, within the top-p nucleus) restricted to accepted tokens, by rejection: draw,
    check, and on a refusal remove the token and draw again. After `first_checks` refusals
    (the accepted tokens hold almost none of the probability; each draw costs a pass over the
    vocabulary), or when no token is left to draw, the most probable accepted one of the rest."""
    import torch

    refused: set[int] = set()
    if not greedy:
        probs = torch.softmax(scores.double() / max(temperature, 1e-6), -1)
        if top_p < 1.0:  # the nucleus, as transformers' TopPLogitsWarper keeps it
            order = torch.argsort(probs, descending=True)
            probs[order[(torch.cumsum(probs[order], 0) - probs[order]) >= top_p]] = 0.0
        while len(refused) < first_checks and probs.sum() > 0:
            token = int(torch.multinomial(probs, 1))
            if ok(token):
                return token
            refused.add(token)
            probs[token] = 0.0
    first = torch.topk(scores, min(first_checks, scores.shape[0])).indices.tolist()
    seen = set(first)
    rest = (t for t in torch.argsort(scores, descending=True).tolist() if t not in seen)
    return next((t for t in itertools.chain(first, rest) if t not in refused and ok(t)), None)


def for_rows(tokenizer, rows, workloads: Mapping) -> ScriptConstraint:
    """A constraint for dataset rows (each with "prompt" and "workload", a key of `workloads`)."""
    return ScriptConstraint(tokenizer, {row["prompt"]: workloads[row["workload"]].mod for row in rows})
