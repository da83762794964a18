"""Index maps in scripts: TVM's embedded JSON graphs, written as lambdas and read back exactly.

`TransformLayout`, `TransformBlockLayout`, `ReindexCacheRead/Write` and `AnnotateBufferAccess`
carry an IndexMap, which a trace's JSON embeds as a tvm-ffi JSON graph (about 2 KB): nodes in
post-order, objects shared by identity, strings and ints by value. The readable form
`{i,j->i//16,j%16}` keeps identity: a name is the map's own variable or else one free variable per
name (a sampled tile size), and a shared sub-expression is labelled where it first appears
(`16@1`), then cited (`@1`). `Printer` writes a graph in this form; `MapReader` reads it, from the
script parser's cursor, and rebuilds the graph node by node, as TVM's serializer would. The codec
uses the readable form only when reading it back regenerates the exact graph string.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter

MAX_DEPTH = 32  # nesting of lists and of index-map expressions (a chain a+b+c+... counts its length)
MAX_TERMS = 256  # operators and calls in one index map; real ones have a few dozen
# The graph's metadata names the TVM version. The readable form regenerates that metadata, so a
# graph from another version fails the codec's exactness check and is kept verbatim.
GRAPH_VERSION = "0.27.0.post1"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INFIX = {"prim.Add": ("+", 1), "prim.Sub": ("-", 1), "prim.Mul": ("*", 2), "prim.FloorDiv": ("//", 2),
          "prim.FloorMod": ("%", 2)}
_OPS = {op: (typ, prec) for typ, (op, prec) in _INFIX.items()}
_CALLS = {"prim.Min": "min", "prim.Max": "max", "prim.Div": "truncdiv", "prim.Mod": "truncmod"}
_CALL_TYPES = {name: typ for typ, name in _CALLS.items()}


class Obj:
    """An object of an index map being read; Python identity stands for TVM object identity."""

    __slots__ = ("type", "dtype", "data", "height")

    def __init__(self, typ: str, dtype: str | None, data, height: int = 0):
        self.type, self.dtype, self.data, self.height = typ, dtype, data, height


class MapReader:
    """The index-map productions of the script grammar (`imap`, `map`, `expr`, ...).

    Reads from a cursor, the script parser's `Cursor`: its `line` and `pos`, its characters
    (`peek`, `expect`, `word`, `number`, `string`) and its errors (`fail`, `error`), which give a
    script's line and column. `verbatim`: whether `{"graph"}` may be read.
    """

    def __init__(self, cursor, verbatim: bool = True):
        self.cursor, self.verbatim = cursor, verbatim
        self.free, self.labels, self.scope, self.terms = {}, {}, {}, 0

    def read(self, pretty: bool) -> str:
        """`{binders->exprs[|inverse]}`, or verbatim `{"graph"}`; returns TVM's JSON graph string."""
        cur = self.cursor
        cur.expect("{", "'{'")
        if cur.peek() == '"' and not self.verbatim:
            cur.error("verbatim index maps are not accepted here; write the map as {i,j->...}")
        if cur.peek() == '"':
            start, graph = cur.pos, cur.string()
            if not (graph[:1] == "{" and graph[-1:] == "}"):
                cur.error("a verbatim index map is a JSON object", start)
        else:
            self.free, self.labels, self.terms = {}, {}, 0
            graph = graph_json(self._map(0), pretty)
        cur.expect("}", "'}'")
        return graph

    def _map(self, depth: int) -> Obj:
        cur = self.cursor
        if depth > MAX_DEPTH:
            cur.error("index maps nested too deeply")
        binders = {}
        while cur.peek() != "-":
            if binders:
                cur.expect(",", "',' or '->'")
            start, name = cur.pos, self._ident("a variable")
            if name in binders:
                cur.error(f"variable {name} is declared twice", start)
            binders[name] = Obj("ir.Var", self._dtype("int32"), name)
        cur.expect("-", "'->'")
        cur.expect(">", "'->'")
        self.scope, final = binders, []
        if cur.peek() not in ("|", "}"):
            final.append(self._expr(depth + 1, 1))
            while cur.peek() == ",":
                cur.pos += 1
                final.append(self._expr(depth + 1, 1))
        inverse = None
        if cur.peek() == "|":
            cur.pos += 1
            inverse = self._map(depth + 1)
        arrays = (Obj("ffi.Array", None, list(binders.values())), Obj("ffi.Array", None, final))
        return Obj("tirx.IndexMap", None, (*arrays, inverse))

    def _operation(self, typ: str, dtype: str | None, a: Obj, b: Obj) -> Obj:
        """A binary node; bounded in height (so nothing that walks it recurses without end) and
        in number (so nothing that walks it takes long)."""
        height, self.terms = 1 + max(a.height, b.height), self.terms + 1
        if height > MAX_DEPTH:
            self.cursor.error("index-map expression nested too deeply")
        if self.terms > MAX_TERMS:
            self.cursor.error(f"index map has more than {MAX_TERMS} operations")
        return Obj(typ, dtype, (a, b), height)

    def _ident(self, expected: str) -> str:
        cur = self.cursor
        start, word = cur.pos, cur.word()
        if not word or word[0].isdigit():
            cur.pos = start
            cur.fail(expected)
        return word

    def _dtype(self, default: str | None) -> str | None:
        if self.cursor.peek() != ":":
            return default
        self.cursor.pos += 1
        return self._ident("a dtype")

    def _expr(self, depth: int, min_prec: int) -> Obj:
        """Precedence climbing; every operator is left-associative, as in Python."""
        cur = self.cursor
        if depth > MAX_DEPTH:
            cur.error("index-map expression nested too deeply")
        left = self._labelled(depth)
        while True:
            op = "//" if cur.line.startswith("//", cur.pos) else cur.peek()
            if op == "/":
                cur.pos += 1
                cur.fail("'//'")
            if op not in _OPS or _OPS[op][1] < min_prec:
                return left
            cur.pos += len(op)
            typ, prec = _OPS[op]
            left = self._operation(typ, left.dtype, left, self._expr(depth + 1, prec + 1))

    def _labelled(self, depth: int) -> Obj:
        cur = self.cursor
        if cur.peek() == "@":
            cur.pos += 1
            start, k = cur.pos, self._label()
            return self.labels[k] if k in self.labels else cur.error(f"label @{k} is not defined", start)
        obj = self._atom(depth)
        if cur.peek() == "@":
            cur.pos += 1
            start, k = cur.pos, self._label()
            if k in self.labels:
                cur.error(f"label @{k} is defined twice", start)
            self.labels[k] = obj
        return obj

    def _label(self) -> int:
        cur = self.cursor
        start = cur.pos
        n = cur.number() if cur.peek().isdigit() else cur.fail("a label number")
        return n if type(n) is int else cur.error("a label is an integer", start)

    def _atom(self, depth: int) -> Obj:
        cur = self.cursor
        c = cur.peek()
        if c == "(":
            cur.pos += 1
            inner = self._expr(depth + 1, 1)
            cur.expect(")", "')'")
            return inner
        if c == "-" or c.isdigit():
            value = cur.number()
            typ = "ir.IntImm" if type(value) is int else "ir.FloatImm"
            return Obj(typ, self._dtype("int32" if typ == "ir.IntImm" else "float32"), value)
        start, name = cur.pos, self._ident("an expression")
        if name in _CALL_TYPES and cur.peek() == "(":
            cur.pos += 1
            a = self._expr(depth + 1, 1)
            cur.expect(",", "','")
            b = self._expr(depth + 1, 1)
            cur.expect(")", "')'")
            return self._operation(_CALL_TYPES[name], a.dtype, a, b)
        dtype = self._dtype(None)
        if name in self.scope:
            if dtype is not None:
                cur.error("a bound variable's dtype is in its binder", start)
            return self.scope[name]
        var = self.free.setdefault(name, Obj("ir.Var", dtype or "int32", name))
        return var if dtype in (None, var.dtype) else cur.error(f"free variable {name} has dtype {var.dtype}", start)


