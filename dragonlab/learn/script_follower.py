"""The script follower: tracks one script as a model writes it, and says what may come next.

Contract: `ScriptFollower(mod, replayer)` follows a script for the workload `mod` piece by
piece. `allows(piece)` is true only if the text stays on track (below); `advance(piece)` writes
a piece it allowed; `can_end()` says whether the script may end here; `end(how)` ends it, and
`script()` is then its complete lines: a script that decodes, applies to `mod` and keeps every
decision as written. Each complete line is applied through a `schedule_oracle.Replayer` (shared
by followers, or a private one), which keeps the facts of the live schedule. A piece is allowed
only if:

- the open line can still become a line of the grammar (codec.LineReader);
- every variable it names is defined, still exists in the schedule (a loop that was split does
  not) and is of the kind the argument takes: block, loop or expression (`schedule_oracle.TAKES`);
- decisions are legal: a tile's factors divide the loop's extent, multiply to it, and the
  innermost is at most `max_innermost_factor`; a categorical index is in range; a compute
  location is one that TVM offers for the block (and `loc` names only blocks that have one);
  an output count `>N` is the true count;
- fuse, reorder and merge name each loop once;
- a line ends (a newline or the end of the script) only if it applies to the live schedule and
  TVM keeps its decision as written (no silent repair);
- on llvm, the script is a design part: one of MetaSchedule's design-space sketches for the
  workload, line by line, with decisions of its own (`Replayer.sketches`); it ends where the
  sketch ends, and nothing follows (`ScriptFollower(..., sketches=False)` follows whole traces).

The checks look ahead far enough that a legal prefix of a tile or a count can always be
finished. What they cannot foresee (a primitive that rejects its arguments only once the line
is complete) can leave nothing to continue with: a *dead end* (`dead_end`, set by the caller).
Only printable ASCII and newlines (`PRINTABLE`) can be written, in lines of at most `MAX_LINE`
characters.
"""

from __future__ import annotations

import functools
import itertools
import math
import re

import regex

from dragonlab.core import allowlist
from dragonlab.core.allowlist import ANNOTATIONS, POSTPROC_ANNOTATIONS, refusal
from dragonlab.core.codec import BY_MNEMONIC, KEY_ALIASES, LineReader, ScriptSyntaxError, encode
from dragonlab.learn.schedule_oracle import TAKES, Replayer, State, tile_ok

_SAMPLING = {"tile", "ptile", "cat", "loc"}  # the kinds that carry a decision
# How MetaSchedule's llvm rules tile: multi-level tiling (SSRSRS) samples 4 factors for a spatial
# loop and 2 for a reduction, rfactor 2, and each `split` follows the tile of its loop at once, by
# exactly the tile's factors. All 25,228 splits of the standard corpus's design parts do (and
# its 25,228 tiles have 2 or 4 factors). A constrained llvm script keeps to that shape: a split
# by other factors (`split l4 v7..10 22 22 1 v7`) is one no search would measure, and one such
# kernel ran past the evaluator's time limit.
_LLVM_TILE_SIZES = (2, 4)
# Where a constrained script follows MetaSchedule's design space: target kind -> the dragonlab
# target whose design-space sketches it follows. Every script of the standard corpus's llvm design
# parts is one of its workload's sketches, line for line, but for its decisions and the extent a
# parallel annotation allows (which search's mutators change). A script that is no sketch is one
# search never measures: most often a model's short one that leaves the kernel unscheduled.
_SKETCH_TARGETS = {"llvm": "cpu"}
_DECISION = re.compile(r"( =(?:\[[-0-9,]*\]|-?[0-9]+))")
_PARALLEL = re.compile(r"^(ann b[0-9]+ par)(?: [0-9]+)?$")
# Kinds whose output count depends on the workload, and how to count on a copy of the schedule.
_COUNTS = {"loops": "get_loops", "children": "get_child_blocks", "producers": "get_producers",
           "consumers": "get_consumers", "output_blocks": "get_output_blocks"}
