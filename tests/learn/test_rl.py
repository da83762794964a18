"""RL with the shaped reward: the reward wiring on real evaluations, GRPO from the tiny SFT
model with its components logged and a resume, and the RL-vs-SFT comparison's arithmetic."""

import math
import shutil

import pytest

from dragonlab.cli import main
from dragonlab.core.errors import InputError
from dragonlab.evaluation.evaluate import OK, Evaluation, Evaluator
from dragonlab.evaluation.reward import RewardConfig, reward
from dragonlab.learn import dataset
from dragonlab.learn.attempts import Attempt
from dragonlab.core.jsonl import read_lines
from dragonlab.learn.rl import RLConfig, ShapedReward, read_rollouts, train
from dragonlab.reporting.compare import ModelComparison, PairTiming, compare, sign_test


def test_shaped_reward_judges_each_script_and_logs_the_components(data):
    dsd, workloads = dataset.load(data)
    rows = dsd["train"].to_list()
    construction = next(r for r in rows if r["task"] == "construction")
    refinement = next(r for r in rows if r["task"] == "refinement")
    picked = [construction, construction, refinement]
    completions = [construction["completion"], "get C\nloops b0 >3\ntile l9 =[1]", refinement["completion"]]
    logged = {}
    with Evaluator("cpu") as evaluator:
        fn = ShapedReward(evaluator, workloads)
        rewards = fn([r["prompt"] for r in picked], completions, workload=[r["workload"] for r in picked],
                     task=[r["task"] for r in picked], input_script=[r["input_script"] for r in picked],
                     log_metric=logged.__setitem__, trainer_state=None)
    stages = [e.stage for e in fn.last]
    assert stages[0] == OK and stages[2] == OK and stages[1] in ("decode", "apply")
    assert rewards == [reward(e) for e in fn.last]
    assert rewards[0] >= RewardConfig().correct - RewardConfig().bonus_weight and rewards[1] < 0
    assert fn.last[2].reference_latency is not None  # refinement: against the input script, timed here
    assert logged["dragonlab/correct"] == pytest.approx(2 / 3)
    assert logged[f"dragonlab/stopped_at_{stages[1]}"] == pytest.approx(1 / 3)
    assert set(logged) >= {"dragonlab/exact", "dragonlab/mean_bonus"}


def test_grpo_from_the_tiny_sft_model_logs_rewards_and_resumes(tiny, data, tmp_path, monkeypatch):
    from transformers.generation.utils import GenerationMixin

    static, prepare = [], GenerationMixin._prepare_static_cache  # rollouts keep models.generate's cache
    monkeypatch.setattr(GenerationMixin, "_prepare_static_cache",
                        lambda self, *a, **k: static.append(True) or prepare(self, *a, **k))
    config = RLConfig(max_steps=2, num_generations=2, prompts_per_step=1, save_steps=1, max_completion_length=384)
    with Evaluator("cpu") as evaluator:
        run = train(tiny[0].out, data, tmp_path / "rl", config, progress=False, evaluator=evaluator)
        assert run.steps == 2 and (run.model_dir / "config.json").is_file() and len(static) == 2
        steps = [d for d in run.log if "reward" in d]
        assert [d["step"] for d in steps] == [1, 2]
        for d in steps:
            shares = [v for k, v in d.items() if k.startswith("dragonlab/stopped_at_")] + [d["dragonlab/correct"]]
            assert math.isclose(sum(shares), 1.0) or d["dragonlab/stopped_at_time"] > 0
            assert -1.0 <= d["reward"] <= 1.5
        shutil.rmtree(run.model_dir)  # as if killed after the first checkpoint
        shutil.rmtree(tmp_path / "rl" / "checkpoints" / "checkpoint-2")
        again = train(tiny[0].out, data, tmp_path / "rl", config, progress=False, evaluator=evaluator)
        finished = train(tiny[0].out, data, tmp_path / "rl", config, progress=False, evaluator=evaluator)
    assert again.resumed_from == 1 and again.steps == 2
    assert finished.steps == 2 and finished.resumed_from is None  # a finished run is not trained again
    assert [d["step"] for d in again.log if "reward" in d] == [1, 2]
    # every judged script is on record; step 2, judged twice, keeps its last batch, the one the log's reward is of
    assert len(list(read_lines(tmp_path / "rl" / "rollouts.jsonl"))) == 6
    rollouts = read_rollouts(tmp_path / "rl" / "rollouts.jsonl")
    assert [d["step"] for d in rollouts] == [1, 1, 2, 2]
    for d in (d for d in again.log if "reward" in d):
        mine = [r["reward"] for r in rollouts if r["step"] == d["step"]]
        assert d["reward"] == pytest.approx(sum(mine) / len(mine), rel=1e-5)  # trl logs a float32 mean


