"""The `Workload`: one tensor program for MetaSchedule to schedule, and its JSON form.

A `Workload` is an IRModule with a single "main" PrimFunc, plus how it was made (family, shape
params, dtype) and how much work one run does (flops). Its `key` is the decimal structural hash
that MetaSchedule's JSONDatabase writes, so workloads, database rows and dataset examples join on
that string. The hash ignores buffer and block names, but traces look blocks up by name
(`GetSBlock "C"`), so generators name every block deterministically and `to_json` stores the
module exactly.

Where workloads come from: `dragonlab.core.families` (op-family generators and shape samplers),
`dragonlab.core.networks` (tasks of small PyTorch networks) and `dragonlab.core.workloads` (the
named suites, which most callers import `Workload` from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping

import tvm
import tvm_ffi

from dragonlab.core.errors import InputError


class WorkloadFormatError(InputError):
    """A stored workload is malformed; `field` names the offending JSON field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"workload field {field!r}: {message}")
        self.field = field


def load_module(text: str):
    """A module from its JSON graph, as `tvm.ir.load_json` reads it. That first runs TVM's version
    upgrader, which rewrites the whole graph in Python; a graph this TVM wrote (its metadata names
    the version) needs none and is read directly: the standard dataset's 402 workloads load in
    0.6 s instead of 2.3 s."""
    from tvm_ffi.serialization import from_json_graph_str

    if json.loads(text).get("metadata", {}).get("tvm_version") == tvm.__version__:
        return from_json_graph_str(text)
    return tvm.ir.load_json(text)


# The fields `Workload.from_json` requires, with their JSON types; `weight` and `key` are optional.
_JSON_FIELDS = {"name": str, "family": str, "params": dict, "dtype": str, "flops": int, "mod": str}


@dataclass(frozen=True)
class Workload:
    name: str  # unique within a suite, e.g. "matmul_m64_n64_k64_float32"
    family: str  # a key of GENERATORS, or "model:<model>/<task>" for extracted tasks
    params: Mapping[str, int | str] = field(hash=False)  # the generator's keyword arguments; JSON-friendly
    dtype: str
    flops: int  # arithmetic ops of one run; memory-bound ops count about one per element touched
    mod: tvm.IRModule = field(compare=False, repr=False)
    weight: int = 1  # occurrences in the model for extracted tasks

    @cached_property
    def key(self) -> str:
        """The workload's id in MetaSchedule databases: `structural_hash(mod)` in decimal."""
        return str(tvm_ffi.structural_hash(self.mod))

    def to_json(self) -> dict:
        return {"name": self.name, "family": self.family, "params": dict(self.params), "dtype": self.dtype,
                "flops": self.flops, "weight": self.weight, "key": self.key, "mod": tvm.ir.save_json(self.mod)}

    @classmethod
    def from_json(cls, d: dict) -> Workload:
        if not isinstance(d, dict):
            raise WorkloadFormatError("<root>", f"expected a JSON object, got {type(d).__name__}")
        for name, kind in _JSON_FIELDS.items():
            if name not in d:
                raise WorkloadFormatError(name, "missing")
            if not isinstance(d[name], kind) or isinstance(d[name], bool):
                raise WorkloadFormatError(name, f"expected {kind.__name__}, got {type(d[name]).__name__}")
        if any(not isinstance(v, (int, str)) or isinstance(v, bool) for v in d["params"].values()):
            raise WorkloadFormatError("params", f"values must be int or str, got {d['params']!r}")
        weight = d.get("weight", 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
            raise WorkloadFormatError("weight", f"expected a positive int, got {weight!r}")
        try:
            mod = load_module(d["mod"])
        except Exception as e:  # TVM raises several error types for a bad JSON graph
            raise WorkloadFormatError("mod", f"not a TVM JSON graph ({type(e).__name__}: {e})") from e
        if not isinstance(mod, tvm.IRModule) or "main" not in mod:
            raise WorkloadFormatError("mod", "expected an IRModule with a 'main' function")
        w = cls(d["name"], d["family"], dict(d["params"]), d["dtype"], d["flops"], mod, weight)
        # A stored key that no longer matches means the hash changed (another TVM version):
        # every database row keyed by it would silently stop joining.
        if "key" in d and d["key"] != w.key:
            raise WorkloadFormatError("key", f"{d['key']} does not match structural_hash(mod) = {w.key}")
        return w
