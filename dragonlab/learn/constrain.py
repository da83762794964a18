"""Constrained decoding: every script a model writes decodes, applies and keeps its decisions.

Contract: `ScriptConstraint(tokenizer, modules)` is a transformers logits processor; `modules`
maps each prompt (exactly as tokenized) to the IRModule its script schedules. Passed to
`generate(logits_processor=[constraint])`, it leaves one legal token unmasked per sequence and
step, and `finish(completion_ids)` then gives scripts of complete lines that decode, apply and
keep their decisions. `for_rows` builds one for dataset rows; `choose` is its token choice.

A `ScriptFollower` per sequence (`dragonlab.learn.script_follower`) tracks the script being
written and says which text may come next; one `Replayer` (`dragonlab.learn.schedule_oracle`), a
worker process shared by the followers, applies their lines. Where the follower allows no token
(a *dead end*), the script ends, and, as when `max_new_tokens` runs out, the unfinished last line
is dropped, so what comes back is always complete lines that apply. `ScriptConstraint.endings`
counts how scripts ended: "eos", "dead end" or "length".

Greedy decoding checks tokens in order of probability and takes the first legal one. Sampling
draws a token from the model's distribution (at the generation's temperature, within its top-p
nucleus) and checks it; a refused token is removed and another drawn, so what is sampled is
exactly the model's distribution restricted to legal tokens, at the cost of one check per draw.
The processor leaves only the chosen token unmasked. Only tokens whose text is printable ASCII
and newlines can be written, as in every script the encoder writes.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping

from dragonlab.core.errors import InputError
from dragonlab.learn.schedule_oracle import Replayer
from dragonlab.learn.script_follower import PRINTABLE, ScriptFollower

__all__ = ["ScriptConstraint", "choose", "for_rows", "token_pieces"]


def token_pieces(tokenizer) -> list[str | None]:
    """The text each token id adds when it follows another token (None: special or not ASCII)."""
    base = tokenizer.encode("a", add_special_tokens=False)[:1]
    head = tokenizer.decode(base, clean_up_tokenization_spaces=False)
    special = set(tokenizer.all_special_ids)
    texts = tokenizer.batch_decode([base + [i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False)
    pieces: list[str | None] = []
    for i, text in enumerate(texts):
        piece = text[len(head):] if text.startswith(head) else None
        pieces.append(piece if piece and i not in special and set(piece) <= PRINTABLE else None)
    return pieces


class ScriptConstraint:
    """A transformers LogitsProcessor that keeps every sequence a legal script of its workload.

    `modules` maps each prompt (exactly as tokenized) to the IRModule its script schedules.
    Pass it to `generate(logits_processor=[constraint])`; `finish(completion_ids)` then gives
    the scripts. One instance serves generation after generation (a new one is recognised
    because its input is not the last one plus a token).
    """

    def __init__(self, tokenizer, modules: Mapping[str, object], *, greedy: bool = False,
                 temperature: float = 1.0, top_p: float = 1.0, first_checks: int = 64):
        """`greedy`, `temperature` and `top_p` are the generation's (`models.generate` sets them)."""
        self.tokenizer, self.modules = tokenizer, dict(modules)
        self.greedy, self.temperature, self.top_p, self.first_checks = greedy, temperature, top_p, first_checks
        self.pieces = token_pieces(tokenizer)
        eos = tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])
        self.followers: list[ScriptFollower] = []
        self.endings: Counter = Counter()  # over the constraint's life
        self._ended: list[str] = []
        self.checks = 0  # candidate tokens checked, over all calls
        self._seen = None
        self._prompt_len = 0
        self.replayer = Replayer()  # one worker applies the lines of every sequence

    def close(self) -> None:
        self.replayer.close()

    def __enter__(self) -> "ScriptConstraint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __call__(self, input_ids, scores):
        import torch

        if not self._continues(input_ids):
            self._start(input_ids)
        else:
            for follower, token in zip(self.followers, input_ids[:, -1].tolist()):
                self._feed(follower, token)
        self._seen = input_ids.clone()
        masked = torch.full_like(scores, -math.inf)
        for row, follower in enumerate(self.followers):
            if follower.ending is not None:
                masked[row] = scores[row]  # finished: generate pads it, whatever is chosen
                continue
            allowed = self._allowed(follower, scores[row])
            masked[row, allowed] = scores[row, allowed]
        return masked

    def finish(self, completion_ids) -> list[str]:
        """The scripts of the sequences whose generated tokens are `completion_ids` (one row per
        sequence, as the last call saw them plus what was generated after it)."""
        rows = completion_ids.tolist()
        for follower, ids in zip(self.followers, rows):
            for token in ids[self._seen.shape[1] - self._prompt_len:] if self._seen is not None else ():
                self._feed(follower, token)
            follower.end("length")
            self.endings[follower.ending] += 1
            self._ended.append(follower.ending)
        self._seen = None  # the next call starts a new generation
        return [f.script() for f in self.followers]

    def take_endings(self, n: int) -> list[list[str]]:
        """How each script finished since the last call ended, n per prompt (as `generate`
        returns them), and forget them."""
        ends, self._ended = self._ended, []
        return [ends[i:i + n] for i in range(0, len(ends), n)]

    def _continues(self, input_ids) -> bool:
        import torch

        seen = self._seen
        return (seen is not None and input_ids.shape[0] == seen.shape[0] and input_ids.shape[1] == seen.shape[1] + 1
                and torch.equal(input_ids[:, :-1], seen))

    def _start(self, input_ids) -> None:
        self._prompt_len = input_ids.shape[1]
        self.followers = []
        for ids in input_ids.tolist():
            prompt = self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            if prompt not in self.modules:
                raise InputError(f"constrained decoding: no workload for the prompt {prompt[:120]!r}...")
            self.followers.append(ScriptFollower(self.modules[prompt], self.replayer))

    def _feed(self, follower: ScriptFollower, token: int) -> None:
        if follower.ending is not None:
            return
        if token in self.eos:
            follower.end("eos")
        else:
            follower.advance(self.pieces[token])

    def _allowed(self, follower: ScriptFollower, scores) -> list[int]:
        """The one token to write next; EOS alone at a dead end."""
        def ok(token: int) -> bool:
            self.checks += 1
            return follower.can_end() if token in self.eos else \
                self.pieces[token] is not None and follower.allows(self.pieces[token])

        token = choose(scores, ok, greedy=self.greedy, temperature=self.temperature, top_p=self.top_p,
                       first_checks=self.first_checks)
        if token is None:  # nothing can continue this line, so the script ends here
            follower.dead_end = True
            return sorted(self.eos)[:1]
        return [token]


