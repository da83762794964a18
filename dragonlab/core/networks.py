"""Small PyTorch networks, and their MetaSchedule tuning tasks as workloads.

`extract_model_workloads("resnet")` imports a network through Relax (torch.export, then TVM's
legalisation) and returns each task MetaSchedule would tune, with the block names TVM's
legalisation gives them and `weight` = how often the task occurs. `import_torch` and
`network_workloads` are its two steps, for any network (`dragonlab.tune`). `MODELS`: an MLP, a pre-LN
transformer block (GPT-style), a CIFAR-sized ResNet and a small MobileNet. torch is imported only
when a network is built.
"""

from __future__ import annotations

import math

import tvm

from dragonlab.core.errors import InputError, one_line
from dragonlab.core.workload import Workload


def _mlp():
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    return net, torch.randn(8, 64)


def _transformer_block():
    import torch

    class Block(torch.nn.Module):
        """Pre-LN transformer block: x + MHA(LN(x)), then x + FFN(LN(x)) with a GELU FFN."""

        def __init__(self, d: int = 64, heads: int = 4):
            super().__init__()
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
            self.ffn = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(approximate="tanh"),
                                           torch.nn.Linear(4 * d, d))

        def forward(self, x):  # x: (B, T, d)
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.ffn(self.ln2(x))

    return Block(), torch.randn(1, 32, 64)


