"""The dry run of a campaign: every check that needs no GPU, each ending in one line.

The workloads are generated (and counted), the smallest one is built for the target, the model
is built on the meta device, trl's trainer arguments are parsed as SFT and RL would, and the
accelerate config is read by accelerate's own loader. A check that raises fails with the
error's first line; the others still run.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

from dragonlab.cli.campaign.file import Campaign, rl_config, sft_config
from dragonlab.core.errors import InputError, one_line


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # one line
    measured: dict = field(default_factory=dict, compare=False)  # figures the estimate uses


def dry_run(c: Campaign) -> list[Check]:
    """Every check that needs no GPU, in order; a check that raises fails with the error's first line."""
    checks = []
    steps = [("workloads", _workloads_check), (f"target {c.collect.target}", _target_check),
             ("model", _model_check), ("lora", _lora_check), ("sft trainer arguments", _sft_args_check),
             ("rl trainer arguments", _rl_args_check)]
    if c.sft.accelerate_config:
        steps.append(("accelerate config", lambda c, _: accelerate_check(c.sft.accelerate_config, c.sft.processes)))
    for name, check in steps:
        try:
            checks.append(check(c, checks))
        except Exception as e:  # a dry run reports what fails; it does not stop at it
            checks.append(Check(name, False, one_line(e)))
    return checks


def _workloads_check(c: Campaign, _) -> Check:
    from dragonlab.core.workloads import PAPER_SIZE, iter_suite
    from dragonlab.search.collect import shard

    n = c.dry_run.workloads
    start = time.monotonic()
    sample = list(itertools.islice(iter_suite(c.collect.suite, seed=c.collect.seed), n + 1))
    seconds = (time.monotonic() - start) / len(sample)
    whole = len(sample) <= n  # the stream ended: the suite's size is counted
    sample = sample[:n]
    if len({w.key for w in sample}) != len(sample):
        return Check("workloads", False, "two generated workloads share a key")
    if whole:
        count, source = len(sample), "[measured]"
    elif c.collect.suite == "paper":
        count, source = PAPER_SIZE, "[suite]"
    else:
        count, source = len(sample), "[at least: the dry run stopped there]"
    shards = c.collect.shards
    sizes = [len(shard(sample, f"{i}/{shards}")) for i in range(shards)]
    of = "all" if whole else f"the first {len(sample):,} of"
    detail = (f"{of} {count:,} {c.collect.suite} workloads generated, {seconds * 1e3:.1f} ms each: "
              f"{len({w.family for w in sample})} families, distinct keys")
    if shards > 1:
        detail += f"; the {shards} shards get {min(sizes)}-{max(sizes)} of them"
    smallest = min(sample, key=lambda w: w.flops)
    return Check("workloads", min(sizes) > 0, detail,
                 {"count": count, "source": source, "seconds_each": seconds, "smallest": smallest})


def _target_check(c: Campaign, checks: list[Check]) -> Check:
    """Build the smallest generated workload for the target: a library for cpu, CUDA source for
    cuda (no GPU needed; nvcc compiles it too where nvcc is installed)."""
    import shutil

    import tvm

    from dragonlab.core.targets import get_target
    from dragonlab.search.defaults import default_schedule

    name = f"target {c.collect.target}"
    w = next((ch.measured["smallest"] for ch in checks if ch.name == "workloads" and ch.measured), None)
    if w is None:
        return Check(name, False, "no workload to build (the workloads check failed)")
    spec = get_target(c.collect.target)
    if not spec.is_gpu:
        tvm.compile(w.mod, target=spec.tvm())
        return Check(name, True, f"{w.name} (unscheduled) built for {spec.config}")
    sch = default_schedule(w, spec)  # an unscheduled kernel binds no threads: cuda needs a schedule
    built = tvm.compile(sch.mod, target=spec.tvm()).mod
    source = next((m.inspect_source() for m in built.imports if m.kind == "cuda"), "")
    if not source:
        return Check(name, False, f"{w.name}: the build has no CUDA module")
    nvcc = shutil.which("nvcc")
    if nvcc:
        from tvm.support import nvcc as tvm_nvcc

        with spec.tvm():
            tvm_nvcc.compile_cuda(source, target_format="cubin", compiler="nvcc")
    compiled = "compiled by nvcc" if nvcc else "no nvcc here: not compiled to device code"
    return Check(name, True, f"{w.name}, dlight's default schedule, built to {len(source):,} characters of "
                             f"CUDA source for {spec.config['arch']} ({compiled})")


def _model_config(c: Campaign):
    """(transformers config, where it came from) of the campaign's model, without any weights."""
    from transformers import AutoConfig, LlamaConfig

    from dragonlab.learn import models

    name = c.sft.preset
    preset = models.PRESETS.get(name)
    max_length = sft_config(c).max_length
    if preset is not None and preset.source == "scratch":
        return (LlamaConfig(vocab_size=preset.vocab_size, max_position_embeddings=max_length,
                            tie_word_embeddings=True, **preset.model),
                f"{name} (LlamaConfig of the preset, a vocabulary of at most {preset.vocab_size} tokens)")
    path = models.cache_dir() / "models" / "smollm2-135m-instruct" if preset is not None else Path(name)
    if (path / "config.json").is_file():
        return AutoConfig.from_pretrained(path), f"{path}/config.json"
    if c.sft.architecture is not None:
        return LlamaConfig(**c.sft.architecture), f"{path} is not on this machine: LlamaConfig from [sft.architecture]"
    raise InputError(f"{path}: no config.json here, and no [sft.architecture] to stand in for it")


