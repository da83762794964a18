"""Prompts: how a workload, a target and a script are shown to the model.

A prompt names its task and target, shows the unscheduled kernel, and for refinement the
script to improve; it ends with the header that the completion (a script) follows:

    task: construction            task: refinement
    target: cpu                   target: cpu
    kernel:                       kernel:
    <kernel text>                 <kernel text>
    script:                       script:
                                  <the input script>
                                  faster script:

The kernel comes in one of two forms (`PROMPT_FORMS`):

- `tvmscript`: `mod["main"].script()`, the PrimFunc as TVM prints it;
- `compact`: the same loop nest with the boilerplate left out. A block whose iterators are
  bound one-to-one to the serial loops around it (every kernel a generator or `te` makes) is
  one header line, `block C(i 64, j 64, k 64 r):`, with its iterators named after those loops;
  `T.reads`/`T.writes` (derivable from the body), the decorator and `T.Buffer` spelling go.
  Block names, buffer names, shapes, dtypes, iterator kinds, init statements, block
  annotations and every expression stay, so the computation and everything a trace refers to
  by name (`get C`) can be read off. Anything the compact printer does not know is printed as
  TVMScript, so the form never drops a statement.

`compact` is the default: on 134 quick and standard workloads it needs 0.37x the byte-level BPE
tokens of `tvmscript` and 0.47x the whitespace tokens (`benchmarks/dataset.py`, docs/dataset.md).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.ir.expr import TensorLoad
from tvm.s_tir.stmt import SBlockRealize

from dragonlab.core.errors import InputError
from dragonlab.core.workloads import Workload
from dragonlab.learn.dataset_config import DEFAULT_FORM, PROMPT_FORMS  # named there: DatasetConfig imports no TVM

CONSTRUCTION, REFINEMENT = "construction", "refinement"
TASKS = (CONSTRUCTION, REFINEMENT)


def kernel_text(w: Workload | tvm.IRModule, form: str = DEFAULT_FORM) -> str:
    """The unscheduled kernel of `w` in `form`; ends without a newline."""
    mod = w.mod if isinstance(w, Workload) else w
    if form == "tvmscript":
        return mod["main"].script().rstrip("\n")
    if form == "compact":
        return compact(mod["main"])
    raise InputError(f"prompt form {form!r} is not one of {', '.join(PROMPT_FORMS)}")


def construction_prompt(kernel: str, target: str) -> str:
    return f"task: {CONSTRUCTION}\ntarget: {target}\nkernel:\n{kernel}\nscript:\n"


def refinement_prompt(kernel: str, target: str, script: str) -> str:
    return (f"task: {REFINEMENT}\ntarget: {target}\nkernel:\n{kernel}\nscript:\n{script.rstrip(chr(10))}\n"
            f"faster script:\n")


def refinement_from(construction: str, script: str) -> str:
    """The refinement prompt for the kernel of a construction prompt and `script`: the next
    turn of a multi-turn refinement."""
    head, sep, kernel = construction.partition("\nkernel:\n")
    lines = head.split("\n")
    if not sep or lines[0] != f"task: {CONSTRUCTION}" or not lines[1].startswith("target: ") \
            or not kernel.endswith("\nscript:\n"):
        raise InputError("not a construction prompt: " + construction[:60].replace("\n", " | "))
    return refinement_prompt(kernel[:-len("\nscript:\n")], lines[1][len("target: "):], script)


def compact(func: tirx.PrimFunc) -> str:
    """The compact form of a PrimFunc (module docstring)."""
    printer = _Printer()
    params = ", ".join(f"{printer.declare(p)}: {_buffer_type(p.ty.dtype, p.ty.shape)}" for p in func.params)
    printer.lines.append(f"def main({params})")
    body = func.body
    if isinstance(body, SBlockRealize) and body.block.name_hint == "root" and not body.block.iter_vars:
        printer.allocs(body.block, 0)  # the root block is implicit, as in TVMScript
        body = body.block.body
    printer.stmt(body, 0, [])
    return "\n".join(printer.lines)


def _buffer_type(dtype, shape) -> str:
    return f"{dtype}[{','.join(_Printer().expr(d) for d in shape)}]"


# Python's precedence levels, so that printed expressions need parentheses only where they do.
_BINARY = [(tirx.Or, "or", 1), (tirx.And, "and", 2), (tirx.EQ, "==", 4), (tirx.NE, "!=", 4),
           (tirx.LT, "<", 4), (tirx.LE, "<=", 4), (tirx.GT, ">", 4), (tirx.GE, ">=", 4),
           (tirx.Add, "+", 5), (tirx.Sub, "-", 5), (tirx.Mul, "*", 6), (tirx.Div, "/", 6),
           (tirx.FloorDiv, "//", 6), (tirx.FloorMod, "%", 6)]
_CALLS = [(tirx.Min, "min"), (tirx.Max, "max"), (tirx.Mod, "truncmod")]
_ITER_KINDS = {tirx.IterVar.DataPar: "", tirx.IterVar.CommReduce: " r", tirx.IterVar.Ordered: " ordered",
               tirx.IterVar.Opaque: " opaque"}
_FOR_KINDS = {1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread"}


class _Printer:
    def __init__(self):
        self.lines: list[str] = []
        self.names: dict = {}  # loop or block iterator Var -> the name it is printed as
        self.buffers: dict = {}  # buffer Var -> its unique name (TVMScript's: T_cast, T_cast_1, ...)
        self.scope: list[str] = []  # the loop and iterator names visible where the printer is

    def name(self, var, like=None) -> str:
        """A name for a loop or iterator variable, unique among those in scope (attention's
        `out` block has two loops called `j`: they print as `j` and `j_1`); `like` shares it."""
        base, i = var.name, 0
        name = base
        while name in self.scope:
            i += 1
            name = f"{base}_{i}"
        self.scope.append(name)
        for v in (var, like) if like is not None else (var,):
            self.names[v] = name
        return name

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def declare(self, buf) -> str:
        """A name for a new buffer; buffers may share a name (rmsnorm has three `T_cast`s)."""
        taken = set(self.buffers.values())
        name, i = buf.name, 0
        while name in taken:
            i += 1
            name = f"{buf.name}_{i}"
        self.buffers[buf] = name
        return name

    def allocs(self, block, depth: int) -> None:
        for buf in block.alloc_buffers:
            scope = buf.scope()
            where = f" {scope}" if scope != "global" else ""
            self.emit(depth, f"alloc {self.declare(buf)}: {_buffer_type(buf.dtype, buf.shape)}{where}")

    def stmt(self, s, depth: int, loops: list) -> None:
        """Print `s` at `depth`; `loops` are plain serial loops seen but not printed yet, which a
        block bound one-to-one to them absorbs into its header."""
        if isinstance(s, tirx.For) and _plain_loop(s):
            self.stmt(s.body, depth, loops + [s])
            return
        mark = len(self.scope)  # names declared below go out of scope when this statement ends
        if isinstance(s, SBlockRealize):
            self.block(s, depth, loops)
        else:
            self.statement(s, self.open(loops, depth))
        del self.scope[mark:]

    def statement(self, s, depth: int) -> None:
        if isinstance(s, tirx.For):
            kind = _FOR_KINDS.get(int(s.kind), str(s.kind))
            binding = f" {s.thread_binding.thread_tag}" if s.thread_binding is not None else ""
            start = f"{self.expr(s.min)}, " if not _is_zero(s.min) else ""
            step = f", step {self.expr(s.step)}" if s.step is not None and not _is_one(s.step) else ""
            ann = _annotations(s.annotations)
            self.emit(depth, f"for {self.name(s.loop_var)} in {start}{self.expr(s.extent)}{step} {kind}{binding}{ann}:")
            self.stmt(s.body, depth + 1, [])
        elif isinstance(s, tirx.SeqStmt):
            for child in s.seq:
                self.stmt(child, depth, [])
        elif isinstance(s, tirx.BufferStore):
            self.emit(depth, f"{self.load(s.buffer, s.indices)} = {self.expr(s.value)}")
        else:  # rare in unscheduled kernels: TVMScript keeps it exact
            for line in s.script().splitlines():
                self.emit(depth, line)

    def open(self, loops: list, depth: int) -> int:
        for loop in loops:
            self.emit(depth, f"for {self.name(loop.loop_var)} in {self.expr(loop.extent)}:")
            depth += 1
        return depth

    def block(self, realize, depth: int, loops: list) -> None:
        b = realize.block
        values = list(realize.iter_values)
        bound = (len(values) == len(loops) and _is_true(realize.predicate)
                 and all(v.same_as(loop.loop_var) and _is_zero(iv.dom.min) and _same_int(iv.dom.extent, loop.extent)
                         for v, iv, loop in zip(values, b.iter_vars, loops)))
        if bound:  # iterators named after their loops; the loops are implied by the header
            iters = [f"{self.name(loop.loop_var, like=iv.var)} {self.expr(iv.dom.extent)}"
                     f"{_ITER_KINDS.get(iv.iter_type, '?')}" for iv, loop in zip(b.iter_vars, loops)]
            where = ""
        else:
            depth = self.open(loops, depth)
            bindings = [self.expr(v) for v in values]  # in the loops' names, before the iterators take theirs
            iters = [f"{self.name(iv.var)} {self.range(iv.dom)}{_ITER_KINDS.get(iv.iter_type, '?')} = {binding}"
                     for iv, binding in zip(b.iter_vars, bindings)]
            where = "" if _is_true(realize.predicate) else f" where {self.expr(realize.predicate)}"
        self.emit(depth, f"block {b.name_hint}({', '.join(iters)}){where}{_annotations(b.annotations)}:")
        self.allocs(b, depth + 1)
        if b.init is not None:
            inner = _Printer()
            inner.names, inner.buffers, inner.scope = self.names, self.buffers, self.scope
            inner.stmt(b.init, 0, [])
            for line in inner.lines:
                self.emit(depth + 1, f"init {line}")
        self.stmt(b.body, depth + 1, [])

    def range(self, dom) -> str:
        return self.expr(dom.extent) if _is_zero(dom.min) else f"{self.expr(dom.min)}:+{self.expr(dom.extent)}"

    def load(self, buffer, indices) -> str:
        return f"{self.buffers.get(buffer, buffer.name)}[{', '.join(self.expr(i) for i in indices)}]"

    def expr(self, e, outer: int = 0) -> str:
        """`e` as text; `outer` is the precedence of the operator around it."""
        for cls, op, prec in _BINARY:
            if isinstance(e, cls):
                # left-associative: the right operand needs parentheses at equal precedence
                text = f"{self.expr(e.a, prec)} {op} {self.expr(e.b, prec + 1)}"
                return f"({text})" if prec < outer else text
        for cls, name in _CALLS:
            if isinstance(e, cls):
                return f"{name}({self.expr(e.a)}, {self.expr(e.b)})"
        if isinstance(e, tirx.Not):
            return f"not {self.expr(e.a, 3)}" if outer <= 3 else f"(not {self.expr(e.a, 3)})"
        if isinstance(e, tirx.IntImm):
            dtype = str(e.ty)
            if dtype == "bool":
                return "True" if e.value else "False"
            return str(e.value) if dtype == "int32" else f"{dtype}({e.value})"
        if isinstance(e, tirx.FloatImm):
            dtype = str(e.ty)
            return repr(float(e.value)) if dtype == "float32" else f"{dtype}({float(e.value)!r})"
        if isinstance(e, TensorLoad):  # before Var: a buffer is a Var too
            return self.load(e.source, e.indices)
        if isinstance(e, tirx.Var):
            return self.names.get(e, e.name)
        if isinstance(e, tirx.Cast):
            return f"{e.ty}({self.expr(e.value)})"
        if isinstance(e, tirx.Select):
            return f"select({self.expr(e.condition)}, {self.expr(e.true_value)}, {self.expr(e.false_value)})"
        if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op):
            name = e.op.name.split(".")[-1]
            return f"{name}({', '.join(self.expr(a) for a in e.args)})"
        return str(e)  # TVMScript spelling for anything else (Let, Ramp, Broadcast, ...)


def _plain_loop(loop) -> bool:
    return (int(loop.kind) == 0 and _is_zero(loop.min) and loop.thread_binding is None
            and (loop.step is None or _is_one(loop.step)) and not loop.annotations)


def _annotations(annotations) -> str:
    if not annotations:
        return ""
    return " {" + ", ".join(f"{k}={v}" for k, v in sorted((str(k), str(v)) for k, v in annotations.items())) + "}"


def _is_zero(e) -> bool:
    return isinstance(e, tirx.IntImm) and e.value == 0


def _is_one(e) -> bool:
    return isinstance(e, tirx.IntImm) and e.value == 1


def _is_true(e) -> bool:
    return isinstance(e, tirx.IntImm) and e.value == 1


def _same_int(a, b) -> bool:
    return isinstance(a, tirx.IntImm) and isinstance(b, tirx.IntImm) and a.value == b.value