PRINTABLE = {chr(c) for c in range(0x20, 0x7F)} | {"\n"}
# The longest line a constrained script may have. The longest in the quick dataset is 129
# characters (a layout with its index map); without a bound a model can extend a list or a
# `reorder` without end, and each check re-reads the whole open line.
MAX_LINE = 512
# The annotation keys a constrained `ann` may write: those MetaSchedule writes in a design part,
# which are the ones the evaluator accepts (an `unann` may only remove one that is there).
# Free-form keys would also let a model write words without end.
_VALUE_TYPES = {**ANNOTATIONS, **POSTPROC_ANNOTATIONS}  # key -> the kind of value it takes
_SPELLINGS = {key: alias for alias, key in KEY_ALIASES.items()}


@functools.lru_cache(maxsize=1024)
def _line_patterns(sketch: str) -> tuple:
    """A sketch's lines as patterns (made once per sketch: a follower per sequence asks again)."""
    return tuple(_line_pattern(line) for line in sketch.splitlines())


def _line_pattern(line: str):
    """A sketch's line as a pattern: its decision (a tile's factors, as many as the sketch's) and
    a parallel annotation's extent left free."""
    if parallel := _PARALLEL.match(line):
        return regex.compile(regex.escape(parallel.group(1)) + "(?: [0-9]+)?")

    def free(decision: str) -> str:
        n = decision.count(",") + 1
        return r" =\[" + ",".join(["[0-9]+"] * n) + r"\]" if "[" in decision else " =-?[0-9]+"

    return regex.compile("".join(free(part) if i % 2 else regex.escape(part)
                                 for i, part in enumerate(_DECISION.split(line))))


def _tile_count(line: str) -> int | None:
    """How many factors a sketch's line tiles its loop into (None: it is no tile)."""
    found = _DECISION.search(line)
    return found.group(1).count(",") + 1 if line.startswith("tile ") and found and "[" in found.group(1) else None


class _Reader(LineReader):
    def __init__(self, state: State):
        super().__init__((), state.count)
        self.defined = state.defined  # shared, not copied: a reader per candidate token, and none commits
        self.state = state

    def names(self):
        if self.kind is None or self.param is None:
            return self.defined
        takes = TAKES[self.kind.mnemonic]
        if self.kind.mnemonic == "unann" and self.param == 0:
            return self.state.annotated  # only what has an annotation to remove
        return self.state.usable[takes[self.param]] if self.param < len(takes) else self.defined


