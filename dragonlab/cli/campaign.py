"""A campaign: every stage's settings at one scale in one TOML file, and a dry run of it.

    c = campaign.load("campaigns/paper.toml")     # CampaignError names the file and the field
    checks = campaign.dry_run(c)                  # what can be checked here, without a GPU
    print(campaign.format_checks(c, checks))
    print(campaign.format_estimate(c, campaign.estimate(c, checks), checks))

`campaigns/quick.toml` is what `dragonlab demo` runs, `standard.toml` the CPU corpus and its
model, `paper.toml` the paper's scale on GPUs (docs/scale.md). Keys are the names the stages'
own configs use (`CollectConfig`, `DatasetConfig`, `SFTConfig`, `RLConfig`, `ReportConfig`);
a key left out takes that config's default, and `load` builds every config once, so a setting
the stage would refuse is refused here, before any work. Relative paths are read from the
directory the command runs in (the repository root, for the shipped files).

The estimate multiplies units (candidates, tokens, scripts) by per-unit costs. Costs that this
machine cannot measure (anything on a GPU) are the `[estimate]` section's assumptions, and the
output marks every figure with where it came from.
"""

from __future__ import annotations

import itertools
import math
import re
import time
import tomllib
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Callable

from dragonlab.core.errors import InputError

QUICK = Path(__file__).resolve().parents[2] / "campaigns" / "quick.toml"  # what `dragonlab demo` runs


class CampaignError(InputError):
    """A malformed campaign file; the message names the file and the field."""


@dataclass(frozen=True)
class Rule:
    """What a value must be: `what` completes "expected ...", `ok` tests a value."""

    what: str
    ok: Callable[[object], bool]


@dataclass(frozen=True)
class Choice:
    """One of the names `choices()` gives (looked up when checked: some live in heavy modules)."""

    choices: Callable[[], tuple]

    @property
    def what(self) -> str:
        return "one of " + ", ".join(map(repr, self.choices()))

    def ok(self, value) -> bool:
        return value in self.choices()


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