def graph_json(root: Obj, pretty: bool) -> str:
    """The ffi JSON graph TVM writes for `root`: post-order nodes, shared as TVM shares them."""
    nodes, memo = [], {}

    def emit(key, make) -> int:
        if key not in memo:
            node = make()  # children first
            memo[key] = len(nodes)
            nodes.append(node)
        return memo[key]

    def ref(o) -> int:
        if o is None:
            return emit(("None",), lambda: {"type": "None"})
        if isinstance(o, str):
            return emit(("str", o), lambda: {"type": "ffi.String", "data": o})
        if isinstance(o, int):
            return emit(("int", o), lambda: {"type": "int", "data": o})
        return emit(id(o), lambda: {"type": o.type, "data": fields(o)})

    def fields(o: Obj):
        if o.type == "ffi.Array":
            return [ref(x) for x in o.data]
        if o.type == "tirx.IndexMap":
            return dict(zip(("initial_indices", "final_indices", "inverse_index_map"), map(ref, o.data)))
        head = {"span": ref(None), "ty": emit(("dtype", o.dtype), lambda: {
            "type": "ir.PrimType", "data": {"span": ref(None), "dtype": o.dtype}})}
        if o.type == "ir.Var":
            return {**head, "name": ref(o.data)}
        if o.type in ("ir.IntImm", "ir.FloatImm"):  # an IntImm's value is a node, a FloatImm's inline
            return {**head, "value": ref(o.data) if o.type == "ir.IntImm" else o.data}
        return {**head, "a": ref(o.data[0]), "b": ref(o.data[1])}

    graph = {"root_index": ref(root), "nodes": nodes, "metadata": {"tvm_version": GRAPH_VERSION}}
    return json.dumps(graph, indent=2 if pretty else None, separators=None if pretty else (",", ":"),
                      ensure_ascii=False)


