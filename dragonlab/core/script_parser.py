"""Reading scripts: a strict, bounded recursive descent over characters (never eval).

Three parts, each using the one before:

- `Cursor`: one line and the position in it; the words, numbers and strings there; the errors,
  with the script's 1-based line and column. In an open line (the last line of a prefix) running
  out where more text could follow ends the read (`_Incomplete`) instead of failing, and a word
  cut off there only has to begin some valid word.
- `LineReader`: the grammar of one line (an instruction, its arguments, decision and outputs),
  with the variables defined by the lines before it; index maps go to `indexmap.MapReader`, on the
  same cursor. Constrained decoding (`dragonlab.learn.constrain`) uses it line by line.
- `read_script` (the codec's `decode` and `check_prefix`) and `decode_index_map`: whole texts,
  with their bounds.

Everything before the cut of an open line is checked as strictly as in a full script.
"""

from __future__ import annotations

import json
import re

from dragonlab.core.indexmap import MAX_DEPTH, MapReader
from dragonlab.core.script_grammar import (ALIASES, BY_MNEMONIC, IDENT, INT64, KEYWORDS, MAX_OUTPUTS, Kind,
                                           ScriptSyntaxError)

# Bounds on what a script may ask of the parser (real scripts: a few KB, under 400 lines and 2,000
# variables; the longest line, a layout with a verbatim index map, about 3 KB). Without them a
# 150 KB script of `loops b0 >1024` lines took 1.5 GB and 9 s to decode.
MAX_SCRIPT_CHARS = 1 << 18
MAX_LINES = 4096
MAX_LINE_CHARS = 1 << 16
MAX_VARIABLES = 1 << 14  # outputs of all instructions together

_NUMBER = re.compile(r"-?(?:inf|nan|[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?)")
_NUMBER_PREFIX = re.compile(r"-?(?:i(?:nf?)?|n(?:an?)?|[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?)?\Z")
_HEX = set("0123456789abcdef")
_RUN = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]{0,8})\.\.(0|[1-9][0-9]{0,8})\Z")  # l4..7
_RUN_PREFIX = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]{0,8})\.\.?(0|[1-9][0-9]{0,8})?\Z")  # l4., l4..
_WORDS = {extra: re.compile(f"[A-Za-z0-9_{re.escape(extra)}]*") for extra in ("_", "_.")}


class _Incomplete(Exception):
    """The open last line of a prefix ended where more text would still be valid."""


def _is_start(c: str) -> bool:
    return c.isascii() and (c.isalpha() or c == "_")