def _model_check(c: Campaign, _) -> Check:
    """The model on the meta device (shapes, no memory): parameters, and with LoRA the trainable ones."""
    import torch
    from transformers import AutoModelForCausalLM

    config, source = _model_config(c)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    detail = f"{source}: {_count(total)} parameters on the meta device"
    if c.sft.lora is not None:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **c.sft.lora.peft()))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        detail += f"; LoRA r={c.sft.lora.r}: {_count(trainable)} trainable ({trainable / total:.2%})"
    return Check("model", True, detail)


def _lora_check(c: Campaign, _) -> Check:
    """The campaign's LoRA is the one `dragonlab sft` applies to this model (models.py decides it)."""
    from dragonlab.learn import models

    applied = models.lora_applied(c.sft.preset, full_finetune=c.sft.full_finetune)
    applied = dict(applied, target_modules=list(applied["target_modules"])) if applied else None
    wanted = c.sft.lora.peft() if c.sft.lora else None
    if wanted is None and applied is None:
        return Check("lora", True, f"{c.sft.preset} trains every weight, and [sft.lora] is absent")
    if wanted == applied:
        return Check("lora", True, f"as dragonlab sft applies it: r={applied['r']}, alpha {applied['lora_alpha']}, "
                                   f"{len(applied['target_modules'])} module kinds")
    return Check("lora", False, f"dragonlab sft applies {applied or 'no LoRA'} to {c.sft.preset}, "
                                f"the campaign says {wanted or 'none'}")


def _sft_args_check(c: Campaign, _) -> Check:
    """trl's SFTConfig exactly as dragonlab.learn.sft builds it, on one of the campaign's processes."""
    import tempfile

    from dragonlab.learn.sft import trainer_arguments

    s = sft_config(c)
    with tempfile.TemporaryDirectory() as out:  # never written: TrainingArguments creates nothing
        args = trainer_arguments(s, Path(out), processes=c.sft.processes, progress=False)
    micro, accumulated = args.per_device_train_batch_size, args.gradient_accumulation_steps
    return Check("sft trainer arguments", True, f"trl.SFTConfig parses: {s.max_steps:,} steps of {s.batch_size} "
                                                f"examples, {micro * accumulated} per process on {c.sft.processes}"
                                                + (f" ({accumulated} micro-batches of {micro})" if accumulated > 1 else ""))


def _rl_args_check(c: Campaign, _) -> Check:
    """trl's GRPOConfig exactly as dragonlab.learn.rl builds it. vLLM itself needs GPUs: only its
    settings parse here."""
    import importlib.util
    import tempfile

    from dragonlab.learn.rl import trainer_arguments

    r = rl_config(c)
    with tempfile.TemporaryDirectory() as out:
        trainer_arguments(r, Path(out), processes=c.sft.processes, progress=False)
    detail = (f"trl.GRPOConfig parses: {r.max_steps:,} steps of {r.prompts_per_step} prompts x "
              f"{r.num_generations} scripts, generation {r.generation}")
    if r.generation == "vllm":
        here = "installed" if importlib.util.find_spec("vllm") else "not installed"
        detail += f" (vllm {here} here; it runs only on GPUs: not run)"
    return Check("rl trainer arguments", True, detail)


def accelerate_check(path: str | Path, processes: int) -> Check:
    """An accelerate config file: present, YAML that accelerate's own loader accepts (it refuses
    unknown keys), and launching as many processes as the campaign trains on."""
    import yaml
    from accelerate.commands.config.config_args import load_config_from_file

    path = Path(path)
    if not path.is_file():
        return Check("accelerate config", False, f"{path}: not found")
    try:
        config = load_config_from_file(str(path))
    except (yaml.YAMLError, ValueError, TypeError, AttributeError, KeyError) as e:
        return Check("accelerate config", False, f"{path}: {one_line(e, typed=False)}")
    kind = getattr(config.distributed_type, "value", config.distributed_type)
    detail = (f"{path}: {kind}, {config.num_processes} processes on {config.num_machines} machine(s), "
              f"mixed precision {config.mixed_precision}")
    if config.num_processes != processes:
        return Check("accelerate config", False, f"{detail}; the campaign trains on {processes} ([sft] processes)")
    return Check("accelerate config", True, detail)


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n:,}"


def format_checks(c: Campaign, checks: list[Check], seconds: float | None = None) -> str:
    width = max(len(ch.name) for ch in checks)
    lines = [f"dry run of {c.path} (nothing here needs a GPU)"]
    lines += [f"  {'ok' if ch.ok else 'FAILED':6s}  {ch.name:{width}s}  {ch.detail}" for ch in checks]
    failed = sum(not ch.ok for ch in checks)
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    lines.append(f"{len(checks)} checks{took}: {len(checks) - failed} passed, {failed} failed")
    return "\n".join(lines)
