"""Reading a campaign file: each section is a stage's config, checked by its fields.

[collect], [sft], [rl], [dataset] and [report] are CollectConfig, SFTConfig, RLConfig,
DatasetConfig and ReportConfig themselves: the keys are their fields, a key left out takes the
field's default, and a value is checked against the field's type, `choices` and `range`
(dragonlab.core.fields) before the config checks itself. [collect] and [sft] add
what only a campaign says (the suite, the target, shards, processes, LoRA); a nested config is
a sub-table ([collect.measure], [rl.reward]). REQUIRED names the settings a campaign must write
although the config has a default: they set its scale.
"""

from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path

from dragonlab.cli.options import choices_of
from dragonlab.core.fields import expected, field_type, hints, within
from dragonlab.core.errors import InputError
from dragonlab.learn.dataset_config import DatasetConfig
from dragonlab.learn.rl import RLConfig
from dragonlab.learn.sft import SFTConfig
from dragonlab.reporting.config import ReportConfig
from dragonlab.search.config import CollectConfig


class CampaignError(InputError):
    """A malformed campaign file; the message names the file and the field."""


def _suites() -> tuple:
    from dragonlab.core.workloads import SUITE_NAMES

    return SUITE_NAMES


def _targets() -> tuple:
    from dragonlab.core.targets import target_names

    return tuple(target_names())


def _llama_fields() -> tuple:
    import inspect

    from transformers import LlamaConfig

    return tuple(p for p in inspect.signature(LlamaConfig.__init__).parameters if p not in ("self", "kwargs"))


@dataclass(frozen=True, kw_only=True)
class Collect(CollectConfig):
    """[collect]: CollectConfig, and which workloads are searched on how many machines."""

    suite: str = field(metadata={"help": "the workload suite (dragonlab.core.workloads)", "choices": _suites})
    target: str = field(metadata={"help": "a dragonlab target name (`dragonlab targets`)", "choices": _targets})
    shards: int = field(default=1, metadata={"help": "machines that collect at once, each `--shard I/N`",
                                             "range": "> 0"})
    records: str | None = field(default=None, metadata={"help": "the record store; None = OUT/records"})


@dataclass(frozen=True)
class Lora:
    r: int = field(metadata={"help": "rank of the adapters", "range": "> 0"})
    alpha: float = field(metadata={"help": "LoRA alpha (scale = alpha / r)", "range": "> 0"})
    target_modules: tuple[str, ...] = field(metadata={"help": "module names that get adapters"})
    dropout: float = field(default=0.0, metadata={"help": "dropout on the adapters' input", "range": "[0, 1)"})

    def peft(self) -> dict:
        """The peft LoraConfig fields, as dragonlab.learn.models names them."""
        return {"r": self.r, "lora_alpha": self.alpha, "lora_dropout": self.dropout,
                "target_modules": list(self.target_modules)}


@dataclass(frozen=True, kw_only=True)
class SFT(SFTConfig):
    """[sft]: SFTConfig, and the processes and model that SFT and RL run on."""

    processes: int = field(default=1, metadata={"help": "training processes, one per GPU (accelerate's "
                                                        "num_processes); RL runs on the same ones", "range": "> 0"})
    accelerate_config: str | None = field(default=None, metadata={
        "help": "the `accelerate launch --config_file` of SFT and RL"})
    lora: Lora | None = field(default=None, metadata={
        "help": "the LoRA adapters (checkpoints; scratch presets train every weight)"})
    architecture: dict | None = field(default=None, metadata={
        "help": "transformers.LlamaConfig fields that stand in for the checkpoint's config.json where it is not "
                "on this machine", "keys": _llama_fields})


@dataclass(frozen=True)
class Estimate:
    """Per-unit costs this machine cannot measure. A device is one GPU for a cuda target, one
    CPU machine for `cpu`; every figure is an assumption the output marks [file]."""

    seconds_per_candidate: float = field(metadata={
        "help": "device-seconds to search, build and time one candidate, or to judge one script", "range": "> 0"})
    tokens_per_example: int = field(metadata={"help": "tokens of one training example (prompt + script)",
                                              "range": "> 0"})
    tokens_per_script: int = field(metadata={"help": "tokens of one generated script", "range": "> 0"})
    train_tokens_per_second_per_device: float = field(metadata={"help": "training throughput of one device",
                                                                "range": "> 0"})
    generate_tokens_per_second_per_device: float = field(metadata={
        "help": "transformers' generate, batched, one device", "range": "> 0"})
    vllm_tokens_per_second_per_device: float | None = field(default=None, metadata={
        "help": "vLLM rollouts, one device ([rl] generation = 'vllm')", "range": "> 0"})


@dataclass(frozen=True)
class DryRun:
    workloads: int = field(default=200, metadata={
        "help": "workloads the dry run generates (the whole suite if it has fewer)", "range": "> 0"})


@dataclass(frozen=True)
class Campaign:
    path: Path  # the file it was read from
    out: str  # the run directory: OUT/records, OUT/dataset, OUT/sft, OUT/rl, OUT/report
    collect: Collect
    dataset: DatasetConfig
    sft: SFT
    rl: RLConfig
    report: ReportConfig
    estimate: Estimate
    dry_run: DryRun
    written: dict = field(default_factory=dict, compare=False)  # section -> the keys the file sets in it


