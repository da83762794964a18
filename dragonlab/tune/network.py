"""A network to tune: a Relax module with its parameters, from PyTorch or given as it is.

- `load("path/net.py:build")`: FUNCTION returns `(torch.nn.Module, example_inputs)` (a tensor or
  a tuple of tensors); the module is imported through torch.export and TVM's Relax frontend
  (`dragonlab.core.networks.import_torch`), with its parameters as function inputs.
- `from_torch(module, example_inputs)`, `from_relax(mod, params)`: the same from Python.

`reference_data` writes the `.npz` every build of the network is checked against: fresh random
input sets, the parameters, and the reference's outputs on each set (PyTorch eager for a torch
network; for a Relax module, TVM's untuned build, made and run in this process: it holds no
model-written schedule).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tvm

from dragonlab.core.errors import InputError, one_line
from dragonlab.core.jsonl import write_atomic
from dragonlab.core.networks import (MODELS, UnsupportedNetworkError, build_model, import_torch, network_workloads,
                                     tvm_target)
from dragonlab.core.workload import Workload
from dragonlab.tune.replay import flat_outputs

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Network:
    name: str
    mod: tvm.IRModule  # Relax; `main` takes the inputs, then `params`
    params: tuple  # numpy arrays
    inputs: tuple  # (shape, dtype) of each input, in order
    torch_module: object | None = None  # the eager reference, for a network from PyTorch

    def workloads(self, target) -> list[Workload]:
        """The network's MetaSchedule tuning tasks (`dragonlab.core.networks.network_workloads`)."""
        return network_workloads(self.mod, self.name, target=target)


def from_torch(module, example_inputs, *, name: str = "network", target=None) -> Network:
    import torch

    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in example_inputs):
        raise InputError(f"{name}: example inputs must be a tensor or a tuple of tensors, got "
                         f"{type(example_inputs).__name__}")
    mod, params = import_torch(module, tuple(example_inputs), name=name, target=target)
    return Network(name, mod, tuple(p.numpy() for p in params),
                   tuple((list(t.shape), str(t.dtype).removeprefix("torch.")) for t in example_inputs), module)


def from_relax(mod: tvm.IRModule, params=(), *, name: str = "network") -> Network:
    """A Relax module whose `main` takes its inputs and then `params` (numpy arrays or tensors)."""
    if not isinstance(mod, tvm.IRModule) or "main" not in mod:
        raise InputError(f"{name}: expected a Relax IRModule with a 'main' function")
    params = tuple(p.numpy() if hasattr(p, "numpy") else np.asarray(p) for p in params)
    args = list(mod["main"].params)
    if len(args) < len(params):
        raise InputError(f"{name}: main takes {len(args)} arguments, fewer than the {len(params)} parameters")
    inputs = []
    for a in args[:len(args) - len(params)]:
        try:
            inputs.append(([int(d) for d in a.ty.shape.values], str(a.ty.dtype)))
        except (AttributeError, TypeError):
            raise InputError(f"{name}: input {a.name} is not a tensor of static shape ({a.ty})") from None
    return Network(name, mod, params, tuple(inputs))


def load(spec: str, *, target=None) -> Network:
    """`FILE.py:FUNCTION`, where FUNCTION() returns (torch.nn.Module, example_inputs), or the name of
    one of the repository's networks (`dragonlab.core.networks.MODELS`: the standard suite's). The
    file is the user's own code and runs as Python, as `torch.export` would run it."""
    if spec in MODELS:
        return from_torch(*build_model(spec), name=spec, target=target)
    path, sep, function = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not _NAME.fullmatch(function):
        raise InputError(f"--model {spec!r}: expected FILE.py:FUNCTION or one of {', '.join(MODELS)}")
    file = Path(path)
    if not file.is_file():
        raise InputError(f"--model {spec!r}: {file} is not a file")
    module_name = f"dragonlab_network_{file.stem}"
    loader = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module  # dataclasses and pickling look their module up
    try:
        loader.loader.exec_module(module)
    except Exception as e:
        raise InputError(f"{file}: importing it failed: {one_line(e)}") from None
    build = getattr(module, function, None)
    if not callable(build):
        raise InputError(f"{file}: no function {function!r}")
    try:
        made = build()
    except Exception as e:
        raise InputError(f"{file}:{function}(): {one_line(e)}") from None
    import torch

    if not (isinstance(made, tuple) and len(made) == 2 and isinstance(made[0], torch.nn.Module)):
        raise InputError(f"{file}:{function}() must return (torch.nn.Module, example_inputs), got "
                         f"{type(made).__name__}")
    try:
        return from_torch(made[0], made[1], name=function, target=target)
    except UnsupportedNetworkError as e:
        raise UnsupportedNetworkError(f"{file}:{e}") from None


def reference_data(network: Network, path: str | os.PathLike, *, checks: int, seed: int, target=None) -> Path:
    """Write the data file: `checks` input sets, the parameters, and the reference's outputs."""
    from dragonlab.evaluation.replay import random_args

    # as the evaluator's kernel checks: floats uniform in [-1, 1], integers in {0, 1} (indices stay in range)
    sets = [random_args(list(network.inputs), seed * 1000 + s) for s in range(checks)]
    reference = _torch_reference(network) if network.torch_module is not None else _untuned_reference(network, target)
    arrays = {f"param{j}": p for j, p in enumerate(network.params)}
    for s, inputs in enumerate(sets):
        arrays.update({f"input{s}_{i}": a for i, a in enumerate(inputs)})
        arrays.update({f"expected{s}_{k}": o for k, o in enumerate(reference(inputs))})
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic(path, buffer.getvalue())
    return Path(path)


def _torch_reference(network: Network):
    import torch

    def run(inputs):
        with torch.no_grad():
            out = network.torch_module.eval()(*(torch.from_numpy(a) for a in inputs))
        return flat_outputs(out)

    return run


def _untuned_reference(network: Network, target):
    import tvm.s_tir.meta_schedule as ms
    from tvm import relax

    target = tvm_target(target)
    vm = relax.VirtualMachine(ms.relax_integration.compile_relax(ms.database.MemoryDatabase(), network.mod, target,
                                                                 None), tvm.cpu())
    params = [tvm.runtime.tensor(p) for p in network.params]

    def run(inputs):
        return flat_outputs(vm["main"](*(tvm.runtime.tensor(a) for a in inputs), *params))

    return run
