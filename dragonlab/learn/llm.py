"""An LLM baseline: scripts written by a chat model behind any OpenAI-compatible endpoint.

    model = ChatModel("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-Coder-32B-Instruct")
    scripts = model.write(prompts, n=4, seed=0)      # 4 scripts per dataset prompt

`ChatModel.write` has the interface of the local `attempts.ModelWriter`, so the same evaluation
code judges both. The system prompt (`system_prompt`) teaches the script language in a page; the
user message is the dataset prompt unchanged (prompts.py). A reply is untrusted text:
`script_of` only cuts the script out of it, the evaluator decodes it later, and nothing here
evaluates it.

A dragonlab model served by `transformers serve` (docs/report.md) has no chat template: it was
trained on dataset prompts followed by their scripts. `endpoint="completions"` posts the dataset
prompt alone, unchanged, to the plain `/completions` endpoint, and the reply's text is what the
model wrote after it: at temperature 0, what `models.generate` writes in process.

HTTP is the standard library's (`urllib.request`): POST `{base_url}/chat/completions` (or
`/completions`), retried with backoff on 429, 5xx and connection errors. The API key comes from an environment variable
(`OPENAI_API_KEY` unless told otherwise); without one no Authorization header is sent, as local
servers (vLLM, llama.cpp, Ollama) need none.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from dragonlab.core.errors import InputError, UnavailableError

# Faithful to docs/codec.md and to what codec.py parses (tests/learn/test_llm.py checks that every
# mnemonic is listed and that the example decodes); docs/ is not packaged, so it lives here.
SCRIPT_LANGUAGE = """\
A script is a MetaSchedule trace: one schedule instruction per line, replayed from top to bottom
on the unscheduled kernel. A line is a mnemonic, then its arguments, then optionally ` =DECISION`
and ` >N`, separated by exactly one space: no spaces at either end of a line, no blank lines, no
comments.

Variables are never named on the line that defines them. The variables a script defines are
numbered 0, 1, 2, ... over the whole script, in order, with the prefix b (block), l (loop) or
v (sampled value): `get C` defines b0, then `loops b0 >3` defines l1 l2 l3, then
`tile l1 =[4,16]` defines v4 v5. A line whose output count depends on the kernel (loops,
children, producers, consumers, output_blocks, cache_inplace, cache_index) says it with `>N`;
`split` defines one loop per factor, `tile` one value per factor of its decision. A variable must
be defined on an earlier line; `v5..8` stands for v5 v6 v7 v8 in a list of variables.

Values: integers, floats (0.5, 1e-05, inf), true, false, None, "strings" (JSON escapes), lists
[a,b,c] (no spaces), variables. In an input a bare word is a variable and "quoted" a string;
block names and storage scopes are bare words (C, global, shared.dyn).

Arguments are positional, in the order below. <NAME=default> is an optional trailing argument:
leave it out when it has its default. After a variable-length list of inputs, optional arguments
follow ` ; ` (`split l1 v2 v3 ; false`). Decisions: `tile` gives the tile sizes (their product is
the loop's extent), `cat` the index of the chosen candidate, `loc` a compute location (-2 inline,
-1 root, k the k-th loop where the block can go, outermost first).

