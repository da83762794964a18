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

RL needs more: the tokens each draw was made among, the constrained policy's support, over which
it renormalises its log-probabilities (`dragonlab.learn.rl`). A recording constraint
(`record=True`) checks tokens most probable first until those checked hold all but `LEFTOVER`
(1e-3) of the probability, draws among the legal ones (`choose_among`: the restricted
distribution less its improbable tail, at several checks per token rather than one) and keeps
them: `candidates()`, their token ids per sequence and generated token.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Mapping

from dragonlab.core.errors import InputError
from dragonlab.learn.schedule_oracle import Replayer
from dragonlab.learn.script_follower import PRINTABLE, ScriptFollower

__all__ = ["LEFTOVER", "ScriptConstraint", "choose", "choose_among", "for_rows", "token_pieces"]

# Recording draws, the constraint checks tokens, most probable first, until those checked hold all
# but this much of the probability: the legal ones among them are what a draw is made among.
LEFTOVER = 1e-3


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
                 temperature: float = 1.0, top_p: float = 1.0, first_checks: int = 64, record: bool = False):
        """`greedy`, `temperature` and `top_p` are the generation's (`models.generate` sets them);
        `record`: draw as `choose_among` does, and keep what each draw was among (`candidates`)."""
        self.tokenizer, self.modules = tokenizer, dict(modules)
        self.greedy, self.temperature, self.top_p, self.first_checks = greedy, temperature, top_p, first_checks
        self.record = record
        self.pieces = token_pieces(tokenizer)
        eos = tokenizer.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])
        self.followers: list[ScriptFollower] = []
        self.endings: Counter = Counter()  # over the constraint's life
        self._ended: list[str] = []
        self.checks = 0  # candidate tokens checked, over all calls
        self._seen = None
        self._prompt_len = 0
        self._candidates: list[list[list[int] | None]] = []  # per call, per sequence (None: it had ended)
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
        among: list[list[int] | None] = []
        for row, follower in enumerate(self.followers):
            if follower.ending is not None:
                masked[row] = scores[row]  # finished: generate pads it, whatever is chosen
                among.append(None)
                continue
            token, among_row = self._allowed(follower, scores[row])
            masked[row, token] = scores[row, token]
            among.append(among_row)
        if self.record:
            self._candidates.append(among)
        return masked

    def candidates(self):
        """The last generation's draws (a recording constraint's): an int64 tensor (sequences,
        generated tokens, K), the ids of the tokens each draw was made among, padded with -1; all
        -1 where the sequence had ended (any token). K, the most a draw was made among, is at most
        `first_checks` whatever the vocabulary's size."""
        import torch

        if not self.record:
            raise ValueError("candidates() needs a recording constraint (record=True)")
        width = max((len(tokens) for among in self._candidates for tokens in among if tokens), default=1)
        ids = torch.full((len(self.followers), len(self._candidates), width), -1, dtype=torch.long)
        for step, among in enumerate(self._candidates):
            for row, tokens in enumerate(among):
                if tokens is not None:
                    ids[row, step, :len(tokens)] = torch.tensor(tokens)
        return ids

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
        self.followers, self._candidates = [], []
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

    def _allowed(self, follower: ScriptFollower, scores) -> tuple[int, list[int] | None]:
        """The token to write next, and (recording) the legal tokens it was drawn among; EOS alone
        at a dead end."""
        def ok(token: int) -> bool:
            self.checks += 1
            return follower.can_end() if token in self.eos else \
                self.pieces[token] is not None and follower.allows(self.pieces[token])

        if self.record and not self.greedy:
            token, among = choose_among(scores, ok, temperature=self.temperature, top_p=self.top_p,
                                        first_checks=self.first_checks)
        else:
            token = choose(scores, ok, greedy=self.greedy, temperature=self.temperature, top_p=self.top_p,
                           first_checks=self.first_checks)
            among = None if token is None else [token]
        if token is None:  # nothing can continue this line, so the script ends here
            follower.dead_end = True
            token = sorted(self.eos)[0]
            among = [token]
        return token, among


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
        probs = _probabilities(scores, temperature, top_p)
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


def choose_among(scores, ok, *, temperature: float = 1.0, top_p: float = 1.0, first_checks: int = 64,
                 leftover: float = LEFTOVER) -> tuple[int | None, list[int]]:
    """A token to write, drawn as `choose` draws it, and the accepted tokens it was drawn among;
    (None, []) if `ok` accepts none.

    Tokens are checked most probable first (at `temperature`, within the top-p nucleus) until
    those checked hold all but `leftover` of the probability, or, once one is accepted, until
    `first_checks` were checked; the draw is among the accepted ones in proportion to their
    probability. Where none of those is accepted, the first accepted one further down (alone)."""
    import torch

    order = torch.argsort(scores, descending=True).tolist()
    probs = _probabilities(scores, temperature, top_p)
    accepted: list[int] = []
    checked_mass = 0.0
    for i, token in enumerate(order):
        if accepted and (checked_mass >= 1.0 - leftover or i >= first_checks or probs[token] == 0):
            break
        if ok(token):
            accepted.append(token)
        checked_mass += float(probs[token])
    if not accepted:
        return None, []
    weights = probs[accepted]
    if weights.sum() == 0:
        return accepted[0], accepted[:1]
    return accepted[int(torch.multinomial(weights, 1))], [t for t, w in zip(accepted, weights.tolist()) if w > 0]


def _probabilities(scores, temperature: float, top_p: float):
    """The sampling distribution: softmax at `temperature`, zero outside the top-p nucleus (as
    transformers' TopPLogitsWarper keeps it)."""
    import torch

    probs = torch.softmax(scores.double() / max(temperature, 1e-6), -1)
    if top_p < 1.0:
        order = torch.argsort(probs, descending=True)
        probs[order[(torch.cumsum(probs[order], 0) - probs[order]) >= top_p]] = 0.0
    return probs


def for_rows(tokenizer, rows, workloads: Mapping, **options) -> ScriptConstraint:
    """A constraint for dataset rows (each with "prompt" and "workload", a key of `workloads`);
    `options` are ScriptConstraint's."""
    return ScriptConstraint(tokenizer, {row["prompt"]: workloads[row["workload"]].mod for row in rows}, **options)