class Cursor:
    """A position in one line of a script, and the lexical items read from there.

    `open_end`: the line is the open end of a prefix (see the module's docstring). Every error
    is a ScriptSyntaxError at `lineno` and a 1-based column.
    """

    def __init__(self, line: str = "", lineno: int = 1, open_end: bool = False):
        self.line, self.pos, self.lineno, self.open_end = line, 0, lineno, open_end

    def peek(self) -> str:
        return self.line[self.pos:self.pos + 1]

    def error(self, message: str, pos: int | None = None):
        raise ScriptSyntaxError(message, self.lineno, (self.pos if pos is None else pos) + 1)

    def missing(self, expected: str):
        """The line ended where `expected` must follow: fine in an open line, else an error."""
        if self.open_end:
            raise _Incomplete
        self.error(f"expected {expected}, found end of line")

    def fail(self, expected: str, start: int | None = None):
        """`expected` is not what comes next (or nothing comes next)."""
        if self.peek() == "":
            self.missing(expected)
        self.error(f"expected {expected}, found {self.peek()!r}", start)

    def fail_item(self, expected: str):
        """`expected` should have been the next item, after a ' '."""
        if self.peek() == "":
            self.missing(expected)
        self.error(f"expected {expected}, found {self.line[self.pos + 1:self.pos + 2]!r}", self.pos + 1)

    def expect(self, ch: str, expected: str):
        if self.peek() != ch:
            self.fail(expected)
        self.pos += 1

    def next_item(self, expected: str) -> str:
        """After a ' ', the first character of the next item; '' at the end of the line."""
        if self.peek() == "":
            return ""
        if self.peek() != " ":
            self.error(f"expected ' ' or end of line, found {self.peek()!r}")
        if self.pos + 1 == len(self.line):
            self.pos += 1
            self.missing(expected)
        return self.line[self.pos + 1]

    def unknown(self, message: str, word: str, start: int, candidates):
        """A word that names nothing, unless the open line can still grow into a candidate."""
        if self.open_end and self.pos == len(self.line) and any(c.startswith(word) for c in candidates):
            raise _Incomplete
        self.error(f"{message} {word[:40] + ('...' if len(word) > 40 else '')!r}", start)

    def word(self, extra: str = "_") -> str:
        """ASCII letters, digits and the characters of `extra`, from here on (maybe none)."""
        end = _WORDS[extra].match(self.line, self.pos).end()
        start, self.pos = self.pos, end
        return self.line[start:end]

    def number(self):
        start = self.pos
        m = _NUMBER.match(self.line, start)
        end = m.end() if m else start
        if end == start or _is_start(self.line[end:end + 1]) or self.line[end:end + 1] == ".":
            if self.open_end and _NUMBER_PREFIX.match(self.line, start):
                raise _Incomplete
            self.error(f"malformed number {self.line[start:end + 1]!r}", start)
        self.pos, text = end, m.group(0)
        if m.group(1) or m.group(2) or text.lstrip("-") in ("inf", "nan"):
            return float(text)
        if len(text) > 20 or not INT64[0] <= int(text) <= INT64[1]:  # no int() of a huge literal
            self.error(f"integer {text[:24]!r} does not fit in 64 bits", start)
        return int(text)

    def string(self) -> str:
        self.expect('"', "'\"'")
        out = []
        while (c := self.peek()) != '"':
            if c == "":
                self.missing("a closing '\"'")
            if c < " " or c == "\x7f":
                self.error("control character in a string; write it as \\uxxxx")
            self.pos += 1
            if c != "\\":
                out.append(c)
                continue
            e, hex4 = self.peek(), self.line[self.pos + 1:self.pos + 5]
            if e in ('"', "\\", "n", "t", "r"):
                out.append({"n": "\n", "t": "\t", "r": "\r"}.get(e, e))
            elif e == "u" and len(hex4) == 4 and set(hex4) <= _HEX:
                out.append(chr(int(hex4, 16)))
                self.pos += 4
            elif e == "" or (e == "u" and self.pos + 1 + len(hex4) == len(self.line) and set(hex4) <= _HEX):
                self.missing("the rest of an escape")
            else:
                self.error("unknown escape; expected one of \\\" \\\\ \\n \\t \\r \\uxxxx (lower-case hex)")
            self.pos += 1
        self.pos += 1
        return "".join(out)