class ScriptFollower:
    """Follows one script as it is written; `allows(piece)` says whether `piece` may come next."""

    def __init__(self, mod, replayer: Replayer | None = None, *, target_kind: str = "llvm",
                 sketches: bool = True):
        """`replayer`: the worker to apply lines in, shared by followers (a private one if None);
        `target_kind`: TVM's kind of the target the script is for, whose allowlist it keeps;
        `sketches`: keep to the workload's design-space sketches where the target has them."""
        self.mod, self.target_kind = mod, target_kind
        self.replayer = replayer or Replayer()
        self.state = self._state([], [])
        if self.state is None:
            raise ValueError("the workload has no schedule to follow (applying nothing failed)")
        self._sketches = None  # per sketch, a pattern per line; None: no sketch to keep to
        if sketches and target_kind in _SKETCH_TARGETS:
            from dragonlab.core.targets import get_target

            texts = self.replayer.sketches(mod, get_target(_SKETCH_TARGETS[target_kind]).config)
            self._sketches = [_line_patterns(text) for text in texts] or None
            self._sketch_tiles = [[_tile_count(line) for line in text.splitlines()] for text in texts]
        self._live = {self.state.serial: range(len(self._sketches or ()))}  # state serial -> sketches it follows
        self.lines: list[str] = []
        self.open = ""  # the line being written
        self.ending: str | None = None  # "eos", "dead end" or "length" once it has ended
        self.dead_end = False
        self._after_cache: dict = {}
        self._readers: dict = {}
        self._locations: dict = {}
        self._starts: dict = {}
        self._applies_cache: dict = {}
        self._due: dict = {}  # state serial -> the split a tile calls for

    def allows(self, piece: str) -> bool:
        if not piece or not set(piece) <= PRINTABLE:
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
        state = self.state if self.open == "" else self._after(self.state, self.open)
        # a tile is followed by its split; a sketch is followed to its end
        return state is not None and self._split_due(state) is None and self._sketch_ends(state)

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

    def _reader(self, state: State) -> _Reader:
        if state.serial not in self._readers:
            self._readers[state.serial] = _Reader(state)
        return self._readers[state.serial]

    def _after(self, state: State, line: str) -> State | None:
        """The state after the complete `line`, or None if it does not decode, apply or keep
        its decision."""
        key = (state.serial, line)
        if key not in self._after_cache:
            # the checks of an open line hold for a complete one too
            after = self._apply_line(state, line) if self._viable(state, line, complete=True) else None
            if after is not None and self._sketches is not None:
                self._live[after.serial] = self._following(state, line, complete=True)
            self._after_cache[key] = after
        return self._after_cache[key]

    def _following(self, state: State, line: str, *, complete: bool) -> list[int]:
        """The sketches that `state`'s script, then `line` (or a line it begins), follows. A
        sketch is a design part, as a model writes it: nothing follows its end (the evaluator
        post-processes a design part with the target's own post-processors)."""
        i = len(state.insts)
        return [k for k in self._live[state.serial] if i < len(sketch := self._sketches[k])
                and sketch[i].fullmatch(line, partial=not complete)]

    def _sketch_ends(self, state: State) -> bool:
        return self._sketches is None or any(len(self._sketches[k]) == len(state.insts)
                                             for k in self._live[state.serial])

    def _apply_line(self, state: State, line: str) -> State | None:
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

    def _state(self, insts: list, decisions: list) -> State | None:
        plain = [insts, decisions]
        if refusal(plain, self.target_kind):  # the evaluator refuses these unapplied
            return None
        facts = self.replayer.facts(self.mod, plain)
        return None if facts is None else \
            State(insts, decisions, facts, lambda method: self.replayer.counts(self.mod, plain, method))

    def _viable(self, state: State, line: str, *, complete: bool = False) -> bool:
        """Whether the open `line` can still be completed into one that applies. `complete`:
        the line ends here (and will be applied), so only the checks of what it holds count."""
        if line == "":
            return True
        if self._sketches is not None and not self._following(state, line, complete=complete):
            return False
        due = self._split_due(state)
        if due is not None:  # nothing but the tile's split, as MetaSchedule writes it
            return line == due if complete else due.startswith(line)
        reader = _Reader(state)  # its own: the checks below read other lines
        try:
            reader.read(line, open_end=True)
        except ScriptSyntaxError:
            return False
        kind = reader.kind
        if kind is None or line == kind.mnemonic:  # the mnemonic is being written
            word = line.split(" ")[0]
            return complete or any(self._can_start(state, m) for m in BY_MNEMONIC if m.startswith(word))
        if not allowlist.writes(kind.name, self.target_kind):
            return False  # the evaluator refuses it unapplied
        if kind.mnemonic == "split" and self._rule_shaped(state):
            return False  # only as the tile's split (`_split_due`, above)
        open_value = reader.written - 1 if reader.value_end == len(line) else None
        if not self._values_ok(state, kind, reader.values[:reader.written], open_value):
            return False
        if not complete and not self._open_argument_ok(state, kind, reader, line):
            return False
        if kind.mnemonic == "tile" and reader.written >= 3 \
                and not self._tile_feasible(state, reader.values, open_value):
            return False
        if kind.mnemonic == "split" and not _split_feasible(state, line, complete, self.target_kind):
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
            if kind.mnemonic in _CACHES and k == 0:  # a block with a buffer that can be cached
                typed = "" if line.endswith(" ") else line.rpartition(" ")[2]
                if not any(self._cacheable(state, kind, b) for b in state.usable["b"] if b.startswith(typed)):
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
    def _names_repeat(state: State, line: str, complete: bool) -> bool:
        """fuse, reorder and merge take each loop once (TVM refuses a repeat): whether the
        names of `line` repeat one, or a last name still being written can only become one
        already named."""
        words = _variadic_words(line.split(" ", 1)[1] if " " in line else "")
        typed = words.pop() if words and not complete and not line.endswith(" ") else None
        if typed is not None and _RUN.fullmatch(typed):  # a run written out (it could only grow past the loops)
            words, typed = words + [typed], None
        named = [name for word in words for name in _run_names(word)]
        if len(set(named)) < len(named):
            return True
        if typed is None:
            return False
        run = _RUN_PREFIX.fullmatch(typed)
        if run:  # a run being opened (`l7..`): some end must make it loops there, none named yet
            lo, loops = int(run[2]), set(state.usable["l"]) - set(named)
            return not any(all(f"{run[1]}{n}" in loops for n in range(lo, hi + 1))
                           for hi in range(lo + 1, lo + allowlist.most_inputs("Reorder") + 1)
                           if str(hi).startswith(run[3] or ""))
        return "." not in typed and not any(n.startswith(typed) and n not in named for n in state.usable["l"])

    @staticmethod
    def _more_can_follow(state: State, kind, reader) -> bool:
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
        """If parameter k and at most one after it are what the line still needs, each a
        variable or an integer of a small range (rfactor's axis), and the rest have defaults,
        how many (1 or 2); else None. Then whether the line can apply is decided by those
        alone, so it can be checked by trying them."""
        params = kind.params
        if kind.mnemonic in _SAMPLING or k >= len(params):
            return None
        needed = [p for p in params[k:] if p.default == ()]
        if len(needed) > 2 or not all(_choosable(kind, p) for p in [params[k], *needed[1:]]):
            return None
        return max(1, len(needed))

    def _deciding(self, kind, k: int) -> bool:
        return self._variables_left(kind, k) is not None

    def _can_start(self, state: State, mnemonic: str) -> bool:
        """Whether a line of `mnemonic` can apply at all, when its variables decide it."""
        key = (state.serial, mnemonic)
        if key not in self._starts:
            kind, takes = BY_MNEMONIC[mnemonic], TAKES[mnemonic]
            first = state.annotated if mnemonic == "unann" else state.usable[takes[0]] if takes else ()
            if not allowlist.writes(kind.name, self.target_kind):
                self._starts[key] = False  # the evaluator refuses it unapplied
            elif mnemonic == "split" and self._rule_shaped(state):
                self._starts[key] = False  # only right after a tile (`_split_due`)
            elif kind.params and kind.params[0].type == "rv" and not first:
                self._starts[key] = False  # nothing it could name
            elif mnemonic == "loc":
                self._starts[key] = any(self._valid_locations(state, b) for b in first)
            elif mnemonic in _CACHES:
                self._starts[key] = any(self._cacheable(state, kind, b) for b in first)
            else:
                self._starts[key] = not kind.params or not self._deciding(kind, 0) \
                    or self._some_completion_applies(state, kind, 0, mnemonic, "")
        return self._starts[key]

    def _rule_shaped(self, state: State) -> bool:
        """Whether tiles and splits keep to the shape of MetaSchedule's llvm rules here: in an
        llvm design part (post-processors write splits of their own)."""
        return self.target_kind == "llvm" and not state.after_postproc

    def _tile_sizes(self, state: State) -> tuple[int, ...] | None:
        """The factor counts a tile may have here (None: any the allowlist takes): the sketches'
        where a sketch is followed, else on llvm those of its rules."""
        if self._sketches is not None:
            i = len(state.insts)
            counts = {tiles[i] for k in self._live[state.serial] if i < len(tiles := self._sketch_tiles[k])}
            if counts - {None}:
                return tuple(sorted(counts - {None}))
        return _LLVM_TILE_SIZES if self._rule_shaped(state) else None

    def _split_due(self, state: State) -> str | None:
        """On llvm, after a tile: the line that must come next, the split of its loop by its
        factors as the codec writes it (`_LLVM_TILE_SIZES`); otherwise None."""
        if not self._rule_shaped(state) or not state.insts or state.insts[-1][0] != "SamplePerfectTile":
            return None
        if state.serial not in self._due:
            _, (loop,), _, factors = state.insts[-1]
            loops = [f"l{state.count + i}" for i in range(len(factors))]  # TVM's numbering
            split = ["Split", [loop, *factors], [True, False], loops]
            self._due[state.serial] = encode([state.insts + [split], state.decisions]).splitlines()[-1]
        return self._due[state.serial]

    def _cacheable(self, state: State, kind, block: str) -> bool:
        """Whether `cache_read`/`cache_write` of `block` applies with one of the likeliest buffer
        indices and scopes (a block has a buffer or two; most scopes work where one does)."""
        return self._some_completion_applies(state, kind, 1, f"{kind.mnemonic} {block}", "", budget=4)

    def _some_completion_applies(self, state: State, kind, k: int, head: str, typed: str,
                                 budget: int = 256) -> bool:
        """`head` is a line up to parameter k, a variable which `typed` begins, and after which
        at most one more variable is needed: some choice of them must make the line apply
        (`inline b` must not become `inline b0` if b0 cannot be inlined). It tries the
        `budget` likeliest choices (the newest variables, the smallest integers) and no more."""
        first = _choices(state, kind, k, typed)
        if kind.mnemonic in _COUNTS:  # a count query on a live variable always applies with its true count
            return any(state.query(_COUNTS[kind.mnemonic], a) is not None for a in first)
        second = _choices(state, kind, k + 1, "") if self._variables_left(kind, k) == 2 else [None]
        pairs = sorted(itertools.product(range(len(first)), range(len(second))), key=sum)[:budget]  # likeliest first
        return self._any_applies(state, [f"{head} {first[i]}" + ("" if second[j] is None else f" {second[j]}")
                                         for i, j in pairs])

    def _any_applies(self, state: State, lines: list[str]) -> bool:
        """Whether some complete line applies after `state`, tried in the worker in the order
        given until one does (the full check of a line the model writes is `_after`; this one is
        for looking ahead). What a try found is kept for the next look-ahead from `state`."""
        known = [self._applies_cache.get((state.serial, line)) for line in lines]
        if any(known):
            return True
        todo = []
        for line, verdict in zip(lines, known):
            if verdict is None:
                try:
                    todo.append((line, self._reader(state).read(line, open_end=False)[0]))
                except ScriptSyntaxError:
                    self._applies_cache[(state.serial, line)] = False
        if not todo:
            return False
        hit = self.replayer.first_applying(self.mod, [state.insts, state.decisions], [inst for _, inst in todo])
        for index, (line, _) in enumerate(todo[:None if hit is None else hit + 1]):
            self._applies_cache[(state.serial, line)] = index == hit
        return hit is not None

    def _values_ok(self, state: State, kind, values: list, open_value: int | None) -> bool:
        """Written values of the type their parameter takes and that the allowlist accepts
        there; `get` names a block of the schedule. `open_value`: the index of a value that
        ends the text so far (it may grow: `_open_argument_ok` checks it)."""
        for k, (p, v) in enumerate(zip(kind.params, values)):
            slot = allowlist.slot_of(kind.name, p.src, p.index)
            if p.index is None:
                complete = (v[:-1] if k == open_value else v) if isinstance(v, list) else []
                if slot == "factor" and not all(allowlist.fits(x, slot, state.types) for x in complete):
                    return False
                continue
            if slot in _VALUE_SLOTS and k != open_value and not allowlist.fits(v, slot, state.types):
                return False
            if p.type == "int" and not (type(v) is int):
                return False
            if p.type == "bool" and not isinstance(v, bool):
                return False
            if p.type in ("str", "key", "thread") and not isinstance(v, str):
                return False
            if p.type == "key":
                keys = state.annotations(values[0]) if kind.mnemonic == "unann" else \
                    allowlist.annotation_keys(self.target_kind, after_postproc=state.after_postproc)
                spellings = {_SPELLINGS.get(key, key) for key in keys}
                if not (v in keys or k == open_value and any(sp.startswith(v) for sp in spellings)):
                    return False
            if kind.mnemonic == "get":
                valid = state.blocks() if k == 0 else state.functions()
                if not (any(b.startswith(v) for b in valid) if k == open_value else v in valid):
                    return False
        return True

    def _decision_ok(self, state: State, mnemonic: str, values: list, text: str) -> bool:
        if mnemonic == "tile":
            n = values[2] if isinstance(values[2], int) and not isinstance(values[2], bool) else None
            inner = values[1] if isinstance(values[1], int) else 0
            extent = state.extent(values[0])
            return extent is None or tile_ok(text, extent, n, inner, sizes=self._tile_sizes(state))
        if mnemonic == "cat":
            size = len(values[0]) if isinstance(values[0], list) else 0
            return _int_prefix_of(text, range(size))
        if mnemonic == "loc":
            return _int_prefix_of(text, self._valid_locations(state, values[0]))
        return True  # ptile: checked when its line is complete

    @staticmethod
    def _open_argument_ok(state: State, kind, reader, line: str) -> bool:
        """The argument being written can still become what the allowlist accepts there: a
        number stays a prefix of one in its slot's range, a split factor is a number, a sampled
        variable or None, and a variadic list stays within its length."""
        k = reader.param
        if k is None or k >= len(kind.params) or reader.decision_at is not None or reader.outputs_at is not None:
            return True
        p = kind.params[k]
        slot = allowlist.slot_of(kind.name, p.src, p.index)
        words = _variadic_words(line[reader.value_start:]) if p.index is None else [line[reader.value_start:]]
        most = allowlist.most_inputs(kind.name)
        if p.index is None and most is not None and sum(len(_run_names(w, at_least=2)) for w in words) > most:
            return False
        # A space ends a word, but not inside a quoted value (`tiling "` then spaces to the line's end).
        text = words[-1] if words and (not line.endswith(" ") or p.index is not None and words[-1][:1] == '"') \
            else ""
        if kind.name == "Annotate" and k == 2 and text:  # the value, of the type its key takes
            typ = _VALUE_TYPES.get(reader.values[1]) if len(reader.values) > 1 else None
            if typ == "int":
                return allowlist.int_prefix_fits(text, "annotation") if text[0] in "-0123456789" else \
                    any(v.startswith(text) for v in state.usable["v"])
            if typ == "structure":  # a quoted tiling structure such as "SSRSRS"
                return _STRUCTURE_PREFIX.fullmatch(text) is not None
            if typ == "intrinsic":  # a quoted name, as the allowlist takes it
                return _INTRINSIC_PREFIX.fullmatch(text) is not None
            if typ == "ints":
                return text.startswith("[")
            return typ != "true" or any(word.startswith(text) for word in ("true", "1"))
        if text and slot in ("candidates", "probabilities", "paddings", "blocks") and not text.startswith("["):
            return False
        if text and slot == "blocks" and not text.endswith("]"):  # a list of block variables being written
            *done, last = text[1:].split(",")
            return len(done) < len(state.usable["b"]) and all(b in state.usable["b"] for b in done) and \
                any(b.startswith(last) for b in state.usable["b"])
        if text and slot in ("candidates", "paddings") and not text.endswith("]"):  # a list of integers being written
            items = text[1:].split(",")
            return len(items) <= allowlist.LIST_MOST[slot] and \
                (items[-1] == "" or allowlist.int_prefix_fits(items[-1], slot[:-1]))
        if text and slot in _WORDS:
            return any(word.startswith(text.strip('"')) for word in _WORDS[slot])
        if text == "" or slot not in allowlist.INT_RANGES:
            return True
        if text[0] in "-0123456789":
            return allowlist.int_prefix_fits(text, slot)
        if slot != "factor":
            return False
        name = _NAME_OR_RUN.fullmatch(text)
        return "None".startswith(text) or bool(name) and any(v.startswith(name[1]) for v in state.usable["v"])

    def _tile_feasible(self, state: State, values: list, open_value: int | None) -> bool:
        """Whether a tile whose factor count is written (maybe still open) has a decision:
        n = 1 leaves one factor, the extent, which must not exceed the innermost bound."""
        extent, inner, n = state.extent(values[0]), values[1], values[2]
        if extent is None or type(inner) is not int or type(n) is not int:
            return True
        counts = [c for c in range(1, allowlist.INT_RANGES["tile_n"][1] + 1)
                  if str(c).startswith(str(n)) and (open_value == 2 or c == n)]
        return any(tile_ok("[", extent, c, inner, sizes=self._tile_sizes(state)) for c in counts)

    def _valid_locations(self, state: State, block: str) -> list[int]:
        """The compute locations TVM keeps for `block`: -2 (root), -1 (inline), or the index
        of a loop (asked of the worker once per block and state)."""
        key = (state.serial, block)
        if key not in self._locations:
            self._locations[key] = self.replayer.locations(self.mod, [state.insts, state.decisions], block) \
                if block in state.usable["b"] else []
        return self._locations[key]

    def _count_ok(self, state: State, mnemonic: str, values: list, text: str) -> bool:
        if BY_MNEMONIC[mnemonic].count != "*" or not (text == "" or text.isdigit() and not text.startswith("0")):
            return False  # constrained scripts write only the counts the encoder would write
        if mnemonic not in _COUNTS:
            return True  # checked when the line is complete
        count = state.query(_COUNTS[mnemonic], values[0])
        return count is None or count > 0 and str(count).startswith(text)