class NotReadable(Exception):
    """A graph that the readable form cannot express (the codec then keeps it verbatim)."""




class Printer:
    """Writes a JSON graph in the readable form; `NotReadable` (or any lookup error) if it can't."""

    def __init__(self, graph: dict):
        if list(graph) != ["root_index", "nodes", "metadata"] or graph["metadata"] != {"tvm_version": GRAPH_VERSION}:
            raise NotReadable
        self.nodes, self.root, self.labels, self.scope = graph["nodes"], graph["root_index"], {}, []
        refs = Counter()
        for node in self.nodes:
            data = node.get("data")
            refs.update(data if node["type"] == "ffi.Array" else (data["a"], data["b"])
                        if node["type"] in _INFIX or node["type"] in _CALLS else ())
        self.shared = {i for i, n in refs.items() if n > 1}

    def node(self, i: int, typ: str):
        if self.nodes[i]["type"] != typ:
            raise NotReadable
        return self.nodes[i]["data"]

    def dtype(self, ty: int, default: str) -> str:
        dtype = self.node(ty, "ir.PrimType")["dtype"]
        if not _IDENT.match(dtype):
            raise NotReadable
        return "" if dtype == default else ":" + dtype

    def name(self, var: int) -> str:
        name = self.node(self.node(var, "ir.Var")["name"], "ffi.String")
        if not _IDENT.match(name):
            raise NotReadable
        return name

    def map(self, i: int | None) -> str:
        data = self.node(self.root if i is None else i, "tirx.IndexMap")
        self.scope = self.node(data["initial_indices"], "ffi.Array")
        head = ",".join(self.name(v) + self.dtype(self.nodes[v]["data"]["ty"], "int32") for v in self.scope)
        body = ",".join(self.expr(e) for e in self.node(data["final_indices"], "ffi.Array"))
        inverse = data["inverse_index_map"]
        return f"{head}->{body}" + ("" if self.nodes[inverse]["type"] == "None" else "|" + self.map(inverse))

    def expr(self, i: int, prec: int = 0, right: bool = False) -> str:
        if i in self.labels:
            return f"@{self.labels[i]}"
        typ, data = self.nodes[i]["type"], self.nodes[i].get("data")
        if typ == "ir.Var":
            return self.name(i) + ("" if i in self.scope else self.dtype(data["ty"], "int32"))
        own = 3  # precedence of an atom
        if typ == "ir.IntImm":
            text = str(self.node(data["value"], "int")) + self.dtype(data["ty"], "int32")
        elif typ == "ir.FloatImm" and isinstance(data["value"], float) and math.isfinite(data["value"]):
            text = repr(data["value"]) + self.dtype(data["ty"], "float32")
        elif typ in _INFIX:
            op, own = _INFIX[typ]
            text = self.expr(data["a"], own) + op + self.expr(data["b"], own, True)
        elif typ in _CALLS:
            text = f"{_CALLS[typ]}({self.expr(data['a'])},{self.expr(data['b'])})"
        else:
            raise NotReadable
        if i in self.shared:
            self.labels[i] = len(self.labels) + 1
            text, own = (text if own == 3 else f"({text})") + f"@{self.labels[i]}", 3
        return f"({text})" if own < prec or (own == prec and right) else text