class LineReader:
    """Reads a script one line at a time; `read_script` and constrained decoding
    (`dragonlab.learn.constrain`) both use it.

    `defined` and `outputs` (how many variables came before) carry the state of the lines read
    so far; `read` leaves them alone and `commit` adds a line's outputs. After `read`, complete
    or not, `kind`, `param`, `values`, `written`, `value_start`, `value_end`, `decision_at` and
    `outputs_at` say how far it got. A subclass narrows which variables an argument may name by
    overriding `names()`. `verbatim=False` refuses index maps written as JSON graphs.
    """

    def __init__(self, defined=(), outputs: int = 0, *, verbatim: bool = True):
        self.defined, self.outputs = set(defined), outputs
        self.cursor = Cursor()
        self.maps = MapReader(self.cursor, verbatim)
        self._start_line()

    def read(self, line: str, *, open_end: bool = True, lineno: int = 1):
        """`(inst, decision)` of a line, or None if `open_end` and the line can still grow into
        one; raises ScriptSyntaxError (at line `lineno`) if it cannot."""
        if "\n" in line:
            raise ValueError("LineReader.read takes one line")
        cur = self.cursor
        cur.line, cur.pos, cur.lineno, cur.open_end = line, 0, lineno, open_end
        self._start_line()
        try:
            return self._instruction()
        except _Incomplete:
            return None

    def commit(self, inst: list) -> None:
        """Adds the outputs of a line that `read` gave."""
        if self.outputs + len(inst[3]) > MAX_VARIABLES:
            self.cursor.error(f"script defines more than {MAX_VARIABLES} variables", 0)
        self.outputs += len(inst[3])
        self.defined.update(inst[3])

    def names(self):
        """The variables the argument being read may name: every one defined so far."""
        return self.defined

    def _start_line(self) -> None:
        """How far the reader got in the current line (read by LineReader's users)."""
        self.kind: Kind | None = None
        self.param: int | None = None  # index in kind.params of the argument being read
        self.values: list = []  # the arguments read so far
        self.written, self.value_end = 0, 0  # how many were written (not defaults), where the last ends
        self.value_start = 0  # where the argument being read starts
        self.decision_at = self.outputs_at = None  # where the text after ' =' and ' >' starts

    def _instruction(self):
        cur = self.cursor
        if len(cur.line) > MAX_LINE_CHARS:
            cur.error(f"line is longer than {MAX_LINE_CHARS} characters", 0)
        if cur.peek() == "":
            cur.missing("an instruction") if cur.open_end else cur.error("empty line; expected an instruction")
        start, word = cur.pos, cur.word()
        kind = BY_MNEMONIC.get(word)
        if kind is None:
            cur.unknown("unknown instruction", word, start, BY_MNEMONIC)
        self.kind = kind
        values = self._arguments(kind)
        decision, names = (), None
        if cur.next_item("'=' or '>'") == "=":
            cur.pos += 2
            self.decision_at = cur.pos
            decision = self._value("a", "at", 0)
        for i, v in enumerate(values):
            if callable(v):
                values[i] = v(values, decision)
                if values[i] is None:
                    cur.fail_item(f"a decision, or parameter {i + 1} of {kind.mnemonic}")
        count = kind.derived_count(values)
        if cur.next_item("'>'") == ">":
            cur.pos += 2
            self.outputs_at = cur.pos
            count, names = self._outputs()
        if cur.next_item("end of line") != "":
            cur.error(f"expected end of line, found {cur.line[cur.pos + 1]!r}", cur.pos + 1)
        if names is None:
            if count is None:
                cur.missing(f"'>N' (the number of outputs of this {kind.mnemonic})")
            names = [f"{kind.prefix}{self.outputs + j}" for j in range(count)]
        by_index = sorted((p.src, p.index, k) for k, p in enumerate(kind.params) if p.index is not None)
        inputs = [values[k] for src, _, k in by_index if src == "i"]
        inputs += next((v for p, v in zip(kind.params, values) if p.index is None), [])
        return [kind.name, inputs, [values[k] for src, _, k in by_index if src == "a"], names], decision

    def _arguments(self, kind: Kind) -> list:
        """One value per parameter: written, default, or (callable) derived from the line."""
        cur, values, params = self.cursor, self.values, list(kind.params)
        expected = f"an argument of {kind.mnemonic}, '=' or '>'"
        while params:
            c = cur.next_item(expected)
            if c in ("", "=", ">"):
                break
            p = params.pop(0)
            self.param, self.value_start = len(values), cur.pos + 1
            if p.index is not None:
                cur.pos += 1
                values.append(self._value(p.src, p.type, 0))
                self.value_end, self.written = cur.pos, len(values)
                continue
            items = []
            while c not in ("", "=", ">", ";"):
                cur.pos += 1
                items += self._run(p.type)
                c = cur.next_item(expected)
            values.append(items)
            self.value_end, self.written = cur.pos, len(values)
            if c != ";":
                break  # no ';': the attributes after a variadic input keep their defaults
            if not params:
                cur.error("';' separates variadic inputs from the attributes after them", cur.pos + 1)
            cur.pos += 2
            if cur.next_item("an attribute after ';'") in ("", "=", ">"):
                cur.fail_item("an attribute after ';'")
        for p in params:
            if p.default == ():
                cur.fail_item(f"an argument ({p.type}) of {kind.mnemonic}")
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
        cur = self.cursor
        start = cur.pos
        word = cur.word("_.") if _is_start(cur.peek()) else ""
        at_end = cur.open_end and cur.pos == len(cur.line)
        m = _RUN.match(word)
        if m is None:
            p = _RUN_PREFIX.match(word)
            if at_end and p and self._run_continues(p[1], int(p[2]), p[3] or ""):  # l4. or l4..
                raise _Incomplete
            cur.pos = start
            return [self._value("i", typ, 0)]
        lo, hi = int(m[2]), int(m[3])
        names = [f"{m[1]}{n}" for n in range(lo, hi + 1)] if lo < hi <= lo + MAX_OUTPUTS else []
        usable = self.names()
        undefined = next((n for n in names if n not in usable), None)
        if not names or undefined:
            if at_end and self._run_continues(m[1], lo, m[3]):  # l1..1 may become l1..12
                raise _Incomplete
            cur.error(f"variable used before it is defined: {undefined!r}" if names
                      else "a run of variables counts up, as in l4..7", start)
        return names

    def _outputs(self):
        cur = self.cursor
        if cur.peek().isdigit():
            start, n = cur.pos, cur.number()
            if type(n) is not int or n > MAX_OUTPUTS:
                cur.error(f"an output count is an integer up to {MAX_OUTPUTS}", start)
            return n, None
        names = [self._name()]
        while cur.peek() == " ":
            cur.pos += 1
            names.append(self._name())
        return None, names

    def _name(self) -> str:
        cur = self.cursor
        if cur.peek() == "$":
            cur.pos += 1
            return cur.string()
        start, word = cur.pos, cur.word()
        if not IDENT.match(word) or word in KEYWORDS:
            cur.pos = start
            cur.fail("a variable name")
        return word

    def _value(self, ctx: str, typ: str, depth: int):
        """One value. In inputs (ctx "i") strings come back as TVM stores them: names, "None", '"s"'."""
        cur = self.cursor
        if depth > MAX_DEPTH:
            cur.error("values nested too deeply")
        c, start = cur.peek(), cur.pos
        if typ == "rv" and not (c == "$" or _is_start(c)):
            cur.fail("a variable")
        if c == '"':
            s = cur.string()
            return '"' + s + '"' if ctx == "i" else s
        if c == "[":
            cur.pos += 1
            items = []
            while cur.peek() != "]":
                if items:
                    cur.expect(",", "',' or ']'")
                items.append(self._value(ctx, "in" if ctx == "i" else "at", depth + 1))
            cur.pos += 1
            return items
        if c == "{":
            return self.maps.read(pretty=ctx == "a")
        if c == "-" or c.isdigit():
            return cur.number()
        if c == "$" and ctx == "i":
            cur.pos += 1
            return self._reference(cur.string(), start)
        if _is_start(c):
            word = cur.word("_.")
            if word in KEYWORDS and typ != "rv":
                return "None" if word == "None" and ctx == "i" else KEYWORDS[word]
            if typ in ALIASES:
                return ALIASES[typ].get(word, word)
            if ctx == "i" and "." not in word:
                return self._reference(word, start, keywords=typ != "rv")
            cur.unknown("expected a value, found", word, start, KEYWORDS)
        cur.fail("a value")

    def _reference(self, name: str, start: int, keywords: bool = True) -> str:
        """A variable; `keywords`: the word may also be the start of None, true, ... instead."""
        usable = self.names()
        if name not in usable:
            message = "variable used before it is defined:" if name not in self.defined else \
                f"parameter {(self.param or 0) + 1} of {self.kind.mnemonic} cannot take the variable"
            self.cursor.unknown(message, name, start, set(usable) | (set(KEYWORDS) if keywords else set()))
        return name


