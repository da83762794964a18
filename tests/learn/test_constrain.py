"""Constrained decoding: real scripts always pass, broken ones never do, and a model's output under
constraints always decodes and applies, whatever the model."""

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dragonlab.core import codec
from dragonlab.core.targets import get_target
from dragonlab.core.errors import InputError
from dragonlab.evaluation.evaluate import Evaluator
from dragonlab.evaluation.workers import Limits
from dragonlab.learn import dataset, models
from dragonlab.learn.attempts import sample_and_evaluate, summary
from dragonlab.learn.constrain import ScriptConstraint, choose, choose_among, for_rows
from dragonlab.learn.schedule_oracle import Replayer, tile_ok
from dragonlab.learn.script_follower import ScriptFollower
from dragonlab.testing import trace_corpus


def feed(follower: ScriptFollower, script: str) -> str | None:
    """Write `script` word by word; the first piece refused, or None."""
    for line in script.rstrip("\n").split("\n"):
        words = line.split(" ")
        for piece in [w + " " for w in words[:-1]] + [words[-1] + "\n"]:
            if not follower.allows(piece):
                return follower.open + piece
            follower.advance(piece)
    return None


def test_scripts_that_search_wrote_are_never_refused(corpus, data):
    """Tuned samples on llvm and cuda (tensor cores included; each holds its design space's
    instructions and a post-processing part) and the dataset's scripts: every prefix is allowed,
    and the follower's script is the script. On llvm the design part of every space follows a
    sketch to its end; the whole trace, followed without the sketch rule (a model writes design
    parts only), adds the post-processing part's rules, which every llvm space of a family
    shares: its first space stands for the rest (the cuda samples are whole traces)."""
    dsd, workloads = dataset.load(data)
    cases = [(s.name, s.mod, codec.encode(s.trace), s.target) for s in corpus if s.source == "post"]
    cases += [(r["name"], workloads[r["workload"]].mod, text, "llvm") for r in dsd["train"]
              for text in (r["completion"], r["input_script"]) if text]
    # The first tensorize imports TVM's tensor intrinsics in the worker: minutes on a loaded 2-core
    # machine before that import was made cheap (dragonlab.core.tensor_intrinsics), past the
    # default 180 s limit, which would count as a refusal.
    replayer = Replayer(Limits(timeout_sec=900.0, memory_bytes=4 << 30))
    wholes = set()  # the llvm families whose whole trace was followed
    try:
        for name, mod, script, target_kind in cases:
            design, whole = codec.encode(codec.design_part(codec.decode(script))), script.rstrip("\n")
            texts = {whole: design == whole}  # a design part (every dataset script): with the sketch rule
            if target_kind == "llvm":  # elsewhere no sketch rule, and the design part is a prefix of the whole
                family = name.split("-")[0]
                if design != whole and family in wholes:
                    texts = {}
                elif design != whole:
                    wholes.add(family)
                texts[design] = True
            for text, sketches in texts.items():
                follower = ScriptFollower(mod, replayer, target_kind=target_kind, sketches=sketches)
                assert feed(follower, text) is None, name
                assert follower.can_end(), name
                follower.end("eos")
                assert follower.script() == text.rstrip("\n"), name
    finally:
        replayer.close()
    assert replayer.crashes == 0


MATMUL_PREFIX = "get C\nget root\nloops b0 >3\ntile l2 =[4,16]\nsplit l2 v5 v6"


@pytest.fixture(scope="module")
def matmul_follower():
    """A follower on a 64x64x64 matmul after `get C`, `get root`, `loops b0 >3`, a tile and its split
    (not a design-space sketch: these tests check each rule on its own, the sketch rule aside)."""
    follower = ScriptFollower(trace_corpus.matmul(64), sketches=False)
    assert feed(follower, MATMUL_PREFIX) is None
    yield follower
    follower.replayer.close()


@pytest.fixture(scope="module")
def split_follower(matmul_follower):
    """The same after `postproc`: in an llvm design part a split only follows its tile (below);
    in the post-processing part the factors' own checks decide."""
    follower = ScriptFollower(trace_corpus.matmul(64), matmul_follower.replayer, sketches=False)
    assert feed(follower, MATMUL_PREFIX + "\npostproc") is None
    return follower