POSITIVE_INT = Rule("a positive integer", lambda v: _int(v) and v > 0)
NON_NEGATIVE_INT = Rule("a non-negative integer", lambda v: _int(v) and v >= 0)
POSITIVE = Rule("a positive number", lambda v: _num(v) and v > 0)
NON_NEGATIVE = Rule("a non-negative number", lambda v: _num(v) and v >= 0)
SHARE = Rule("a number in [0, 1)", lambda v: _num(v) and 0 <= v < 1)
OPEN_SHARE = Rule("a number in (0, 1)", lambda v: _num(v) and 0 < v < 1)
TEXT = Rule("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "")
FLAG = Rule("true or false", lambda v: isinstance(v, bool))
HOST_PORT = Rule('"HOST:PORT"', lambda v: isinstance(v, str) and re.fullmatch(r"[^:\s]+:\d{1,5}", v) is not None)
POSITIVE_INTS = Rule("a non-empty list of positive integers",
                     lambda v: isinstance(v, list) and len(v) > 0 and all(POSITIVE_INT.ok(x) for x in v))
TEXTS = Rule("a non-empty list of strings", lambda v: isinstance(v, list) and len(v) > 0 and all(TEXT.ok(x) for x in v))


def _suites() -> tuple:
    from dragonlab.core.workloads import SUITE_NAMES

    return SUITE_NAMES


def _targets() -> tuple:
    from dragonlab.core.targets import target_names

    return tuple(target_names())


def _generations() -> tuple:
    from dragonlab.learn.rl import GENERATION

    return GENERATION


def _llama_fields() -> tuple:
    import inspect

    from transformers import LlamaConfig

    return tuple(p for p in inspect.signature(LlamaConfig.__init__).parameters if p not in ("self", "kwargs"))


def _opt(rule, help: str, default=None):
    """A field the file may leave out: None takes the stage config's default."""
    return field(default=default, metadata={"help": help, "expect": rule})


def _req(rule, help: str):
    return field(metadata={"help": help, "expect": rule})


@dataclass(frozen=True)
class Collect:
    suite: str = _req(Choice(_suites), "the workload suite (dragonlab.core.workloads)")
    target: str = _req(Choice(_targets), "a dragonlab target name (`dragonlab targets`)")
    trials: int = _req(POSITIVE_INT, "measured candidates per workload")
    trials_per_round: int | None = _opt(POSITIVE_INT, "candidates per search round")
    seed: int | None = _opt(NON_NEGATIVE_INT, "search seed")
    shards: int = _opt(POSITIVE_INT, "machines that collect at once, each `--shard I/N`", 1)
    runner: str | None = _opt(Choice(lambda: ("local", "rpc")), "'local' (this machine's device) or 'rpc'")
    tracker: str | None = _opt(HOST_PORT, "HOST:PORT of TVM's RPC tracker (runner = 'rpc')")
    key: str | None = _opt(TEXT, "device key at the tracker (runner = 'rpc')")
    records: str | None = _opt(TEXT, "the record store; None = OUT/records")


@dataclass(frozen=True)
class Dataset:
    top_k: int | None = _opt(POSITIVE_INT, "construction completions per workload")
    margin: float | None = _opt(OPEN_SHARE, "refinement outputs run at least this much faster")
    pairs_per_workload: int | None = _opt(POSITIVE_INT, "refinement pairs per workload, at most")
    seed: int | None = _opt(NON_NEGATIVE_INT, "seeds the split and the pair sampling")
    holdout_family: str | None = _opt(TEXT, "an op family held out as the test_family split")
    prompt_form: str | None = _opt(TEXT, "'compact' or 'tvmscript'")
    scripts: str | None = _opt(TEXT, "'design' or 'full'")
    validation: float | None = _opt(SHARE, "share of workloads in validation")
    test: float | None = _opt(SHARE, "share of workloads in test")


@dataclass(frozen=True)
class Lora:
    r: int = _req(POSITIVE_INT, "rank of the adapters")
    alpha: float = _req(POSITIVE, "LoRA alpha (scale = alpha / r)")
    target_modules: tuple[str, ...] = _req(TEXTS, "module names that get adapters")
    dropout: float = _opt(SHARE, "dropout on the adapters' input", 0.0)

    def peft(self) -> dict:
        """The peft LoraConfig fields, as dragonlab.learn.models names them."""
        return {"r": self.r, "lora_alpha": self.alpha, "lora_dropout": self.dropout,
                "target_modules": list(self.target_modules)}


@dataclass(frozen=True)
class SFT:
    preset: str = _req(TEXT, "a preset of dragonlab.learn.models or a local checkpoint directory")
    max_steps: int = _req(POSITIVE_INT, "optimizer steps")
    batch_size: int = _req(POSITIVE_INT, "examples per optimizer step, over all processes")
    learning_rate: float = _req(POSITIVE, "peak learning rate")
    max_length: int | None = _opt(POSITIVE_INT, "tokens of prompt + completion")
    processes: int = _opt(POSITIVE_INT, "training processes, one per GPU (accelerate's num_processes); "
                                        "RL runs on the same ones", 1)
    accelerate_config: str | None = _opt(TEXT, "the `accelerate launch --config_file` of SFT and RL")
    lora: Lora | None = _opt(Lora, "the LoRA adapters (checkpoints; scratch presets train every weight)")
    architecture: dict | None = _opt(_llama_fields, "transformers.LlamaConfig fields that stand in for the "
                                                    "checkpoint's config.json where it is not on this machine")


@dataclass(frozen=True)
class RL:
    max_steps: int = _req(POSITIVE_INT, "GRPO optimizer steps")
    num_generations: int | None = _opt(POSITIVE_INT, "scripts per prompt (the GRPO group)")
    prompts_per_step: int | None = _opt(POSITIVE_INT, "prompts per step, over all processes")
    learning_rate: float | None = _opt(POSITIVE, "learning rate")
    beta: float | None = _opt(NON_NEGATIVE, "KL coefficient against the SFT model")
    temperature: float | None = _opt(POSITIVE, "rollout temperature")
    constrained: bool | None = _opt(FLAG, "constrained decoding of the rollouts")
    generation: str | None = _opt(Choice(_generations),
                                  "who generates the rollouts: 'transformers' or 'vllm'")


@dataclass(frozen=True)
class Report:
    k: int | None = _opt(POSITIVE_INT, "attempts per held-out prompt")
    budgets: tuple[int, ...] | None = _opt(POSITIVE_INTS, "MetaSchedule trial budgets")
    turns: int | None = _opt(NON_NEGATIVE_INT, "refinement turns after each construction attempt")
    refinement_per_workload: int | None = _opt(POSITIVE_INT, "refinement prompts per held-out workload")
    constrained: bool | None = _opt(FLAG, "constrained decoding for the models")


@dataclass(frozen=True)
class Estimate:
    """Per-unit costs this machine cannot measure. A device is one GPU for a cuda target, one
    CPU machine for `cpu`; every figure is an assumption the output marks [file]."""

    seconds_per_candidate: float = _req(POSITIVE, "device-seconds to search, build and time one candidate, "
                                                  "or to judge one script")
    tokens_per_example: int = _req(POSITIVE_INT, "tokens of one training example (prompt + script)")
    tokens_per_script: int = _req(POSITIVE_INT, "tokens of one generated script")
    train_tokens_per_second_per_device: float = _req(POSITIVE, "training throughput of one device")
    generate_tokens_per_second_per_device: float = _req(POSITIVE, "transformers' generate, batched, one device")
    vllm_tokens_per_second_per_device: float | None = _opt(POSITIVE, "vLLM rollouts, one device "
                                                                     "([rl] generation = 'vllm')")


@dataclass(frozen=True)
class DryRun:
    workloads: int = _opt(POSITIVE_INT, "workloads the dry run generates (the whole suite if it has fewer)", 200)


@dataclass(frozen=True)
class Campaign:
    path: Path  # the file it was read from
    out: str  # the run directory: OUT/records, OUT/dataset, OUT/sft, OUT/rl, OUT/report
    collect: Collect
    dataset: Dataset
    sft: SFT
    rl: RL
    report: Report
    estimate: Estimate
    dry_run: DryRun


DATASET_KEYS = tuple(f.name for f in fields(Dataset))
SECTIONS = {"collect": Collect, "dataset": Dataset, "sft": SFT, "rl": RL, "report": Report, "estimate": Estimate,
            "dry_run": DryRun}


def load(path: str | Path) -> Campaign:
    """Read and validate a campaign file. Raises one CampaignError naming the file and the field:
    an unknown section or key, a missing setting, a wrong type, a value out of range, or settings
    that a stage's config refuses."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise CampaignError(f"{path}: no such campaign file") from None
    except tomllib.TOMLDecodeError as e:
        raise CampaignError(f"{path}: not TOML: {e}") from None
    for key in doc:
        if key != "out" and key not in SECTIONS:
            raise CampaignError(f"{path}: {key}: unknown section or key; known: out, "
                                + ", ".join(f"[{s}]" for s in SECTIONS))
    if not TEXT.ok(doc.get("out")):
        raise CampaignError(f"{path}: out: expected {TEXT.what} (the run directory), got {doc.get('out')!r}")
    sections = {name: _section(cls, doc.get(name, {}), path, name) for name, cls in SECTIONS.items()}
    c = Campaign(path, doc["out"], **sections)
    _check_together(c)
    return c


def _section(cls, table, path: Path, name: str):
    """One section's dataclass from its TOML table, every key checked against its field's rule."""
    if not isinstance(table, dict):
        raise CampaignError(f"{path}: [{name}] must be a table, got {table!r}")
    known = [f.name for f in fields(cls)]
    for key in table:
        if key not in known:
            raise CampaignError(f"{path}: [{name}] {key}: unknown key; known: {', '.join(known)}")
    values = {}
    for f in fields(cls):
        where = f"[{name}] {f.name}"
        if f.name not in table:
            if f.default is MISSING:
                raise CampaignError(f"{path}: {where}: missing ({f.metadata['help']})")
            continue
        value, expect = table[f.name], f.metadata["expect"]
        if isinstance(expect, type) and is_dataclass(expect):  # a sub-table: [sft.lora]
            values[f.name] = _section(expect, value, path, f"{name}.{f.name}")
        elif not isinstance(expect, (Rule, Choice)):  # a free table: the names it may hold
            values[f.name] = _free_table(value, expect(), path, f"{name}.{f.name}")
        elif not expect.ok(value):
            raise CampaignError(f"{path}: {where}: expected {expect.what}, got {value!r}")
        else:
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**values)


def _free_table(table, known: tuple, path: Path, name: str) -> dict:
    """A table of scalars whose keys must be among `known` (LlamaConfig fields)."""
    if not isinstance(table, dict):
        raise CampaignError(f"{path}: [{name}] must be a table, got {table!r}")
    for key, value in table.items():
        if key not in known:
            raise CampaignError(f"{path}: [{name}] {key}: not a field of transformers.LlamaConfig")
        if not (_num(value) or isinstance(value, (str, bool))):
            raise CampaignError(f"{path}: [{name}] {key}: expected a number, string or boolean, got {value!r}")
    return dict(table)


def _check_together(c: Campaign) -> None:
    """Settings that depend on each other, then every stage's own config."""
    p, col = c.path, c.collect
    if col.runner == "rpc":
        for name in ("tracker", "key"):
            if getattr(col, name) is None:
                raise CampaignError(f"{p}: [collect] {name}: missing (runner = \"rpc\" needs tracker and key)")
    elif col.tracker is not None or col.key is not None:
        raise CampaignError(f"{p}: [collect] {'tracker' if col.tracker else 'key'}: only with runner = \"rpc\"")
    if c.rl.generation == "vllm" and c.estimate.vllm_tokens_per_second_per_device is None:
        raise CampaignError(f"{p}: [estimate] vllm_tokens_per_second_per_device: missing ([rl] generation = "
                            "\"vllm\" needs it)")
    for name, build in (("collect", collect_config), ("dataset", dataset_config), ("sft", sft_config),
                        ("rl", rl_config), ("report", report_config)):
        try:
            build(c)
        except ValueError as e:
            raise CampaignError(f"{p}: [{name}] {e}") from None


def _given(section, *names: str) -> dict:
    return {n: getattr(section, n) for n in names if getattr(section, n) is not None}


def collect_config(c: Campaign):
    from dragonlab.search.collect import CollectConfig

    return CollectConfig(**_given(c.collect, "trials", "trials_per_round", "seed", "runner", "tracker", "key"))


def dataset_config(c: Campaign):
    from dragonlab.learn.dataset import DatasetConfig

    return DatasetConfig(**_given(c.dataset, *DATASET_KEYS))


def sft_config(c: Campaign):
    from dragonlab.learn.sft import SFTConfig

    return SFTConfig(**_given(c.sft, "preset", "max_steps", "batch_size", "learning_rate", "max_length"))


def rl_config(c: Campaign):
    from dragonlab.learn.rl import RLConfig

    return RLConfig(**_given(c.rl, *(f.name for f in fields(RL))))


def report_config(c: Campaign):
    from dragonlab.reporting.report import ReportConfig

    return ReportConfig(**_given(c.report, *(f.name for f in fields(Report))))


# --- the dry run ---------------------------------------------------------------------------------

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
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            checks.append(Check(name, False, f"{type(e).__name__}: {first}"))
    return checks


def _workloads_check(c: Campaign, _) -> Check:
    from dragonlab.core.workloads import PAPER_SIZE, iter_suite
    from dragonlab.search.collect import shard

    n = c.dry_run.workloads
    start = time.monotonic()
    sample = list(itertools.islice(iter_suite(c.collect.suite, seed=c.collect.seed or 0), n + 1))
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

    preset = models.PRESETS.get(c.sft.preset)
    applied = preset.lora if preset is not None else models.LORA_DEFAULTS  # a local checkpoint
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
    return Check("sft trainer arguments", True, f"trl.SFTConfig parses: {s.max_steps:,} steps of {s.batch_size} "
                                                f"examples, {args.per_device_train_batch_size} per process on "
                                                f"{c.sft.processes}")


def _rl_args_check(c: Campaign, _) -> Check:
    """trl's GRPOConfig exactly as dragonlab.learn.rl builds it. vLLM itself needs GPUs: only its settings parse here."""
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
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return Check("accelerate config", False, f"{path}: {first}")
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


# --- the estimate --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    stage: str
    what: str
    units: float
    derivation: str  # how `units` follows from the settings, each figure marked with its source
    cost: str  # the per-unit cost and its source
    hours: float  # device-hours
    devices: int  # devices the work is spread over (shards, processes): wall-clock hours = hours / devices


def estimate(c: Campaign, checks: list[Check]) -> list[Row]:
    """Device-hours per stage: units x per-unit cost. Empty when the workloads check failed (the
    count of workloads is the base of every other figure)."""
    found = next((ch.measured for ch in checks if ch.name == "workloads" and ch.ok), None)
    if not found:
        return []
    e, s, r, rep = c.estimate, sft_config(c), rl_config(c), report_config(c)
    w, wsrc = found["count"], found["source"]
    cand, train, gen = e.seconds_per_candidate, e.train_tokens_per_second_per_device, \
        e.generate_tokens_per_second_per_device
    rl_gen = e.vllm_tokens_per_second_per_device if r.generation == "vllm" else gen
    scripts = r.max_steps * r.prompts_per_step * r.num_generations
    bench = benchmark(c)
    held, held_src = (len(bench[0].judged()), f"[{bench[1]}]") if bench else \
        (max(1, round(w * dataset_config(c).test)), "(the test share)")
    prompts = held * rep.k * (1 + rep.turns + (rep.refinement_per_workload or 0))  # per model
    per_candidate, top = f"{cand:g} s [file]", max(rep.budgets)
    tps = lambda x: f"{x:,g} tokens/s [file]"  # noqa: E731

    def row(stage, what, units, derivation, seconds_each, cost, devices=1):
        return Row(stage, what, units, derivation, cost, units * seconds_each / 3600, devices)

    rows = [row("collect", "candidates", w * c.collect.trials, f"{w:,} workloads {wsrc} x {c.collect.trials} trials",
                cand, per_candidate, c.collect.shards)]
    if bench:  # the judged workloads' searches continue to the benchmark's trials; the report reuses them
        more = sum(max(0, t - c.collect.trials) * len(keys) for t, keys in bench[0].search.items())
        rows.append(row("collect", "benchmark search", more, " + ".join(
            f"{len(keys)} x {t}" for t, keys in sorted(bench[0].search.items(), reverse=True))
            + f" trials, less the {c.collect.trials} collected", cand, per_candidate))
    rows += [
        row("sft", "training tokens", s.max_steps * s.batch_size * e.tokens_per_example,
            f"{s.max_steps:,} steps x {s.batch_size} examples x {e.tokens_per_example} tokens [file]", 1 / train,
            tps(train), c.sft.processes),
        row("rl", "generated tokens", scripts * e.tokens_per_script,
            f"{r.max_steps:,} steps x {r.prompts_per_step} prompts x {r.num_generations} scripts x "
            f"{e.tokens_per_script} tokens [file]", 1 / rl_gen, f"{tps(rl_gen)} ({r.generation})", c.sft.processes),
        row("rl", "training tokens", scripts * e.tokens_per_example,
            f"{scripts:,} scripts x {e.tokens_per_example} tokens [file]", 1 / train, tps(train), c.sft.processes),
        row("rl", "scripts judged", scripts, f"{scripts:,} scripts", cand, per_candidate, c.sft.processes),
        row("report", "generated tokens", 2 * prompts * e.tokens_per_script,
            f"2 models x {held:,} held-out workloads {held_src} x {rep.k} x (1 + {rep.turns} turns + "
            f"{rep.refinement_per_workload or 0} refinement) x {e.tokens_per_script} tokens [file]", 1 / gen, tps(gen)),
        row("report", "scripts judged", 2 * prompts + held * (rep.k + 2 + len(rep.budgets)),
            f"the models' {2 * prompts:,} + baselines' {held:,} x {rep.k + 2 + len(rep.budgets)}", cand,
            per_candidate),
        row("report", "search candidates", (1 if bench else 2) * held * top,
            f"{'seeded search (the plain one is stored)' if bench else 'plain and seeded search'} x {held:,} "
            f"workloads x {top} trials", cand, per_candidate),
    ]
    return rows


def benchmark(c: Campaign):
    """(Benchmark, its path) when the dataset takes its splits from the benchmark shipped beside the
    records (as `dataset build` does when the file sets no split option), else None."""
    from dragonlab.search.benchmark import find
    from dragonlab.search.benchmark import load as load_benchmark

    path = find(c.collect.records or f"{c.out}/records")
    if path is None or _given(c.dataset, "holdout_family", "validation", "test"):
        return None
    return load_benchmark(path), path


def format_estimate(c: Campaign, rows: list[Row], checks: list[Check]) -> str:
    if not rows:
        return "no estimate: the workloads check failed"
    from dragonlab.core.targets import get_target

    device = "one GPU" if get_target(c.collect.target).is_gpu else "one CPU machine"
    head = ("stage", "what", "units", "from", "cost per unit", "device-hours")
    table = [head] + [(x.stage, x.what, f"{x.units:,.0f}", x.derivation, x.cost, f"{x.hours:,.2f}") for x in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    fmt = lambda t: "  " + "  ".join(  # noqa: E731
        v.rjust(n) if i in (2, 5) else v.ljust(n) for i, (v, n) in enumerate(zip(t, widths))).rstrip()
    wall = {}
    for x in rows:
        wall[x.stage] = wall.get(x.stage, 0.0) + x.hours / x.devices
    wl = next(ch.measured for ch in checks if ch.name == "workloads")
    return "\n".join([
        f"estimate in device-hours (a device: {device}, {c.collect.target})",
        "  [file]: an assumption of the file's [estimate]; [measured]: measured by this dry run; [suite]: the "
        "suite's definition; unmarked: the campaign's settings",
        *map(fmt, table),
        f"  total {sum(x.hours for x in rows):,.2f} device-hours; wall-clock with {c.collect.shards} collecting "
        f"machine(s) and {c.sft.processes} training device(s): "
        + ", ".join(f"{stage} {hours:,.2f} h" for stage, hours in wall.items()),
        f"  not device time: generating the {wl['count']:,} workloads, {wl['seconds_each'] * 1e3:.1f} ms each "
        f"[measured], takes {wl['count'] * wl['seconds_each'] / 60:,.1f} CPU-minutes"])


# --- running ---------------------------------------------------------------------------------------

def plan(c: Campaign) -> list[str]:
    """The commands the campaign runs, stage by stage (comments start with #)."""
    col, s, r, rep = c.collect, c.sft, rl_config(c), report_config(c)
    records, out = col.records or f"{c.out}/records", c.out
    cmd = (f"dragonlab collect --suite {col.suite} --target {col.target} --trials {col.trials} "
           f"--per-round {collect_config(c).trials_per_round} --seed {col.seed or 0}")
    if col.runner == "rpc":
        cmd += f" --runner rpc --tracker {col.tracker} --key {col.key}"
    if col.shards == 1:
        lines = ["# collect", f"{cmd} --out {records}"]
    else:  # shards at once write separate stores (they would share the store's workload file)
        lines = [f"# collect: {col.shards} shards at once, one machine each (or in turn into one store)",
                 f"{cmd} --shard I/{col.shards} --out {records}-I   # I = 0 .. {col.shards - 1}",
                 f"dragonlab records merge {records}-* --out {records}"]
    bench = benchmark(c)
    if bench:
        lines.append(f"{cmd.replace(f' --trials {col.trials}', '')} --benchmark-search {bench[1]} --out {records}")
    # only the options the file sets: any split option replaces a benchmark shipped beside the records
    options = "".join(f" --{k.replace('_', '-')} {v}" for k, v in _given(c.dataset, *DATASET_KEYS).items())
    lines += ["# dataset", f"dragonlab dataset build --records {records} --out {out}/dataset{options}"]
    launch = f"accelerate launch --config_file {s.accelerate_config} -m dragonlab.cli" if s.accelerate_config \
        else "dragonlab"
    lines += [f"# sft and rl on {s.processes} process(es)",
              f"{launch} sft --preset {s.preset} --data {out}/dataset --out {out}/sft --max-steps {s.max_steps} "
              f"--batch-size {s.batch_size} --learning-rate {s.learning_rate:g} --max-length "
              f"{sft_config(c).max_length}",
              f"{launch} rl --from {out}/sft --data {out}/dataset --out {out}/rl --max-steps {r.max_steps} "
              f"--learning-rate {r.learning_rate:g} --num-generations {r.num_generations} --prompts-per-step "
              f"{r.prompts_per_step} --beta {r.beta:g} --temperature {r.temperature:g} --generation "
              f"{r.generation}" + (" --constrained" if r.constrained else ""),
              "# report",
              f"dragonlab report --run {out} --k {rep.k} --budgets {' '.join(map(str, rep.budgets))} --turns "
              f"{rep.turns} --refinement-per-workload {rep.refinement_per_workload}"
              + (" --constrained" if rep.constrained else "")]
    return lines


def demo_options(c: Campaign) -> dict | None:
    """The `dragonlab demo` options that run this campaign, or None when the demo cannot: it runs
    campaigns/quick.toml, with any run directory, trials and SFT and RL steps."""
    if not QUICK.is_file():
        return None
    if _fixed_by_demo(c) != _fixed_by_demo(load(QUICK)):
        return None
    return {"out": Path(c.out), "trials": c.collect.trials, "preset": c.sft.preset, "sft_steps": c.sft.max_steps,
            "rl_steps": c.rl.max_steps}


def _fixed_by_demo(c: Campaign) -> tuple:
    """What `dragonlab demo` always runs the same way (its options excepted)."""
    return (c.collect.suite, c.collect.target, c.collect.shards, c.collect.records, c.sft.processes,
            c.sft.accelerate_config, c.sft.lora, replace(collect_config(c), trials=1), dataset_config(c),
            replace(sft_config(c), max_steps=1), replace(rl_config(c), max_steps=1), report_config(c))