def _resnet():
    import torch
    from torch import nn

    def conv_bn(c: int, f: int, stride: int = 1, kernel: int = 3):
        return [nn.Conv2d(c, f, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(f)]

    class Basic(nn.Module):
        """ResNet's basic block: two 3x3 conv-BN, a shortcut (1x1 conv-BN when the shape changes), ReLU."""

        def __init__(self, c: int, f: int, stride: int):
            super().__init__()
            self.body = nn.Sequential(*conv_bn(c, f, stride), nn.ReLU(), *conv_bn(f, f))
            self.short = nn.Sequential(*conv_bn(c, f, stride, 1)) if stride != 1 or c != f else nn.Identity()

        def forward(self, x):
            return torch.relu(self.body(x) + self.short(x))

    net = nn.Sequential(*conv_bn(3, 16), nn.ReLU(), Basic(16, 16, 1), Basic(16, 32, 2), Basic(32, 64, 2),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    return net, torch.randn(1, 3, 32, 32)  # CIFAR-sized ResNet


def _mobilenet():
    import torch
    from torch import nn

    def separable(c: int, f: int, stride: int):
        """MobileNet's block: 3x3 depthwise conv-BN-ReLU6, then 1x1 pointwise conv-BN-ReLU6."""
        return [nn.Conv2d(c, c, 3, stride, 1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU6(),
                nn.Conv2d(c, f, 1, bias=False), nn.BatchNorm2d(f), nn.ReLU6()]

    net = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                        *separable(16, 32, 1), *separable(32, 64, 2), *separable(64, 64, 1),
                        *separable(64, 128, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    return net, torch.randn(1, 3, 64, 64)


MODELS = {"mlp": _mlp, "transformer_block": _transformer_block, "resnet": _resnet, "mobilenet": _mobilenet}


class UnsupportedNetworkError(InputError):
    """torch.export or TVM's Relax frontend cannot import a network; the message names the op."""


def import_torch(net, example_inputs: tuple, *, name: str = "network", target=None):
    """`net` (a torch.nn.Module, put in eval mode) as a Relax IRModule and its parameters.

    Parameters stay function inputs (keep_params_as_input): `main` takes the example inputs'
    tensors, then the parameters, in the order of the returned list. The module is in the form
    tasks are extracted from and networks are built from (inference-time batch norm decomposed).
    A network that does not export raises `UnsupportedNetworkError` naming what stopped it.
    """
    import torch
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    target = tvm_target(target)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # export is tracing, not compute; don't fight a tuner for cores
    try:
        program = torch.export.export(net.eval(), tuple(example_inputs))
    except Exception as e:  # torch raises many types (Unsupported, UserError, ...) for what it cannot trace
        raise UnsupportedNetworkError(f"{name}: torch.export cannot export it: {one_line(e)}") from None
    finally:
        torch.set_num_threads(threads)
    try:
        mod = from_exported_program(program, keep_params_as_input=True)
    except Exception as e:  # an op without a converter: "Unsupported function types ['aten.x.default']"
        raise UnsupportedNetworkError(f"{name}: TVM's Relax frontend cannot import it: {one_line(e, typed=False)}") \
            from None
    mod, params = relax.frontend.detach_params(mod)
    with target:
        mod = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                        relax.transform.CanonicalizeBindings()])(mod)
    return mod, list(params.get("main", []))


def lower_for_tuning(mod: tvm.IRModule, target) -> tvm.IRModule:
    """The Relax module as `ms.relax_integration.compile_relax` lowers it (legalise, fuse): what
    MetaSchedule's task extraction and `tune_relax` take."""
    from tvm import relax

    with target:
        return relax.get_pipeline("zero")(mod)


def network_workloads(mod: tvm.IRModule, prefix: str, *, target=None) -> list[Workload]:
    """The MetaSchedule tuning tasks of a Relax module from `import_torch`, as workloads named
    `<prefix>_<task>` of family `model:<prefix>/<task>`, sorted by task name; `weight` is how
    often the task occurs. The module is lowered as `ms.relax_integration.compile_relax` lowers
    it (`lower_for_tuning`), so a database of these workloads is what a build of the network asks for.
    """
    import tvm.s_tir.meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    target = tvm_target(target)
    mod = lower_for_tuning(mod, target)
    workloads = []
    for task in sorted(ms.relax_integration.extract_tasks(mod, target), key=lambda t: t.task_name):
        prim_mod = task.dispatched[0]
        args = ms.arg_info.ArgInfo.from_prim_func(prim_mod["main"])
        shapes = " ".join(f"{a.dtype}{list(map(int, a.shape))}" for a in args)
        # Layout tasks (transpose, reshape) do no arithmetic: count one op per output element.
        flops = max(int(estimate_tir_flops(prim_mod)), math.prod(int(s) for s in args[-1].shape))
        workloads.append(Workload(f"{prefix}_{task.task_name}", f"model:{prefix}/{task.task_name}",
                                  {"model": prefix, "task": task.task_name, "args": shapes},
                                  str(args[-1].dtype), flops, prim_mod, int(task.weight)))
    return workloads


def build_model(model: str):
    """One of `MODELS` as (torch.nn.Module, example input), its weights drawn from seed 0: the network
    the standard suite's tasks come from."""
    import torch

    if model not in MODELS:
        raise InputError(f"unknown model {model!r}; known models: {', '.join(MODELS)}")
    torch.manual_seed(0)
    return MODELS[model]()


def extract_model_workloads(model: str = "mlp", *, target=None) -> list[Workload]:
    """The MetaSchedule tuning tasks of one of `MODELS`, imported through Relax.

    Parameters stay function inputs (keep_params_as_input), so weight transposes remain tasks of
    their own, as they are when a model is compiled with its weights bound late. `target` is a
    `tvm.target.Target`, a target dict, or a dragonlab target name; llvm with 2 cores by default.
    Workloads are sorted by task name; `weight` is how often the task occurs in the model.
    """
    net, example = build_model(model)
    mod, _ = import_torch(net, (example,), name=model, target=target)
    return network_workloads(mod, model, target=target)


def tvm_target(target) -> tvm.target.Target:
    """A `tvm.target.Target` from one, a target dict or a dragonlab target name; llvm with 2
    cores when None."""
    from dragonlab.core.targets import get_target

    if target is None:
        target = {"kind": "llvm", "num-cores": 2}
    if isinstance(target, tvm.target.Target):
        return target
    return get_target(target).tvm() if isinstance(target, str) else tvm.target.Target(target)