@pytest.mark.parametrize("piece, as_prefix", [
    ("get D", True),                  # no such block
    ("loops b0 >5", True),            # it has 4 loops (3, one of them split in two)
    ("loops b0 >0", True),            # a zero count is not written
    ("par l2", True),                 # l2 was split: the loop is gone
    ("par b0", True),                 # a block where a loop is wanted
    ("par l9", True),                 # never defined
    ("tile l3 =[3,", True),           # 3 does not divide 64
    ("tile l3 =[4,4]", True),         # the product is 16, not 64
    ("tile l3 16 =[1,32]", True),     # the innermost factor is above max_innermost_factor
    ("tile l3 =[64]", True),          # a perfect tile has at least two factors
    ("cat [1,2,3] =3", True),         # index out of range
    ("ann b0 made_up_key 1", True),   # not an annotation key MetaSchedule writes
    ("unann b0 par", True),           # nothing to remove
    ("inline b1", True),              # neither block can be inlined
    ("par l7 =1", True),              # a decision on a primitive that takes none
    ("split l3 v5 v6 ; true false 1", True),  # too many attributes
    ("fuse l8 l7", False),            # inner before outer: only applying tells
    ("loc b1", True),                 # the root block has no compute location (a dead end once written)
    ("reorder l7 l8 l7", True),       # a loop named twice
    ("fuse l3..4 l4", True),          # the same, in a run
    # Numbers stay inside the allowlist's ranges as they are written (each was a dead end).
    ("tile l3 64 9", True),           # at most 8 factors
    ("tile l3 65537", True),          # max_innermost_factor at most 65536
    ("tile l3 00", True),             # no leading zero
    ("tile l3 16 1 =", True),         # one factor, 64, is above the innermost bound 16
    ("tile l3 =[1,1,1,1,1,1,1,1,", True),  # a ninth factor
    ("split l3 nan", True),           # a factor is a positive integer, a sampled variable or None
    ("split l3 0", True),
    ("split l3 2 2 2 2 2 2 2 2 2", True),  # at most 8 factors
    ("rfactor l7 21474836470", True),  # beyond 32 bits
    ("rfactor l7 4e+", True),         # a float where an integer goes
    ("split l3 na", True),            # nan, where only None is a keyword
    ('split l3 "SSRSRS"', True),
    ("split l3 [0", True),
    ("split l3 v5 1 1 1 1 1 1 1 v", True),  # a ninth factor being named
    ("split l3 v5..6 1 1 1 1 1 1 2", True),
    ("split l3 v5 1 1 1 1 1 1 v5..", True),  # a run names two at least
    ("cache_write b0 0 global_rule", True),  # not a storage scope
    ("reorder l3 l4 l7 l8 l", True),  # every loop is named: none is left to begin with l
    ("rfactor l7 17", True),          # a factor axis beyond any buffer's rank
    ("rfactor l7 1", True),           # l7 is not a reduction loop: no axis makes it apply
    ("split l3 v5 v6 ; true t", True),  # MetaSchedule never disables predication
    ("ann b0 par 65537", True),       # an annotation's integer stays within 2**16
    ("ann b0 layout_rewrite_preproc", True),  # a key the post-processors write, only after them
    ("cat 4", True),                  # candidates are a list
    ("split l3 None None", True),     # only one factor can be inferred
    ("split l3 1 1 1 1 1 1 1 2 ", True),  # eight factors that multiply to 2, not 64
    ("split l3 4 ;", True),           # a product of 4, and the list has ended
    ("split l3 v5 ;", True),          # v5 is 4 (its tile's decision)
    ("split l3 1 1 1 1 1 1 1 v5", True),  # eight factors, the last one a name that cannot grow
    ("split l3 1 1 1 1 1 1 1 v5..", True),  # a run names two at least: nine factors
    ("split l3 v5 7743336", True),    # 4 x 7,743,336 iterations of a loop of 64: predicated away
    ("split l3 None 128", True),
    ("split l3 v5 v6 2 ;", True),     # 128, twice the extent
    ("reorder_iters b0", True),       # an instruction MetaSchedule never writes
    ("tensorize b0", True),           # one it writes only for cuda
    ("cat [0,64,6444553650", True),   # a candidate beyond 32 bits
    ("split l3 1 1 1 1 1 1 1 2", True),  # the eighth factor must become 64 to 127: none begins with 2
    ("split l3 1 1 1 1 1 1 1 v", True),  # nor is any sampled variable (v5 is 4, v6 16)
    ("ann b0 tiling 16", True),       # a tiling structure is a quoted string of S and R
    ('ann b0 tiling ""', True),
    # Each of these was a dead end of the demo model (the line could only end in a refusal).
    ('ann b0 tiling " ', True),       # a space inside a quoted structure (it wrote spaces to the line's end)
    ("ann b0 intrin", True),          # a tensor intrinsic: MetaSchedule writes one only for cuda
    ("reorder l4..", True),           # a run from l4: l5 is no loop
    ("split l3 8 4 v", True),         # 32 x v5 (4) or x v6 (16) is twice the extent or more
    ("cache_write b1", True),         # the root block writes no buffer to cache
    ("cache_write b0 5", True),       # C writes one buffer: index 0
    ("cache_write b0 0 global [6", True),  # consumers are block variables
])
def test_follower_refuses_what_cannot_apply_or_would_be_repaired(matmul_follower, split_follower, piece, as_prefix):
    follower = split_follower if piece.startswith("split") else matmul_follower
    assert not follower.allows(piece + "\n")
    assert follower.allows(piece) != as_prefix