# The allowlist's slots that hold values rather than variables, checked as soon as written.
_VALUE_SLOTS = set(allowlist.INT_RANGES) | set(allowlist.VALUES) | {"flag", "false", "candidates", "probabilities",
                                                                    "paddings"}
# What the allowlist's slots of words accept, as a script spells them.
_WORDS = {**allowlist.VALUES, "flag": ("true", "false", "0", "1"), "false": ("false", "0")}
_COMMON = ("global", "local", "shared")  # the scopes MetaSchedule's rules cache in most
_CACHES = ("cache_read", "cache_write")
_STRUCTURE_PREFIX = re.compile(r'"[SR]{0,16}|"[SR]{1,16}"')  # the allowlist's tiling structures, as written
_INTRINSIC_PREFIX = re.compile(r'"|"[A-Za-z_][A-Za-z0-9_.]{0,127}"?')  # a tensor intrinsic's name, quoted
_RUN = re.compile(r"([A-Za-z_]+)(\d+)\.\.(\d+)")
_RUN_PREFIX = re.compile(r"([A-Za-z_]+)(\d+)(?:\.|\.\.(\d*))")  # l4., l4.., l4..1
_NAME_OR_RUN = re.compile(r"([A-Za-z_]\w*)(\.\.?\d*)?")  # a name, maybe opening a run
_FIRST = {"int": set("-0123456789"), "bool": set("tf"), "rv": set("$_" + "abcdefghijklmnopqrstuvwxyz"
                                                                  "ABCDEFGHIJKLMNOPQRSTUVWXYZ")}
