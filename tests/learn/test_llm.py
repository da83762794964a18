"""The LLM baseline against a chat-completions server on loopback, and one reply judged for real."""

import pytest
from dragonlab.testing.chat_server import MODEL, serving

from dragonlab.core import codec
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.learn.llm import EXAMPLE_KERNEL, EXAMPLE_SCRIPT, SCRIPT_LANGUAGE, ChatError, ChatModel, script_of
from dragonlab.learn.prompts import construction_prompt, kernel_text
from dragonlab.search.explore import forms, sample_traces

KERNEL = "def main(A: float32[8], B: float32[8])\nblock B(i 8):\n  B[i] = A[i]"


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # an http_proxy in the environment must not intercept loopback
    with serving() as chat:
        yield chat


def fast_model(base_url: str, **kwargs) -> ChatModel:
    return ChatModel(base_url, MODEL, **{"retries": 2, "backoff_sec": 0.01, "timeout_sec": 10, **kwargs})


def test_write_gives_n_fenced_scripts_per_prompt_with_the_grammar_as_system_prompt(server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    prompts = [construction_prompt(KERNEL, "cpu"), construction_prompt(KERNEL, "cuda-sm80")]
    scripts = fast_model(server.base_url + "/").write(prompts, n=3, seed=5)
    assert scripts == [["get C0", "get C1", "get C2"], ["get C3", "get C4", "get C5"]]
    assert len(server.requests) == 2
    for request, prompt, target in zip(server.requests, prompts, ["cpu", "cuda-sm80"]):
        body = request["body"]
        system, user = body["messages"]
        assert SCRIPT_LANGUAGE in system["content"] and f"`{target}`" in system["content"]
        assert user["content"] == prompt
        assert (body["n"], body["seed"], body["temperature"], body["max_tokens"]) == (3, 5, 0.8, 1024)
        assert request["authorization"] == "Bearer sk-test"

    monkeypatch.delenv("OPENAI_API_KEY")
    fast_model(server.base_url).write(prompts[:1], n=1, seed=0)
    assert server.requests[-1]["authorization"] is None


def test_a_server_that_ignores_n_is_asked_again_with_the_next_seeds(server):
    server.per_request = 1
    scripts = fast_model(server.base_url).write([construction_prompt(KERNEL, "cpu")], n=3, seed=7)
    assert scripts == [["get C0", "get C1", "get C2"]]
    assert [(r["body"]["n"], r["body"]["seed"]) for r in server.requests] == [(3, 7), (2, 8), (1, 9)]


def test_the_completions_endpoint_gets_the_dataset_prompt_alone(server):
    prompt = construction_prompt(KERNEL, "cpu")
    model = fast_model(server.base_url, endpoint="completions")
    assert model.url == f"{server.base_url}/completions"
    server.per_request = 1  # as `transformers serve` does: one choice per request
    assert model.write([prompt], n=2, seed=3) == [["get C0", "get C1"]]
    assert [(r["path"], r["body"]["prompt"], r["body"]["seed"]) for r in server.requests] == \
        [("/v1/completions", prompt, 3), ("/v1/completions", prompt, 4)]
    assert not any("messages" in r["body"] for r in server.requests)  # no system prompt, no chat template
    with pytest.raises(ValueError, match=r"endpoint must be one of chat, completions, got 'responses'"):
        ChatModel(server.base_url, MODEL, endpoint="responses")


def test_a_server_error_is_retried(server):
    server.fail_with = [500, 429]
    assert fast_model(server.base_url).write([construction_prompt(KERNEL, "cpu")], n=2, seed=0) == \
        [["get C0", "get C1"]]
    assert len(server.requests) == 3


def test_a_persistent_server_error_gives_up_after_the_retries(server):
    server.fail_with = [503] * 10
    with pytest.raises(ChatError, match=r"HTTP 503 .*try again.*after 3 attempts"):
        fast_model(server.base_url).write([construction_prompt(KERNEL, "cpu")], n=1, seed=0)
    assert len(server.requests) == 3


def test_not_found_is_not_retried_and_names_the_url(server):
    url = server.base_url.replace("/v1", "/v2")
    with pytest.raises(ChatError, match=rf"POST {url}/chat/completions: HTTP 404 .*no route /v2/chat/completions"):
        fast_model(url).write([construction_prompt(KERNEL, "cpu")], n=1, seed=0)
    with pytest.raises(ChatError, match=r"HTTP 404 .*model 'other' does not exist"):
        ChatModel(server.base_url, "other").write([construction_prompt(KERNEL, "cpu")], n=1, seed=0)
    assert len(server.requests) == 2


def test_a_refused_connection_is_retried_then_named(server):
    url = server.base_url
    server.http.shutdown()
    server.http.server_close()  # nothing listens on the port now
    with pytest.raises(ChatError, match=rf"POST {url}/chat/completions: .*refused.*after 3 attempts"):
        fast_model(url).write([construction_prompt(KERNEL, "cpu")], n=1, seed=0)


def test_script_of_takes_the_first_fenced_block_or_the_whole_reply():
    assert script_of("```\nget C\nloops b0 >3\n```") == "get C\nloops b0 >3"
    assert script_of("Sure:\n```tvm-script\nget C\n```\nand\n```\nget D\n```") == "get C"
    assert script_of("  get C\nloops b0 >3\n\n") == "get C\nloops b0 >3"
    assert script_of("```\nget C\nloops b0") == "get C\nloops b0"  # cut off by max_tokens
    assert script_of("<think>maybe ```\nget X\n```</think>\n```\nget C\n```") == "get C"
    assert script_of("") == ""


def test_the_language_summary_names_every_mnemonic_and_its_example_is_real(quick):
    listed = {part.split(" ")[0] for line in SCRIPT_LANGUAGE.splitlines() for part in line.split(" | ")}
    assert set(codec.MNEMONICS.values()) <= listed
    assert EXAMPLE_KERNEL == kernel_text(quick["matmul"])
    assert codec.encode(codec.decode(EXAMPLE_SCRIPT)) == EXAMPLE_SCRIPT


def test_replies_are_judged_by_the_evaluator_garbage_at_decode(server, quick):
    w = quick["matmul"]
    real = forms(sample_traces(w, "cpu", n=1, seed=3)[0].sch.trace).script
    replies = [f"```\n{real}\n```", "I would tile the loops by 16 and vectorise the inner one."]
    server.contents = lambda k, body: replies[k]
    scripts = fast_model(server.base_url).write([construction_prompt(kernel_text(w), "cpu")], n=2, seed=0)[0]
    assert scripts[0] == real
    with Evaluator("cpu", EvalConfig(workers=1, time=False)) as evaluator:
        good, garbage, example = evaluator.evaluate_many([(w, s) for s in scripts] + [(w, EXAMPLE_SCRIPT)],
                                                         progress=False)
    assert good.correct and not good.repaired, good
    assert garbage.stage == "decode" and "line 1" in garbage.reason
    assert example.correct, example  # the system prompt's example works as written