@pytest.mark.parametrize("piece", ["loops b0", "split l3 4 16 ;", "split l3 v5 None", "split l3 v5 v6",
                                   "tile l3 =[", "tile l3 =[2,", "tile l3 =[2,2,4,4]", "tile l3 =[1,6",
                                   "cat [1,2,3] =2", "par l7", "ann b0 par 4", "vec l8", "fuse l7 l8", "get roo",
                                   "reorder l7..", "cache_write b0 0 glob", "cache_write b0 0 global [b"])
def test_follower_allows_what_can_still_apply(matmul_follower, split_follower, piece):
    assert (split_follower if piece.startswith("split") else matmul_follower).allows(piece)


def test_the_look_ahead_finds_the_first_candidate_that_applies_in_the_order_given(matmul_follower):
    """l2 was split into l7 (outer) and l8; a fuse of them applies only outer first."""
    prefix = codec.decode(MATMUL_PREFIX)
    line = {text: codec.decode(f"{MATMUL_PREFIX}\n{text}")[0][-1] for text in
            ("par l2", "fuse l8 l7", "fuse l7 l8", "par l7")}
    mod, replayer = matmul_follower.mod, matmul_follower.replayer
    assert replayer.first_applying(mod, prefix, list(line.values())) == 2  # not 3, which applies too
    assert replayer.first_applying(mod, prefix, [line["par l7"], line["fuse l7 l8"]]) == 0
    assert replayer.first_applying(mod, prefix, [line["par l2"], line["fuse l8 l7"]]) is None


def test_the_worker_is_asked_once_per_question_and_a_crash_is_asked_again(monkeypatch):
    """Followers sharing a replayer share its answers: a second script with the first's lines
    asks the worker nothing. A crash's "does not apply" is not kept: the next ask goes through."""
    from dragonlab.evaluation.workers import WorkerError

    mod, replayer = trace_corpus.matmul(64), Replayer()
    try:
        first = ScriptFollower(mod, replayer, sketches=False)
        assert feed(first, MATMUL_PREFIX) is None and replayer.asked > 0
        asked = replayer.asked
        second = ScriptFollower(mod, replayer, sketches=False)
        assert feed(second, MATMUL_PREFIX) is None and replayer.asked == asked
        assert second.state.facts == first.state.facts

        call, crashed = replayer.worker.call, []

        def crash_once(*args):
            if not crashed:
                crashed.append(args)
                raise WorkerError("killed", None)
            return call(*args)

        monkeypatch.setattr(replayer.worker, "call", crash_once)
        prefix = codec.decode(MATMUL_PREFIX + "\npar l7")
        assert replayer.facts(mod, prefix) is None and replayer.crashes == 1
        assert replayer.facts(mod, prefix) is not None and replayer.asked == asked + 2
        assert replayer.facts(mod, prefix) is not None and replayer.asked == asked + 2
    finally:
        replayer.close()


def test_an_llvm_design_part_tiles_and_splits_as_metaschedule_does():
    """2 or 4 factors, and right after a tile, its loop's split by exactly those factors, as the
    codec writes it; no split anywhere else (post-processing aside)."""
    follower = ScriptFollower(trace_corpus.matmul(64), sketches=False)
    try:
        assert feed(follower, "get C\nloops b0 >3\n") is None
        assert not follower.allows("tile l1 =[2,2,16]\n") and not follower.allows("tile l1 =[1,1,1,4,16]\n")
        assert follower.allows("tile l1 =[2,32]\n") and follower.allows("tile l1 =[1,2,2,16]\n")
        assert not follower.allows("split l1 v4 v5\n")  # no tile yet
        follower.advance("tile l1 =[4,16]\n")
        assert not follower.can_end() and not follower.allows("ann b0 par 32\n")  # the split comes first
        assert not follower.allows("split l1 v4 16\n") and not follower.allows("split l1 v5 v4\n")
        assert follower.allows("spl") and follower.allows("split l1 v4 v5\nann b0 par 32\n")
        follower.advance("split l1 v4 v5\n")
        assert follower.can_end() and not follower.allows("split l1")
    finally:
        follower.replayer.close()