def choose(scores, ok, *, greedy: bool, temperature: float = 1.0, top_p: float = 1.0,
           first_checks: int = 64) -> int | None:
    """The token to write, among those `ok(token)` accepts; None if it accepts none.

    Greedy: the most probable one. Sampling: a draw from the model's distribution (at
    `temperature`, within the top-p nucleus) restricted to accepted tokens, by rejection: draw,
    check, and on a refusal remove the token and draw again. After `first_checks` refusals
    (the accepted tokens hold almost none of the probability; each draw costs a pass over the
    vocabulary), or when no token is left to draw, the most probable accepted one of the rest."""
    import torch

    refused: set[int] = set()
    if not greedy:
        probs = torch.softmax(scores.double() / max(temperature, 1e-6), -1)
        if top_p < 1.0:  # the nucleus, as transformers' TopPLogitsWarper keeps it
            order = torch.argsort(probs, descending=True)
            probs[order[(torch.cumsum(probs[order], 0) - probs[order]) >= top_p]] = 0.0
        while len(refused) < first_checks and probs.sum() > 0:
            token = int(torch.multinomial(probs, 1))
            if ok(token):
                return token
            refused.add(token)
            probs[token] = 0.0
    first = torch.topk(scores, min(first_checks, scores.shape[0])).indices.tolist()
    seen = set(first)
    rest = (t for t in torch.argsort(scores, descending=True).tolist() if t not in seen)
    return next((t for t in itertools.chain(first, rest) if t not in refused and ok(t)), None)


def for_rows(tokenizer, rows, workloads: Mapping) -> ScriptConstraint:
    """A constraint for dataset rows (each with "prompt" and "workload", a key of `workloads`)."""
    return ScriptConstraint(tokenizer, {row["prompt"]: workloads[row["workload"]].mod for row in rows})
