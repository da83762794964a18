"""Two models on the same held-out prompts: whose kernels are faster, beyond timing noise?

The protocol (the paper's "RL kernels faster than SFT's on 88 of 102 tasks"):

1. One attempt per prompt and model, sampled under a fixed seed, all judged by one evaluator
   in one run (so both models' kernels and references are timed on the same machine state).
2. The noise threshold is measured, not assumed: the correct kernels are judged again with the
   evaluator's cache cleared, and the threshold is the `quantile` (0.95) of the relative change
   |log(t2 / t1)| between the two timings of the same kernel.
3. On prompts where both kernels are correct, B *wins* when its latency is below A's by more than
   the threshold, *loses* when above by more, else it is a tie. A two-sided sign test over wins
   and losses (ties left out) gives the p-value.
4. Per-attempt correctness and mean shaped reward of both models are reported beside it; prompts
   where only one model's kernel is correct are counted separately.

`compare_models` is the whole protocol after sampling (the report's RL vs SFT, `dragonlab compare`,
notebook 05):

    result = compare_models(evaluator, workloads, sft_attempts, rl_attempts, {"test": rows})
    print(result.text("SFT", "RL"))     # threshold, then wins, losses and ties per task
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from dragonlab.evaluation.reward import RewardConfig, reward

if TYPE_CHECKING:  # the results (ModelComparison) are read without the evaluator and TVM
    from dragonlab.learn.attempts import Attempt


@dataclass(frozen=True)
class Comparison:
    task: str
    prompts: int
    correct_a: float
    correct_b: float
    mean_reward_a: float
    mean_reward_b: float
    both_correct: int
    wins: int  # B faster than A beyond the threshold
    losses: int
    ties: int
    only_a: int  # only A's kernel is correct
    only_b: int
    threshold: float  # relative latency change that counts as a difference
    p_value: float  # two-sided sign test over wins and losses


@dataclass(frozen=True)
class ModelComparison:
    """B against A: the measured noise threshold and one `Comparison` per task, then "all"."""

    threshold: float  # the largest of the splits' thresholds
    retimed: int  # kernels timed twice to measure it
    rows: tuple[Comparison, ...]

    def to_json(self) -> dict:
        return {"threshold": self.threshold, "retimed": self.retimed, "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_json(cls, d: dict) -> "ModelComparison":
        return cls(d["threshold"], d["retimed"], tuple(Comparison(**r) for r in d["rows"]))

    def text(self, a: str = "A", b: str = "B") -> str:
        return (f"noise threshold {self.threshold:.1%}, measured on {self.retimed} kernels timed twice\n"
                f"{format_comparison(list(self.rows), a, b)}")


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial test of wins vs losses at p = 1/2."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = max(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def noise_threshold(evaluator, workloads: dict, attempts: list[Attempt], rows: Sequence[dict] | Mapping[int, dict],
                    quantile: float = 0.95) -> tuple[float, int]:
    """(threshold, kernels re-timed): the `quantile` of |t2/t1 - 1| over correct attempts judged twice.
    `rows[a.index]`: the dataset row attempt `a` answered (its split's rows, or a dict by index)."""
    from dragonlab.learn.attempts import evaluate_attempts

    correct = [(a, rows[a.index]) for a in attempts if a.evaluation.latency]
    if not correct:
        return 0.0, 0
    evaluator.clear_cache()
    again = evaluate_attempts(evaluator, workloads, [r for _, r in correct], [[a.script] for a, _ in correct])
    changes = sorted(abs(math.log(b.evaluation.latency / a.evaluation.latency))
                     for (a, _), b in zip(correct, again) if b.evaluation.latency)
    if not changes:
        return 0.0, 0
    q = changes[min(len(changes) - 1, int(quantile * len(changes)))]
    return math.exp(q) - 1, len(changes)


def compare(a: list[Attempt], b: list[Attempt], threshold: float,
            reward_config: RewardConfig = RewardConfig()) -> list[Comparison]:
    """Per task and overall, B against A; attempts are paired by (split, index)."""
    by_index = {(x.split, x.index): x for x in a}
    pairs = [(by_index[(y.split, y.index)], y) for y in b if (y.split, y.index) in by_index]
    out = []
    for task in sorted({x.task for x, _ in pairs}) + ["all"]:
        group = [(x, y) for x, y in pairs if task in ("all", x.task)]
        wins = losses = ties = only_a = only_b = both = 0
        for x, y in group:
            lx, ly = x.evaluation.latency, y.evaluation.latency
            if lx and ly:
                both += 1
                change = lx / ly - 1 if ly < lx else -(ly / lx - 1)  # > 0: B faster
                if change > threshold:
                    wins += 1
                elif change < -threshold:
                    losses += 1
                else:
                    ties += 1
            elif lx:
                only_a += 1
            elif ly:
                only_b += 1
        n = len(group)
        out.append(Comparison(
            task, n, sum(x.evaluation.correct for x, _ in group) / n, sum(y.evaluation.correct for _, y in group) / n,
            sum(reward(x.evaluation, reward_config) for x, _ in group) / n,
            sum(reward(y.evaluation, reward_config) for _, y in group) / n,
            both, wins, losses, ties, only_a, only_b, threshold, sign_test(wins, losses)))
    return out


def compare_models(evaluator, workloads: dict, a: list[Attempt], b: list[Attempt],
                   rows: Mapping[str, Sequence[dict] | Mapping[int, dict]], *, quantile: float = 0.95,
                   reward_config: RewardConfig = RewardConfig()) -> ModelComparison:
    """B's attempts against A's on the same prompts (paired by split and index; pass one attempt per
    prompt), by the protocol above. Per split of `rows`, A's correct kernels are timed again by
    `evaluator` (its cache cleared) for that split's noise threshold; the largest counts.
    `rows[split][a.index]`: the dataset row an attempt answered (the split's rows in order, or a
    dict by index). `workloads`: by key, as `dataset.load` gives them."""
    threshold, retimed = 0.0, 0
    for split, split_rows in rows.items():
        t, n = noise_threshold(evaluator, workloads, [x for x in a if x.split == split], split_rows, quantile)
        threshold, retimed = max(threshold, t), retimed + n
    return ModelComparison(threshold, retimed, tuple(compare(a, b, threshold, reward_config)))


def format_comparison(rows: list[Comparison], a: str = "A", b: str = "B") -> str:
    lines = [f"{'task':<13}{'prompts':>8}{f'correct {a}':>12}{f'correct {b}':>12}{f'reward {a}':>11}"
             f"{f'reward {b}':>11}  {b} vs {a} where both are correct (threshold {rows[0].threshold:.1%})"]
    for r in rows:
        lines.append(f"{r.task:<13}{r.prompts:>8}{r.correct_a:>12.1%}{r.correct_b:>12.1%}{r.mean_reward_a:>11.3f}"
                     f"{r.mean_reward_b:>11.3f}  faster {r.wins}/{r.both_correct}, slower {r.losses}, "
                     f"ties {r.ties}; sign test p = {r.p_value:.3g}; only {a} correct {r.only_a}, "
                     f"only {b} correct {r.only_b}")
    return "\n".join(lines)