def test_a_compute_location_is_one_tvm_keeps():
    follower = ScriptFollower(trace_corpus.matmul_bias_relu(64), sketches=False)
    assert feed(follower, "get D") is None
    valid = follower._valid_locations(follower.state, "b0")
    assert -1 in valid and -2 in valid  # inline and root are always there for an elementwise block
    assert not follower.allows(f"loc b0 ={max(valid) + 1}\n")
    assert follower.allows(f"loc b0 ={max(valid)}\n")
    follower.replayer.close()


@settings(max_examples=300, deadline=None)
@given(extent=st.sampled_from([1, 2, 6, 12, 64, 96, 97, 128]), n=st.sampled_from([None, 2, 3, 4]),
       inner=st.sampled_from([0, 1, 4, 16, 64]), text=st.text("0123456789,[]", max_size=10))
def test_a_tile_prefix_that_is_allowed_can_always_be_finished(extent, n, inner, text):
    """No dead ends: an allowed prefix can be finished into a closed, allowed decision."""
    prefix = "[" + text
    if tile_ok(prefix, extent, n, inner):
        assert _finishable(prefix, extent, n, inner, len(prefix) + 24), prefix


def _finishable(prefix, extent, n, inner, limit) -> bool:
    if prefix.endswith("]"):
        return True
    return len(prefix) < limit and any(_finishable(prefix + c, extent, n, inner, limit)
                                       for c in "]1248,3567890" if tile_ok(prefix + c, extent, n, inner))


def test_constrained_generation_from_an_untrained_model_decodes_and_applies(tiny, data):
    """A freshly initialised model writes noise; under constraints it is still a script."""
    _, tokenizer = models.load(tiny[0].model_dir)
    model = models.scratch_model(models.PRESETS["scratch-tiny"], tokenizer, max_length=2048, seed=1)
    dsd, workloads = dataset.load(data)
    rows = dsd["train"].to_list()[:2]
    with for_rows(tokenizer, rows, workloads) as constraint:
        out = models.generate(model, tokenizer, [r["prompt"] for r in rows], n=2, temperature=1.0,
                              max_new_tokens=48, seed=0, constraint=constraint)
    for row, scripts in zip(rows, out):
        for script in scripts:
            codec.apply(script, workloads[row["workload"]].mod)  # raises if it does not decode or apply
    assert sum(constraint.endings.values()) == 4
    plain = models.generate(model, tokenizer, [r["prompt"] for r in rows], n=2, temperature=1.0,
                            max_new_tokens=48, seed=0)
    assert not any(_decodes(s) and s for x in plain for s in x)  # the same model, unconstrained: noise


def _decodes(script: str) -> bool:
    try:
        codec.decode(script)
        return True
    except codec.CodecError:
        return False


def test_constraints_leave_a_trained_models_valid_scripts_unchanged(tiny, data):
    model, tokenizer = models.load(tiny[0].model_dir)
    dsd, workloads = dataset.load(data)
    rows = dsd["train"].to_list()
    prompts = [r["prompt"] for r in rows]
    plain = models.generate(model, tokenizer, prompts, temperature=0)
    with for_rows(tokenizer, rows, workloads) as constraint:
        constrained = models.generate(model, tokenizer, prompts, temperature=0, constraint=constraint)
        kept = 0
        for row, (a,), (b,) in zip(rows, plain, constrained):
            if feed(ScriptFollower(workloads[row["workload"]].mod, constraint.replayer), a) is None:  # valid as written
                assert a.rstrip("\n") == b, row["name"]
                kept += 1
    assert kept >= len(rows) // 2