get NAME <FUNC=main>                                  -> b
loops B >N | children B >N | producers B >N | consumers B >N | output_blocks B >N
tile L <MAX_INNERMOST_FACTOR=64> =[f1,...,fk]         -> k v
ptile L PARTITION_POS INNERPART_FACTOR =[f1,...,fk]   -> k v
cat [CANDIDATES] <[PROBS]=uniform> =INDEX             -> v
loc B =INDEX                                          -> l
split L F1 ... Fk <; PRESERVE_UNIT_ITERS=true DISABLE_PREDICATION=false>   -> k l (F: variable, int or None)
partition L F1 ... Fk <; PRESERVE_UNIT_ITERS=1>       -> k l
fuse L1 ... Lk <; PRESERVE_UNIT_ITERS=1>              -> l
merge L1 ... Lk                                       -> l
reorder L1 ... Lk
unit_loop X                                           -> l
par L | vec L | unroll L
bind L THREAD                 (THREAD: tx ty tz bx by bz vx vy vz = threadIdx/blockIdx/vthread .x .y .z)
ann X KEY <VALUE=1>
unann X KEY
cache_read B BUFFER_INDEX SCOPE <[CONSUMERS]=[]>      -> b
cache_write B BUFFER_INDEX SCOPE <[CONSUMERS]=[]>     -> b
cache_inplace B BUFFER_INDEX SCOPE >N
cache_index B SCOPE CSE_THRESH >N
reindex_read B INDEX_MAP BUFFER_INDEX SCOPE           -> b
reindex_write B INDEX_MAP BUFFER_INDEX SCOPE          -> b
reindex B BUFFER_INDEX BUFFER_TYPE                    -> b  (BUFFER_TYPE 0 read, 1 write)
read_at L B BUFFER_INDEX SCOPE                        -> b
write_at L B BUFFER_INDEX SCOPE                       -> b
set_scope B BUFFER_INDEX SCOPE
align B BUFFER_INDEX AXIS FACTOR OFFSET
set_dtype B BUFFER_INDEX DTYPE
at B L <PRESERVE_UNIT_LOOPS=1 INDEX=-1>               (compute_at)
rev_at B L <PRESERVE_UNIT_LOOPS=1 INDEX=-1>           (reverse_compute_at)
inline B | rev_inline B
fuse_epilogue B B2
decomp B L                                            -> b  (decompose_reduction)
decomp_padding B L                                    -> b
rfactor L FACTOR_AXIS                                 -> b
blockize X <PRESERVE_UNIT_ITERS=true>                 -> b
tensorize X INTRIN <PRESERVE_UNIT_ITERS=true>
layout B INDEX_MAP BUFFER_INDEX BUFFER_TYPE <PAD_VALUE=None ASSUME_INJECTIVE=true>
block_layout B INDEX_MAP
pad_einsum B [PADDINGS]
rolling_buffer B BUFFER_INDEX
reorder_iters B [ORDER]
ann_access B BUFFER_INDEX BUFFER_TYPE INDEX_MAP
hide_access B "read"|"write" [BUFFER_INDICES]
postproc