def test_constrained_grpo_takes_log_probabilities_over_what_each_draw_was_among(tiny, data, tmp_path, monkeypatch):
    """Constrained rollouts: each rollout is a script that applies, and the loss's log-probabilities
    are the constrained sampler's (renormalised over the draw's candidates): a forced token has
    log-probability 0, so no gradient, and no token is less probable than unconstrained."""
    import torch
    import trl

    from dragonlab.core import codec
    from dragonlab.learn import rl

    made, batches = [], []
    real_constraint, real_class = rl.constrain_rollouts, rl._trainer_class
    monkeypatch.setattr(rl, "constrain_rollouts", lambda *a, **k: made.append(real_constraint(*a, **k)) or made[-1])

    def spying(constraint, anchor):
        class Spy(real_class(constraint, anchor)):
            def _generate_and_score_completions(self, inputs):
                batches.append((self, output := super()._generate_and_score_completions(inputs)))
                return output
        return Spy

    monkeypatch.setattr(rl, "_trainer_class", spying)
    config = RLConfig(max_steps=1, num_generations=2, prompts_per_step=1, max_completion_length=256,
                      save_steps=10, constrained=True, tasks=("construction",))
    with Evaluator("cpu") as evaluator:
        run = train(tiny[0].out, data, tmp_path / "rl", config, progress=False, evaluator=evaluator)
    assert run.steps == 1 and len(made) == 1 and len(batches) == 1
    # only the tasks asked for
    assert {d["task"] for d in read_rollouts(tmp_path / "rl" / "rollouts.jsonl")} == {"construction"}
    constraint = made[0]
    assert constraint.checks > 0 and len(constraint.followers) == 2  # the rollouts went through it
    for follower in constraint.followers:  # what each rollout wrote, complete lines: a script that applies
        codec.apply(follower.script(), follower.mod)

    trainer, batch = batches[0]
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    length, written = batch["completion_ids"].shape[1], batch["completion_mask"].bool()
    with torch.no_grad():
        trainer._among = batch["among"]
        constrained, entropy, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, length,
                                                                               compute_entropy=True)
        plain, _, _ = trl.GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, mask, length)
    offered = (batch["among"] >= 0).sum(-1)
    forced, free = (offered == 1) & written, (offered > 1) & written
    assert forced.sum() > 0 and free.sum() > 0
    assert (constrained[forced] == 0).all() and (entropy[forced].abs() < 1e-6).all()
    assert (constrained[free] < 0).all() and (entropy[free] > 0).all()
    assert (constrained[written] >= plain[written] - 1e-4).all()  # renormalised over fewer tokens
    with torch.no_grad():  # the same as a softmax over a mask of the vocabulary
        logits = trainer.model(input_ids=ids, attention_mask=mask).logits[:, -length - 1:-1] / trainer.temperature
    vocab = logits.shape[-1]  # padding (-1) lands in an extra column, dropped
    dense = torch.zeros(*logits.shape[:2], vocab + 1, dtype=torch.bool).scatter_(
        -1, batch["among"].where(batch["among"] >= 0, vocab), True)[..., :vocab]
    masked = logits.masked_fill(~dense, -torch.inf).log_softmax(-1).gather(-1, batch["completion_ids"].unsqueeze(-1))
    assert torch.allclose(constrained[written], masked.squeeze(-1)[written], atol=1e-5)
    assert (plain[forced] < -1e-3).any()  # unrenormalised, the forced tokens would carry a gradient
    # an ended sequence's positions (padding) are outside the loss, but no NaN from them reaches a gradient
    among = batch["among"].clone()
    among[0, length // 2:] = -1
    trainer._among = among
    logps, entropy, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, mask, length,
                                                                   compute_entropy=True)
    (logps.sum() + entropy.sum() + trainer._log_mass.sum()).backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in trainer.model.parameters())
    assert logps[0, length // 2:].eq(0).all() and torch.isfinite(trainer._log_mass).all()
    trainer.model.zero_grad()
    assert all(math.isfinite(d["grad_norm"]) for d in run.log if "grad_norm" in d)
    # the anchor: the reference's legal mass came with the batch, the policy's with the loss, both logged
    assert batch["ref_log_mass"].shape == written.shape and (batch["ref_log_mass"][written] <= 1e-6).all()
    (logged,) = [d for d in run.log if "legal_mass_kl" in d]
    assert 0 < logged["legal_mass"] <= 1 and logged["legal_mass_kl"] >= 0


def test_the_legal_mass_kl_is_what_the_renormalised_kl_leaves_of_the_full_one():
    """KL(p || r) over the vocabulary = the legal-mass KL + m_p KL(legal part) + (1 - m_p) KL(illegal part)."""
    import torch

    from dragonlab.learn.rl import legal_mass_kl

    torch.manual_seed(0)
    p, r = torch.randn(5, 30).log_softmax(-1), torch.randn(5, 30).log_softmax(-1)
    legal = torch.rand(5, 30) < 0.4
    legal[:, 0] = True
    legal[:, 1] = False

    def part(log_q, where):  # the log-mass of `where` and the distribution renormalised over it
        masked = log_q.masked_fill(~where, -torch.inf)
        return torch.logsumexp(masked, -1), masked.log_softmax(-1)

    def kl(a, b, where):
        return torch.where(where, a.exp() * (a - b), 0.0).sum(-1)

    (m_p, p_legal), (m_r, r_legal) = part(p, legal), part(r, legal)
    (_, p_rest), (_, r_rest) = part(p, ~legal), part(r, ~legal)
    full = kl(p, r, torch.ones_like(legal))
    chained = legal_mass_kl(m_p, m_r) + m_p.exp() * kl(p_legal, r_legal, legal) \
        + (1 - m_p.exp()) * kl(p_rest, r_rest, ~legal)
    assert torch.allclose(full, chained, atol=1e-5)
    assert (legal_mass_kl(m_p, m_r) > 0).all() and torch.allclose(legal_mass_kl(m_p, m_p), torch.zeros(5), atol=1e-6)


def test_rl_refuses_bad_settings_with_one_clear_error(tiny, data, tmp_path, capsys):
    assert main(["rl", "--from", str(tiny[0].out), "--data", str(data), "--out", str(tmp_path / "o"),
                 "--num-generations", "1"]) == 2
    assert "num_generations must be at least 2" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit:
        main(["rl", "--from", str(tiny[0].out), "--data", str(data), "--out", str(tmp_path / "o"),
              "--tasks", "construction", "tuning"])
    assert exit.value.code == 2 and "--tasks: invalid choice: 'tuning'" in capsys.readouterr().err
    with pytest.raises(InputError, match="RLConfig.anchor needs the SFT model as reference: beta > 0"):
        RLConfig(constrained=True, beta=0.0)
    with pytest.raises(InputError, match="RLConfig.tasks must be a non-empty tuple, each one of construction, ref"):
        RLConfig(tasks=("tuning",))  # as a campaign's [rl] could write it
    # the reward's flags reach RewardConfig, which refuses a correct kernel worth less than a wrong one
    assert main(["rl", "--from", str(tiny[0].out), "--data", str(data), "--out", str(tmp_path / "o"),
                 "--bonus-weight", "0.9", "--repaired-penalty", "0.5"]) == 2
    assert "RewardConfig: the worst correct kernel (-0.4) must beat a wrong one (-0.2)" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def _attempt(index: int, latency: float | None, workload: str = "w", sample: int = 0) -> Attempt:
    e = (Evaluation(workload, "cpu", OK, latencies=(latency,) * 3, reference_latency=1.0) if latency
         else Evaluation(workload, "cpu", "apply", "no such block"))
    return Attempt("test", index, sample, "construction", workload, "n", "script", e)


def test_compare_counts_wins_beyond_the_threshold_with_a_sign_test():
    a = [_attempt(0, 1.0), _attempt(1, 1.0), _attempt(2, 1.0), _attempt(3, None), _attempt(4, 1.0), _attempt(5, 1.0)]
    b = [_attempt(0, 1.0), _attempt(1, 0.5), _attempt(2, 1.0), _attempt(3, 1.0), _attempt(4, None), _attempt(5, 1.0)]
    # B against A timed side by side (log ratio; the judged latencies above do not decide); 5 failed then
    timings = [PairTiming("test", i, "construction", c, 0.0) for i, c in
               ((0, math.log(0.5)), (1, math.log(0.97)), (2, math.log(2.0)), (5, None))]
    (row, total) = compare(a, b, timings, threshold=0.05)
    assert (row.wins, row.losses, row.ties, row.only_a, row.only_b, row.both_correct) == (1, 1, 1, 1, 1, 4)
    assert row.untimed == 1
    # the geomean of B / A over the kernels timed side by side, with its bootstrap interval
    assert row.ratio == pytest.approx((0.5 * 0.97 * 2.0) ** (1 / 3)) and row.interval[0] <= row.ratio <= row.interval[1]
    assert ModelComparison.from_json(ModelComparison(0.05, 3, (row, total)).to_json()).rows == (row, total)
    assert "geomean B/A 0.990 (" in ModelComparison(0.05, 3, (row, total)).text()
    assert row.correct_a == row.correct_b == 5 / 6 and total.task == "all"
    assert sign_test(0, 0) == 1.0 and sign_test(1, 1) == 1.0
    assert sign_test(9, 1) == pytest.approx(22 / 1024)  # 2 * (C(10,9) + C(10,10)) / 2^10


def test_compare_also_counts_workloads_won_and_lost_where_prompts_share_one():
    """Draws at one workload's kernel are not independent: per workload, wins less losses decide."""
    workloads = ["u"] * 4 + ["v"] * 2 + ["x"]  # u: 3 wins, 1 loss; v: 1 and 1; x: 1 loss
    changes = [-1, -1, -1, 1, -1, 1, 1]
    a = [_attempt(i, 1.0, w) for i, w in enumerate(workloads)]
    b = [_attempt(i, 1.0, w) for i, w in enumerate(workloads)]
    timings = [PairTiming("test", i, "construction", c, 0.0) for i, c in enumerate(changes)]
    row, total = compare(a, b, timings, threshold=0.05)
    assert (row.wins, row.losses) == (4, 3)
    assert (row.workloads_won, row.workloads_lost, row.workload_p) == (1, 1, 1.0) == \
        (total.workloads_won, total.workloads_lost, total.workload_p)
    assert "by workload won 1, lost 1, p = 1" in ModelComparison(0.05, 7, (row, total)).text()
    assert ModelComparison.from_json(ModelComparison(0.05, 7, (row, total)).to_json()).rows == (row, total)


def test_compare_pairs_several_attempts_at_one_prompt_sample_by_sample():
    a = [_attempt(0, 1.0, sample=s) for s in range(3)]
    b = [_attempt(0, 1.0, sample=s) for s in (2, 0, 1)]
    timings = [PairTiming("test", 0, "construction", math.log(c), 0.0, s) for s, c in ((0, 0.5), (1, 1.0), (2, 2.0))]
    row, _ = compare(a, b, timings, threshold=0.05)
    assert (row.prompts, row.wins, row.losses, row.ties) == (3, 1, 1, 1)
    # a comparison written before samples were paired reads as sample 0
    old = ModelComparison(0.05, 1, (row,), (timings[0],)).to_json()
    del old["timings"][0]["sample"]
    assert ModelComparison.from_json(old).timings == (timings[0],)