def test_constrained_attempts_all_pass_decode_and_apply_and_record_how_they_ended(tiny, data, tmp_path):
    model, tokenizer = models.load(tiny[0].model_dir)
    dsd, workloads = dataset.load(data)
    with Evaluator("cpu") as evaluator:
        attempts = sample_and_evaluate(model, tokenizer, evaluator, dsd, workloads, split="train", n=2,
                                       temperature=1.0, limit=2, max_new_tokens=160, out=tmp_path / "a.jsonl",
                                       progress=False, constrained=True)
    assert len(attempts) == 4
    assert all(a.evaluation.stage not in ("decode", "apply") for a in attempts)
    assert all(a.ending in ("eos", "dead end", "length") for a in attempts)
    row = next(r for r in summary(attempts) if r["task"] == "all")
    assert row["dead_ends"] + row["cut_at_length"] == sum(a.ending != "eos" for a in attempts)


def test_a_prompt_without_a_workload_is_a_clear_error(tiny):
    _, tokenizer = models.load(tiny[0].model_dir)
    constraint = ScriptConstraint(tokenizer, {})
    ids = tokenizer(["task: construction\n"], return_tensors="pt")["input_ids"]
    with pytest.raises(InputError, match="no workload for the prompt 'task: construction"):
        constraint(ids, torch.zeros(1, len(tokenizer)))


def test_sampling_draws_from_the_models_distribution_restricted_to_legal_tokens():
    torch.manual_seed(0)
    probs = [0.4, 0.3, 0.2, 0.1]
    scores, legal = torch.tensor(probs).log(), {1, 2, 3}
    assert choose(scores, legal.__contains__, greedy=True) == 1
    n = 6000
    for draw in (lambda **kw: choose(scores, legal.__contains__, greedy=False, **kw),
                 lambda **kw: choose_among(scores, legal.__contains__, **kw)[0]):
        draws = Counter(draw() for _ in range(n))
        assert set(draws) == legal
        for token in legal:  # p restricted to legal tokens, renormalised (4.6 standard errors of slack)
            assert abs(draws[token] / n - probs[token] / 0.6) < 0.03, (token, draws)
        cooler = Counter(draw(temperature=0.5) for _ in range(n))
        assert abs(cooler[1] / n - 0.09 / 0.14) < 0.03, cooler  # p^2 restricted: .09 / (.09 + .04 + .01)
        # the top-p nucleus of 0.5 is tokens 0 and 1, and 1 is its only legal token
        assert {draw(top_p=0.5) for _ in range(50)} == {1}
    assert choose(scores, {3}.__contains__, greedy=False, top_p=0.5) == 3  # none legal in it: the best of the rest
    assert choose_among(scores, {3}.__contains__, top_p=0.5) == (3, [3])
    assert choose_among(scores, legal.__contains__, top_p=0.5)[1] == [1]  # the draw was among 1 alone
    assert choose(scores, lambda token: False, greedy=False) is None
    assert choose(scores, lambda token: False, greedy=True) is None
    assert choose_among(scores, lambda token: False) == (None, [])


def test_a_recorded_draw_is_among_the_legal_tokens_that_hold_all_but_the_leftover():
    """Recording, tokens are checked most probable first until the checked ones hold all but
    `leftover`: the improbable tail is never checked, and what the draw was among is reported."""
    probs = torch.tensor([0.9, 0.0995, 0.0004, 0.0001])
    checked = []

    def ok(token):
        checked.append(token)
        return token != 1

    assert choose_among(probs.log(), ok) == (0, [0]) and checked == [0, 1]  # 0.9995 checked: not 2 and 3
    checked.clear()
    assert choose_among(probs.log(), ok, leftover=1e-5)[1] == [0, 2, 3] and checked == [0, 1, 2, 3]
    checked.clear()  # once one is legal, no more than first_checks tokens are checked
    assert choose_among(probs.log(), ok, leftover=1e-5, first_checks=2)[1] == [0] and checked == [0, 1]


