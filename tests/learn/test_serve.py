"""Real OpenAI-compatible servers: `transformers serve` on loopback (dragonlab/testing/serve.py). SmolLM2-135M-
Instruct behind /chat/completions is the LLM baseline, every reply judged by the evaluator; a
dragonlab model behind /completions writes exactly what it writes in process."""

import json

import pytest
import torch
from dragonlab.testing.serve import require_serve_group, serving

from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import OK, STAGES, Evaluation, Evaluator
from dragonlab.learn import models
from dragonlab.learn.attempts import write_and_evaluate
from dragonlab.learn.llm import EXAMPLE_KERNEL, EXAMPLE_SCRIPT, ChatModel
from dragonlab.learn.prompts import CONSTRUCTION, construction_prompt, kernel_text

# A served model answers a few hundred prompt tokens a second on a busy 2-core machine, and the
# system prompt alone is about 2,300 tokens: replies take tens of seconds, so keep them short.
MAX_TOKENS = 16


@pytest.fixture(autouse=True)
def loopback(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # an http_proxy in the environment must not intercept loopback


@pytest.fixture(scope="module")
def dragon(tmp_path_factory):
    """A scratch-tiny model that has learned one construction example by heart (a few seconds),
    saved by `models.save`; (its directory, the example's prompt)."""
    prompt = construction_prompt(EXAMPLE_KERNEL, "cpu")
    tokenizer = models.train_tokenizer([prompt, EXAMPLE_SCRIPT], vocab_size=512)
    model = models.scratch_model(models.PRESETS["scratch-tiny"], tokenizer, max_length=512, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch = tokenizer([prompt + EXAMPLE_SCRIPT + tokenizer.eos_token], return_tensors="pt")  # (1, ~340)
    for _ in range(80):
        model(**batch, labels=batch["input_ids"]).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return models.save(model, tokenizer, tmp_path_factory.mktemp("dragon") / "model"), prompt


def test_a_served_dragon_writes_greedily_what_it_writes_in_process_and_samples_when_asked(dragon, tmp_path):
    require_serve_group()
    path, prompt = dragon
    assert json.loads((path / "generation_config.json").read_text())["do_sample"] is True
    model, tokenizer = models.load(path)
    [[greedy]] = models.generate(model, tokenizer, [prompt], n=1, temperature=0, max_new_tokens=32)
    assert len(greedy) > 40, greedy  # 32 tokens of a script, not an early end of text
    with serving(path, tmp_path / "serve.log") as server:
        def writer(**kwargs) -> ChatModel:
            return ChatModel(server.base_url, server.model, endpoint="completions", max_tokens=32, retries=1,
                             backoff_sec=0.1, timeout_sec=120, **kwargs)

        assert writer(temperature=0).replies(prompt, n=2, seed=0) == [greedy, greedy]
        sampled = writer(temperature=1.5).replies(prompt, n=3, seed=0)
        again = writer(temperature=1.5).replies(prompt, n=3, seed=0)
        log = server.log.read_text()
    # The server ignores `n`: ChatModel asked once per reply, with the seeds 0, 1, 2.
    assert log.count('"POST /v1/completions HTTP/1.1" 200') == 2 + 3 + 3, log
    assert len(set(sampled)) > 1 and sampled == again, sampled  # sampling happens, seeded


def test_smollm2_behind_transformers_serve_writes_replies_the_evaluator_judges(quick, tmp_path):
    require_serve_group()
    checkpoint = models.smollm2_checkpoint(progress=False)
    # One prompt: a reply first reads the system prompt and the kernel, ~2,600 tokens, about 30 s of
    # the server's CPU here. Several prompts per batch: a scripted writer (test_attempts) and a
    # scripted server (the report's test).
    workloads = {w.key: w for w in (quick["matmul"],)}
    rows = [{"index": i, "task": CONSTRUCTION, "workload": w.key, "name": w.name,
             "prompt": construction_prompt(kernel_text(w), "cpu")} for i, w in enumerate(workloads.values())]
    with serving(checkpoint, tmp_path / "serve.log") as server:
        llm = ChatModel(server.base_url, server.model, temperature=0, max_tokens=MAX_TOKENS, retries=1,
                        backoff_sec=0.1, timeout_sec=300)
        with Evaluator("cpu", EvalConfig(workers=1, time=False)) as evaluator:
            attempts = write_and_evaluate(llm, evaluator, rows, workloads, split="test", n=1, progress=False)
        log = server.log.read_text()
    assert log.count('"POST /v1/chat/completions HTTP/1.1" 200') == 1, log  # the reply is the model's
    assert [(a.index, a.sample, a.workload) for a in attempts] == [(i, 0, row["workload"]) for i, row in enumerate(rows)]
    for a in attempts:  # a 135M model writes prose: where it stopped does not matter, that it was judged does
        assert isinstance(a.evaluation, Evaluation) and a.evaluation.workload == a.workload, a
        assert a.evaluation.stage in (*STAGES, OK) and (a.evaluation.correct or a.evaluation.reason), a


def test_a_lora_model_is_servable_once_merged(dragon, tmp_path):
    from peft import LoraConfig, get_peft_model

    path, prompt = dragon
    base, tokenizer = models.load(path)
    torch.manual_seed(0)
    lora = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj", "v_proj"],
                                           init_lora_weights=False))  # random adapters: merging must show
    adapter = models.save(lora, tokenizer, tmp_path / "adapter")
    assert not (adapter / "config.json").exists()  # an adapter alone: `transformers serve` cannot load it
    merged = models.merge(adapter, tmp_path / "merged")
    assert json.loads((merged / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert json.loads((merged / "generation_config.json").read_text())["do_sample"] is True
    batch = tokenizer([prompt], return_tensors="pt")
    with torch.inference_mode():
        want = models.load(adapter)[0](**batch).logits
        got = models.load(merged)[0](**batch).logits
        plain = models.load(path)[0](**batch).logits
    assert torch.allclose(got, want, atol=1e-4) and not torch.allclose(got, plain, atol=1e-2)