def _check_bounds(text: str, prefix: bool) -> list[str]:
    """The lines of a script (a final newline ends the last one, unless `prefix`), if within bounds."""
    if not isinstance(text, str):
        raise ScriptSyntaxError(f"a script is text, not {type(text).__name__}", 1, 1)
    if len(text) > MAX_SCRIPT_CHARS:
        raise ScriptSyntaxError(f"script is longer than {MAX_SCRIPT_CHARS} characters", 1, 1)
    lines = text.split("\n")
    if not prefix and lines[-1] == "":  # a final newline is allowed
        lines.pop()
    if len(lines) > MAX_LINES:
        raise ScriptSyntaxError(f"script has more than {MAX_LINES} lines", MAX_LINES + 1, 1)
    return lines


def read_script(text: str, *, prefix: bool = False, verbatim: bool = True) -> list:
    """The plain JSON form `[insts, decisions]` of a script; raises ScriptSyntaxError. With
    `prefix`, the last line is open, and the form is that of the complete lines before it."""
    lines = _check_bounds(text, prefix)
    reader, insts, decisions = LineReader(verbatim=verbatim), [], []
    for n, line in enumerate(lines):
        read = reader.read(line, open_end=prefix and n == len(lines) - 1, lineno=n + 1)
        if read is None:
            break
        inst, decision = read
        reader.commit(inst)
        if decision != ():
            decisions.append([len(insts), decision])
        insts.append(inst)
    return [insts, decisions]


def decode_index_map(text: str, *, pretty: bool) -> str:
    """The JSON graph of one index map in the readable notation (`{i,j->i//16,j%16}`), as TVM
    writes it in an attribute (`pretty`, indented) or an input; raises ScriptSyntaxError. The
    text is bounded as a script is, and read as one line."""
    _check_bounds(text, prefix=False)
    cursor = Cursor(text)
    graph = MapReader(cursor).read(pretty=pretty)
    if cursor.pos != len(text):
        cursor.fail("the end of the index map")
    return graph