def test_the_constraint_records_what_each_draw_was_made_among(tiny, data):
    """A recording constraint's `candidates()` are token ids per sequence and generated token: the
    token written is among them, they are only tokens the follower allowed, and a sequence that
    ended has none (any token). A constraint that does not record refuses to tell."""
    model, tokenizer = models.load(tiny[0].model_dir)
    dsd, workloads = dataset.load(data)
    rows = dsd["train"].select(range(1)).to_list()
    torch.manual_seed(0)
    with for_rows(tokenizer, rows, workloads, record=True) as constraint:
        ids = tokenizer([rows[0]["prompt"]] * 2, return_tensors="pt")["input_ids"]
        out = model.generate(ids, do_sample=True, max_new_tokens=48, logits_processor=[constraint],
                             pad_token_id=tokenizer.pad_token_id)
        among = constraint.candidates()
        written = out[:, ids.shape[1]:]
        assert among.shape[:2] == (2, written.shape[1]) and 1 <= among.shape[2] <= constraint.first_checks
        sizes = (among >= 0).sum(-1)
        live = sizes > 0  # the sequence had not ended
        assert (among == written.unsqueeze(-1)).any(-1)[live].all()  # every token written was a candidate
        assert live[:, 0].all() and (sizes < 20).all()
        assert (sizes == 1).any()  # the grammar forces some tokens: they will carry no gradient
        follower = ScriptFollower(workloads[rows[0]["workload"]].mod, constraint.replayer)
        for step, token in enumerate(written[0].tolist()):  # each candidate was legal where it was offered
            if token in constraint.eos or not live[0, step]:
                break
            for t in among[0, step][among[0, step] >= 0].tolist():
                assert t in constraint.eos or follower.allows(constraint.pieces[t])
            follower.advance(constraint.pieces[token])
    with pytest.raises(ValueError, match="record=True"):
        ScriptConstraint(tokenizer, {}).candidates()


def test_training_modules_import_no_tvm():
    """sft and rl import the constraint only when they generate with it: TVM stays out until then."""
    root = str(Path(codec.__file__).parents[2])  # this checkout, whatever is installed
    code = f"import sys; sys.path.insert(0, {root!r}); import dragonlab.learn.sft, dragonlab.learn.rl; " \
           "assert 'tvm' not in sys.modules, 'importing sft or rl imported TVM'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_sampled_value_of_zero_is_no_split_factor():
    """A categorical's value can be 0 (MetaSchedule's unroll steps begin with it): as a split factor
    it splits nothing, and the follower says so instead of dividing by it. (After `postproc`: in an
    llvm design part no split but a tile's own is written at all.)"""
    follower = ScriptFollower(trace_corpus.matmul(64), sketches=False)
    assert feed(follower, "get C\nget root\nloops b0 >3\ncat [0,16] =0\npostproc") is None
    assert not follower.allows("split l2 v5 ")
    assert not follower.allows("split l2 1 1 1 1 1 1 v5 v")
    follower.replayer.close()


def test_an_llvm_script_is_one_of_the_design_space_sketches():
    """On llvm the follower keeps to MetaSchedule's design-space sketches: a script that is none
    (the short one a barely trained model writes, leaving the kernel unscheduled) is refused, and
    a script ends only where a sketch ends; its decisions are its own."""
    mod = trace_corpus.matmul(64)
    follower = ScriptFollower(mod)
    try:
        sketches = follower.replayer.sketches(mod, get_target("cpu").config)
        assert len(sketches) == len(follower._sketches) >= 1
        first = sketches[0].splitlines()
        assert not follower.allows("get root\nann b0 par 32\n") and follower.allows(first[0] + "\n")
        assert ScriptFollower(mod, follower.replayer, sketches=False).allows("get root\nann b0 par 32\n")
        tile = next(i for i, line in enumerate(first) if line.startswith("tile "))
        assert feed(follower, "\n".join(first[:tile])) is None
        assert not follower.can_end()  # a sketch's first lines are no script
        loop, written = first[tile].split(" ")[1], json.loads(first[tile].split(" =")[1])
        other = [math.prod(written)] + [1] * (len(written) - 1)
        other = other if other != written else other[::-1]
        line = f"tile {loop} ={json.dumps(other).replace(' ', '')}"  # another decision than the sketch's
        assert feed(follower, line) is None
        rest = "\n".join(first[tile + 1:])  # the split names the tile's factors: the sketch's lines stay
        assert feed(follower, rest) is None, rest
        script = "\n".join(first[:tile] + [line])
        follower.end("eos")
        assert follower.script() == script + "\n" + rest and follower.ending == "eos"
        # a tile has as many factors as the sketch's: a reduction loop's 2, where llvm's rule alone
        # would let a third begin (a dead end on a loop of extent 3, once the product is wrong)
        two = next(i for i, line in enumerate(first) if line.startswith("tile ") and line.count(",") == 1)
        head, loop = "\n".join(first[:two]), first[two].split(" ")[1]
        sketched, free = ScriptFollower(mod, follower.replayer), ScriptFollower(mod, follower.replayer, sketches=False)
        assert feed(sketched, head) is None and feed(free, head) is None
        assert free.allows(f"tile {loop} =[1,1,") and not sketched.allows(f"tile {loop} =[1,1,")
    finally:
        follower.replayer.close()