SECTIONS = {"collect": Collect, "dataset": DatasetConfig, "sft": SFT, "rl": RLConfig, "report": ReportConfig,
            "estimate": Estimate, "dry_run": DryRun}
REQUIRED = {"collect": ("trials",), "sft": ("preset", "max_steps", "batch_size", "learning_rate"),
            "rl": ("max_steps",)}


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
    if not within(doc.get("out"), str):
        raise CampaignError(f"{path}: out: expected {expected(str)} (the run directory), got {doc.get('out')!r}")
    sections = {name: _section(cls, doc.get(name, {}), path, name, REQUIRED.get(name, ()))
                for name, cls in SECTIONS.items()}
    c = Campaign(path, doc["out"], **sections, written={name: frozenset(doc.get(name, {})) for name in SECTIONS})
    _check_together(c)
    return c


def _section(cls, table, path: Path, name: str, required=()):
    """One section's dataclass from its TOML table: each key checked by its field, then the
    dataclass's own checks."""
    if not isinstance(table, dict):
        raise CampaignError(f"{path}: [{name}] must be a table, got {table!r}")
    known = [f.name for f in fields(cls) if f.init]
    for key in table:
        if key not in known:
            raise CampaignError(f"{path}: [{name}] {key}: unknown key; known: {', '.join(known)}")
    types_, values = hints(cls), {}
    for f in fields(cls):
        if f.name in table:
            values[f.name] = _value(table[f.name], types_[f.name], f.metadata, path, name, f.name)
        elif f.init and (f.name in required or f.default is MISSING and f.default_factory is MISSING):
            raise CampaignError(f"{path}: [{name}] {f.name}: missing ({f.metadata.get('help', 'no default')})")
    try:
        return cls(**values)
    except ValueError as e:  # the config's own checks (InputError is a ValueError)
        raise CampaignError(f"{path}: [{name}] {e}") from None


def _value(value, hint, metadata, path: Path, section: str, key: str):
    """A TOML value checked against its field: a sub-table for a dataclass, a list for a tuple."""
    kind, many = field_type(hint)
    if isinstance(kind, type) and is_dataclass(kind):
        return _section(kind, value, path, f"{section}.{key}")
    if kind is dict:
        return _free_table(value, metadata["keys"](), path, f"{section}.{key}")
    range_, choices = metadata.get("range"), choices_of(metadata)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    fits = (lambda v: v in choices) if choices else (lambda v: any(within(v, k, range_) for k in kinds))
    what = "one of " + ", ".join(map(repr, choices)) if choices else " or ".join(expected(k, range_) for k in kinds)
    ok = isinstance(value, list) and len(value) > 0 and all(map(fits, value)) if many else fits(value)
    what = f"a non-empty list, each {what}" if many else what
    if not ok:
        raise CampaignError(f"{path}: [{section}] {key}: expected {what}, got {value!r}")
    return tuple(value) if many else value


def _free_table(table, known: tuple, path: Path, name: str) -> dict:
    """A table of scalars whose keys must be among `known` (LlamaConfig fields)."""
    if not isinstance(table, dict):
        raise CampaignError(f"{path}: [{name}] must be a table, got {table!r}")
    for key, value in table.items():
        if key not in known:
            raise CampaignError(f"{path}: [{name}] {key}: not a field of transformers.LlamaConfig")
        if not any(within(value, k) for k in (float, str, bool)):
            raise CampaignError(f"{path}: [{name}] {key}: expected a number, string or boolean, got {value!r}")
    return dict(table)


def _check_together(c: Campaign) -> None:
    """Settings of one section that depend on each other, or on another section."""
    p, col = c.path, c.collect
    if col.runner != "rpc" and (col.tracker is not None or col.key is not None):  # CollectConfig checks rpc's
        raise CampaignError(f"{p}: [collect] {'tracker' if col.tracker else 'key'}: only with runner = \"rpc\"")
    if c.rl.generation == "vllm" and c.estimate.vllm_tokens_per_second_per_device is None:
        raise CampaignError(f"{p}: [estimate] vllm_tokens_per_second_per_device: missing ([rl] generation = "
                            "\"vllm\" needs it)")


def written(c: Campaign, section: str, *names: str) -> dict:
    """The settings of `names` (all of the section's fields without names) that the file writes."""
    names = names or tuple(f.name for f in fields(getattr(c, section)))
    return {n: getattr(getattr(c, section), n) for n in names if n in c.written.get(section, ())}


def _config(cls, section):
    """The stage's config alone, without the campaign's own fields of the section."""
    return cls(**{f.name: getattr(section, f.name) for f in fields(cls) if f.init})


def collect_config(c: Campaign) -> CollectConfig:
    return _config(CollectConfig, c.collect)


def dataset_config(c: Campaign) -> DatasetConfig:
    return c.dataset


def sft_config(c: Campaign) -> SFTConfig:
    return _config(SFTConfig, c.sft)


def rl_config(c: Campaign) -> RLConfig:
    return c.rl


def report_config(c: Campaign) -> ReportConfig:
    return c.report