_FIRST["str"] = _FIRST["rv"] - {"$"} | {'"'}
_FIRST["key"] = _FIRST["thread"] = _FIRST["rv"] - {"$"}  # annotation keys and threads are bare words


def _choosable(kind, p) -> bool:
    """Whether a needed parameter can be tried value by value: a variable, or an integer of a
    range of at most 64 values."""
    slot = allowlist.slot_of(kind.name, p.src, p.index) if p.index is not None else None
    return p.index is not None and (p.type == "rv" or p.type == "int" and slot in allowlist.INT_RANGES
                                    and allowlist.INT_RANGES[slot][1] - allowlist.INT_RANGES[slot][0] < 64
                                    or slot == "scope")  # a cache's memory scope: one of a few words


def _choices(state: State, kind, k: int, typed: str) -> list:
    """The values parameter k of a line may take that begin with `typed`, likeliest first:
    the newest variables of its kind, or the integers of its range nearest zero."""
    p = kind.params[k]
    if p.type == "rv":
        names = (n for n in state.usable[TAKES[kind.mnemonic][k]] if n.startswith(typed))
        return sorted(names, key=lambda n: (len(n), n), reverse=True)
    slot = allowlist.slot_of(kind.name, p.src, p.index)
    if slot in _WORDS:  # the likeliest first: as MetaSchedule's CPU and GPU rules use them
        return sorted((w for w in _WORDS[slot] if w.startswith(typed)), key=lambda w: (w not in _COMMON, w))
    lo, hi = allowlist.INT_RANGES[allowlist.slot_of(kind.name, p.src, p.index)]
    return sorted((v for v in range(lo, hi + 1) if str(v).startswith(typed)), key=abs)