An INDEX_MAP is written {i,j->i//16,j//16,i%16,j%16}.

Annotation keys (ann, unann): tiling, coop, thread_lo, thread_hi, rand_producer, par, vec,
unroll, unroll_implicit, intrin, intrin_init, inline_rule, layout_rewrite_preproc (these are
meta_schedule.tiling_structure, .cooperative_fetch, ...), auto_unroll (pragma_auto_unroll_max_step),
explicit (pragma_unroll_explicit), pipeline_stage, pipeline_order, pipeline_async
(software_pipeline_*), warp_execution. Scripts with other keys, or with splits that disable
predication, are refused.

A script has two parts. First the design, as MetaSchedule's schedule rules write it: tiling
(`tile` then `split` then `reorder`), caches, compute locations, and annotations on the root
block (`ann b1 par 32`, `ann b1 vec 64`, `ann b1 unroll v26`). Then `postproc` and what the
target's post-processors do with that design: they remove those annotations and parallelise,
vectorise and unroll real loops, bind threads, decompose reductions. The script must apply as
written. What is built is the design post-processed by the target's own post-processors; tile
sizes that do not fit the loop, or a post-processing part that does not match, are repaired and
count against the script. The post-processing part may be left out: a script that ends with
its design is post-processed the same way, and that is how the training data are written.
"""

# A postprocessed random sample of quick matmul 64x64x64 float32 on cpu
# (explore.sample_traces(w, "cpu", n=1)[0], then explore.forms(...).script).
EXAMPLE_KERNEL = """\
def main(A: float32[64,64], B: float32[64,64], C: float32[64,64])
block C(i 64, j 64, k 64 r):
  init C[i, j] = 0.0
  C[i, j] = C[i, j] + A[i, k] * B[k, j]"""

EXAMPLE_SCRIPT = """\
get C
get root
ann b0 tiling "SSRSRS"
loops b0 >3
tile l2 =[1,1,16,4]
split l2 v5..8
tile l3 =[1,4,16,1]
split l3 v13..16
tile l4 =[8,8]
split l4 v21 v22
reorder l9 l17 l10 l18 l23 l11 l19 l24 l12 l20
consumers b0
cache_write b0 0 global
rev_at b25 l18
ann b1 par 32
ann b1 vec 64
cat [0,16,64,512] =1
ann b1 unroll v26
postproc
get root
unann b27 par
unann b27 vec
unann b27 unroll
children b27 >2
loops b28 >10
fuse l30..33
par l40
ann l40 auto_unroll 16
ann l40 explicit
loops b29 >3
fuse l43
vec l44
get C
loops b45 >7
decomp b45 l47"""

_TARGET = re.compile(r"^target: (\S+)$", re.MULTILINE)  # the prompt's own target line (prompts.py)
# A fenced block: ``` and an optional info string, up to the closing fence (or the end of a
# reply cut off by max_tokens).
_FENCE = re.compile(r"```[^\n`]*\n(.*?)(?:```|\Z)", re.DOTALL)
_THINKING = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)


ENDPOINTS = ("chat", "completions")


class ChatError(UnavailableError):
    """A chat-completions request that failed for good (after retries, or not retryable)."""


def _describe(target: str) -> str:
    if target == "cpu":
        return "`cpu`: the host CPU, compiled by LLVM"
    if target.startswith("cuda-sm"):
        return (f"`{target}`: an NVIDIA GPU (sm_{target[7:]}), compiled to CUDA; every loop nest must end up "
                "bound to blockIdx/threadIdx with `bind`")
    return f"`{target}`"


def system_prompt(target: str) -> str:
    """What the chat model is told before each dataset prompt: the task, the script language
    (SCRIPT_LANGUAGE), one real example, and the answer format."""
    return (f"You write TVM MetaSchedule schedules for tensor kernels, for the target {_describe(target)}. "
            "A schedule is written as a script in the language below.\n\n"
            "The user message gives the task, the target and the kernel as a compact loop nest: "
            "`block C(i 64, j 64, k 64 r):` is block C with iterators i, j, k of extent 64, k a reduction; "
            "`get` takes the block names shown there. For `task: construction` write a fast script for the "
            "kernel; for `task: refinement` the message also holds a script: write a faster one for the same "
            f"kernel.\n\n# The script language\n\n{SCRIPT_LANGUAGE}\n"
            f"# Example\n\nThe kernel\n\n```\n{EXAMPLE_KERNEL}\n```\n\non cpu has, for example, this script:\n\n"
            f"```\n{EXAMPLE_SCRIPT}\n```\n\n"
            "# Answer\n\nAnswer with the script only, in one fenced code block (```), and nothing else.")


def script_of(reply: str) -> str:
    """The script in a reply: the first fenced block's contents, else the whole reply, stripped.
    A leading <think>...</think> section (reasoning models on some servers) is dropped first."""
    reply = _THINKING.sub("", reply, count=1) if reply.lstrip().startswith("<think>") else reply
    match = _FENCE.search(reply)
    return (match.group(1) if match else reply).strip()


def target_of(prompt: str) -> str:
    """The target a dataset prompt names on its `target:` line."""
    match = _TARGET.search(prompt)
    if match is None:
        first = prompt.split("\n", 1)[0]
        raise InputError(f"prompt has no 'target: ...' line (it begins {first[:80]!r})")
    return match.group(1)


@dataclass(frozen=True)
class ChatModel:
    """A chat model as a script writer: `write(prompts, n=, seed=)` gives n scripts per prompt."""

    base_url: str = field(metadata={"help": "OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1"})
    model: str = field(metadata={"help": "model name the server knows"})
    api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "environment variable with the API key"})
    temperature: float = 0.8
    max_tokens: int = field(default=1024, metadata={"help": "per reply; scripts are 600-1000 characters"})
    timeout_sec: float = field(default=120.0, metadata={"help": "per HTTP request"})
    retries: int = field(default=4, metadata={"help": "retries of a request on 429, 5xx and connection errors"})
    backoff_sec: float = field(default=1.0, metadata={"help": "wait before the first retry; doubles each time"})
    endpoint: str = field(default="chat", metadata={
        "help": "chat: /chat/completions with the system prompt; completions: /completions with the dataset "
                "prompt alone, for a served dragonlab model (no chat template)"})

    def __post_init__(self):
        if self.endpoint not in ENDPOINTS:
            raise InputError(f"ChatModel.endpoint must be one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}")

    @property
    def url(self) -> str:
        path = "chat/completions" if self.endpoint == "chat" else "completions"
        return f"{self.base_url.rstrip('/')}/{path}"

    def write(self, prompts: list[str], *, n: int, seed: int) -> list[list[str]]:
        """n scripts per prompt, in order; each cut out of its reply by `script_of`."""
        return [[script_of(r) for r in self.replies(p, n=n, seed=seed)] for p in prompts]

    def replies(self, prompt: str, *, n: int, seed: int) -> list[str]:
        """n raw replies to one dataset prompt. A server that returns fewer choices than asked
        (many ignore `n`) is asked again for the rest, with the next seed so that a server
        honouring seeds does not repeat itself."""
        if self.endpoint == "chat":
            asked = {"messages": [{"role": "system", "content": system_prompt(target_of(prompt))},
                                  {"role": "user", "content": prompt}]}
        else:
            asked = {"prompt": prompt}
        out: list[str] = []
        while len(out) < n:
            body = {"model": self.model, **asked, "n": n - len(out), "temperature": self.temperature,
                    "max_tokens": self.max_tokens, "seed": seed + len(out)}
            response = self._post(body)
            choices = response.get("choices") if isinstance(response, dict) else None
            if not isinstance(choices, list) or not choices:  # also keeps this loop finite
                raise ChatError(f"POST {self.url}: the response has no choices: {_excerpt(json.dumps(response))}")
            out += [_content(c) for c in choices]
        return out[:n]

    def _post(self, body: dict) -> dict:
        """The JSON response to one request, retried with exponential backoff."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        for attempt in range(self.retries + 1):
            wait = self.backoff_sec * 2 ** attempt
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_sec) as response:
                    text = response.read().decode("utf-8", errors="replace")
                break
            except urllib.error.HTTPError as e:  # before URLError, its base class
                try:
                    detail = e.read().decode("utf-8", errors="replace")
                except OSError:
                    detail = ""
                failure = f"POST {self.url}: HTTP {e.code} {e.reason}: {_excerpt(detail)}"
                if e.code != 429 and e.code < 500:
                    raise ChatError(failure) from None
                wait = max(wait, _retry_after(e.headers.get("Retry-After")))
            except (urllib.error.URLError, http.client.HTTPException, OSError) as e:  # refused, reset, timed out
                failure = f"POST {self.url}: {getattr(e, 'reason', None) or e}"
            if attempt == self.retries:
                raise ChatError(f"{failure} (after {self.retries + 1} attempts)")
            time.sleep(wait)
        try:
            return json.loads(text)
        except ValueError:
            raise ChatError(f"POST {self.url}: the response is not JSON: {_excerpt(text)}") from None


def _content(choice) -> str:
    """A choice's message text (chat) or text (completions); "" when there is none (a refusal, a
    tool call)."""
    if not isinstance(choice, dict):
        return ""
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else choice.get("text")
    return content if isinstance(content, str) else ""


def _retry_after(value: str | None) -> float:
    """Seconds a 429/503 asks to wait (capped at a minute); 0 when it says nothing usable."""
    try:
        return min(60.0, max(0.0, float(value)))
    except (TypeError, ValueError):
        return 0.0


def _excerpt(text: str, limit: int = 300) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[:limit] + "..."