def _split_feasible(state: State, line: str, complete: bool, target_kind: str = "llvm") -> bool:
    """Whether a split's factors can still be ones TVM takes (their product at least the loop's
    extent, or exactly one None, inferred) without needless work: the product of the written
    factors stays below twice the extent, or on cuda below 8,192 where that is more (MetaSchedule
    splits a fetch loop into 1,024 threads and a vector of up to 8 whatever its extent). A larger
    product only adds iterations that the split's predicate throws away: a split of a 14-long
    loop into `v10..13 7743336` ran past the evaluator's time limit. While the list is open, a
    factor to come can make up a product that is too small."""
    _, loop, *rest = line.split(" ") if line.count(" ") >= 2 else ("", "", "")
    words = _variadic_words(" ".join(rest))
    closed = complete or len([w for w in words if w]) < len([w for w in rest if w])  # ended by ';', '=' or '>'
    last = words[-1] if words and not closed and not line.endswith(" ") else None  # being written
    run = _RUN_PREFIX.fullmatch(last or "")
    if run and (not run[3] or int(run[3]) <= int(run[2])):  # a run being written: can one be?
        head = line[:len(line) - len(last)]
        return any(_split_feasible(state, f"{head}{run[1]}{run[2]}..{hi}", False, target_kind)
                   for hi in range(int(run[2]) + 1, int(run[2]) + 9) if str(hi).startswith(run[3] or ""))
    growing = last is not None and (last[:1].isdigit() or any(v.startswith(last) and v != last for v in state.values))
    factors = []
    for name in (name for word in (words[:-1] if growing else words) for name in _run_names(word)):
        if not (name.isdigit() or name == "None" or name in state.values):
            return name in state.defined  # not a variable: no; a value not known here: applying the line tells
        factors.append(int(name) if name.isdigit() else None if name == "None" else state.values[name])
    extent, most = state.extent(loop), allowlist.most_inputs("Split")
    if factors.count(None) > 1 or len(factors) > most or any(f is not None and f < 1 for f in factors):
        return False  # a factor of 0 (a categorical's value, say) splits nothing
    if extent is None:
        return True
    known = math.prod(f for f in factors if f is not None)
    cap = max(2 * extent, 8192 if target_kind == "cuda" else 0)
    if known * (int(last) if growing and last.isdigit() else 1) >= cap:
        return False  # needless iterations (a number being written only grows)
    if growing and not last.isdigit():  # a variable being named: one it can still become must fit
        values = [value for v, value in state.values.items() if v.startswith(last)]
        unknown = any(v.startswith(last) and v not in state.values for v in state.usable["v"])
        if not unknown and not any(1 <= value and known * value < cap for value in values):
            return False
    if growing and len(factors) + 1 == most and None not in factors:
        # the last factor there is room for: some number or variable it can still become must fit
        lo, hi = -(-extent // known), (cap - 1) // known
        return allowlist.int_prefix_in(last, lo, hi) if last.isdigit() else \
            any(v.startswith(last) and lo <= value <= hi for v, value in state.values.items())
    if None in factors or growing:
        return True
    return not closed and len(factors) < most or known >= extent


def _variadic_words(text: str) -> list[str]:
    """The words of a variadic list, without what may follow it on its line (`; attrs`, `=`,
    `>`); the last one may be empty (a name to come)."""
    words = []
    for word in text.split(" "):
        if word.startswith((";", "=", ">")):
            break
        words.append(word)
    return [w for w in words[:-1] if w] + words[-1:]


def _run_names(word: str, *, at_least: int = 1) -> list[str]:
    """The variables a word of a variadic list names (`l4..7`: four); a run still being
    written (`l4..`) names at least `at_least`."""
    run = _RUN.fullmatch(word)
    if run is None:
        return [word] * (at_least if "." in word else 1) if word else []
    lo, hi = int(run[2]), int(run[3])
    return [f"{run[1]}{n}" for n in range(lo, hi + 1)] if hi > lo else [word] * at_least


def _starts_like(typ: str, first: str) -> bool:
    """Whether a value of type `typ` can begin with the character `first`."""
    return first == "" or typ not in _FIRST or first in _FIRST[typ]


def _int_prefix_of(text: str, valid) -> bool:
    return any(str(v).startswith(text) for v in valid)
