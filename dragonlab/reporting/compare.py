"""Two models on the same held-out prompts: whose kernels are faster, beyond timing noise?

The protocol (the paper's "RL kernels faster than SFT's on 88 of 102 tasks"):

1. Attempts by both models at the same prompts, sampled under a fixed seed, all judged by one
   evaluator in one run: correctness and the shaped reward come from those judgements. An
   attempt is paired with the other model's attempt at the same prompt and sample number.
2. Where both kernels are correct, they are timed again side by side (`Evaluator.time_together`):
   A's kernel, B's kernel and A's kernel once more, in turn, for `rounds` rounds, within a second
   of each other. B's change against A is the median over rounds of log(B / A) in the same round;
   A's second slot against its first is the same statistic for two identical kernels.
3. The noise threshold is measured, not assumed: the `quantile` (0.95) of |A' / A - 1| over the
   prompts. Latencies of the same kernel judged minutes apart differed far more (on a 2-core VM,
   microsecond kernels: 95th percentile 150% to 420%, first timing mostly the slower), which made
   any difference between two models invisible; paired in time, that state slows both alike.
4. B *wins* when its kernel is faster than A's by more than the threshold, *loses* when slower by
   more, else it is a tie. A two-sided sign test over wins and losses (ties left out) gives the
   p-value. Beside it: the geometric mean of B / A over the kernels timed side by side, with a
   bootstrap 95% interval (`geomean_interval`, which the report's other geomeans use too),
   per-attempt correctness and mean shaped reward of both models, and the prompts where only
   one model's kernel is correct.
5. Pairs of one workload share its kernel, so their verdicts are not independent (several
   draws at a prompt, or a workload's refinement prompts). Beside the per-pair test, a
   workload is *won* when B's wins there outnumber its losses, *lost* when the other way round,
   and a sign test over won and lost workloads gives `workload_p`.

`compare_models` is the whole protocol after sampling (the report's RL vs SFT, `dragonlab compare`,
notebook 05):

    result = compare_models(evaluator, workloads, sft_attempts, rl_attempts)
    print(result.text("SFT", "RL"))     # threshold, then wins, losses and ties per task
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dragonlab.core.jsonl import append_lines, read_lines
from dragonlab.core.progress import progress_bar
from dragonlab.evaluation.reward import RewardConfig, reward

if TYPE_CHECKING:  # the results (ModelComparison) are read without the evaluator and TVM
    from dragonlab.learn.attempts import Attempt


@dataclass(frozen=True)
class Comparison:
    task: str
    prompts: int  # attempts paired: prompts x attempts at each
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
    untimed: int = 0  # both correct, but a kernel failed when timed again: neither win, loss nor tie
    ratio: float | None = None  # geomean of B / A over the kernels timed side by side (< 1: B faster)
    interval: tuple[float, float] | None = None  # its bootstrap 95% interval, prompts resampled
    workloads_won: int | None = None  # workloads where B's wins outnumber its losses (protocol, 5)
    workloads_lost: int | None = None
    workload_p: float | None = None  # two-sided sign test over workloads won and lost


@dataclass(frozen=True)
class PairTiming:
    """One prompt's kernels timed side by side: log(B / A) and log(A' / A), medians over rounds."""

    split: str
    index: int
    task: str
    change: float | None  # > 0: B slower; None: a kernel failed when timed again
    null: float | None  # A's kernel against itself
    sample: int = 0  # which attempt at the prompt


@dataclass(frozen=True)
class ModelComparison:
    """B against A: the measured noise threshold and one `Comparison` per task, then "all"."""

    threshold: float
    retimed: int  # prompts whose kernels were timed side by side (the threshold's sample)
    rows: tuple[Comparison, ...]
    timings: tuple[PairTiming, ...] = ()

    def to_json(self) -> dict:
        return {"threshold": self.threshold, "retimed": self.retimed, "rows": [asdict(r) for r in self.rows],
                "timings": [asdict(t) for t in self.timings]}

    @classmethod
    def from_json(cls, d: dict) -> "ModelComparison":
        rows = (Comparison(**{**r, "interval": tuple(r["interval"]) if r.get("interval") else None}) for r in d["rows"])
        return cls(d["threshold"], d["retimed"], tuple(rows),
                   tuple(PairTiming(**t) for t in d.get("timings", ())))

    def text(self, a: str = "A", b: str = "B") -> str:
        return (f"noise threshold {self.threshold:.1%}: {a}'s kernel against itself, timed side by side with "
                f"{b}'s on {self.retimed} pairs\n{format_comparison(list(self.rows), a, b)}")


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def geomean_interval(ratios: list[float], *, level: float = 0.95, draws: int = 2000,
                     seed: int = 0) -> tuple[float, float] | None:
    """A bootstrap interval of the geometric mean of `ratios` (percentile method: the ratios
    resampled with replacement `draws` times, seeded); None for fewer than two."""
    interval = mean_interval([math.log(r) for r in ratios], level=level, draws=draws, seed=seed)
    return (math.exp(interval[0]), math.exp(interval[1])) if interval else None


def mean_interval(values: list[float], clusters: list | None = None, *, level: float = 0.95, draws: int = 2000,
                  seed: int = 0) -> tuple[float, float] | None:
    """A bootstrap interval of the mean of `values` (percentile method, `draws` resamples,
    seeded). `clusters`: one label per value; values that share a label are resampled together
    (a prompt's attempts, which share its kernel and its difficulty, are not independent
    draws); by default each value is its own. None for fewer than two clusters."""
    import numpy as np

    labels = list(range(len(values))) if clusters is None else clusters
    index = {c: i for i, c in enumerate(dict.fromkeys(labels))}
    if len(index) < 2:
        return None
    at = np.fromiter((index[c] for c in labels), dtype=int, count=len(labels))
    sums = np.bincount(at, weights=np.asarray(values, dtype=float), minlength=len(index))
    sizes = np.bincount(at, minlength=len(index)).astype(float)
    picks = np.random.default_rng(seed).integers(0, len(index), (draws, len(index)))
    means = sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial test of wins vs losses at p = 1/2."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = max(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def time_pairs(evaluator, workloads: dict, a: list[Attempt], b: list[Attempt], *, rounds: int = 3,
               record: str | os.PathLike | None = None, chunk: int = 32, progress: bool = False) -> list[PairTiming]:
    """Where both attempts at a prompt are correct, their kernels timed side by side (protocol, 2).
    `record`: a file the timings are appended to, `chunk` pairs at a time; a rerun times only the
    pairs it lacks (a line counts for its pair only while both scripts are the ones it timed), so
    a killed comparison loses at most one chunk."""
    pairs = [(x, y) for x, y in _pairs(a, b) if x.evaluation.latency and y.evaluation.latency]
    done: dict[tuple, PairTiming] = dict(read_lines(record, _recorded)) if record and Path(record).exists() else {}
    todo = [(x, y) for x, y in pairs if (*_key(x), _pair_digest(x, y)) not in done]
    with progress_bar(total=len(pairs), initial=len(pairs) - len(todo), desc="timed side by side", unit="pair",
                      progress=progress) as bar:
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            timed = evaluator.time_together([(workloads[x.workload], [x.script, y.script, x.script]) for x, y in part],
                                            rounds=rounds, progress=False)
            new = {(*_key(x), _pair_digest(x, y)): _pair_timing(x, lat) for (x, y), lat in zip(part, timed)}
            if record is not None:
                append_lines(record, [{**asdict(t), "pair": key[-1]} for key, t in new.items()])
            done.update(new)
            bar.update(len(part))
    return [done[(*_key(x), _pair_digest(x, y))] for x, y in pairs]


def _recorded(line: dict) -> tuple[tuple, PairTiming]:
    """A line of a timings record: (its pair's key and digest, the timing)."""
    return (line["split"], line["index"], line["sample"], line["pair"]), PairTiming(
        **{k: v for k, v in line.items() if k != "pair"})


def _pair_timing(x: Attempt, latencies: list) -> PairTiming:
    """A's kernel, B's and A's again, one latency per round each: log(B / A) and log(A' / A)."""
    ta, tb, ta2 = latencies
    ok = ta is not None and tb is not None and ta2 is not None
    return PairTiming(x.split, x.index, x.task,
                      statistics.median(math.log(q / p) for p, q in zip(ta, tb)) if ok else None,
                      statistics.median(math.log(q / p) for p, q in zip(ta, ta2)) if ok else None,
                      x.sample)


def _pair_digest(x: Attempt, y: Attempt) -> str:
    """What a recorded timing was of: both scripts."""
    return script_digest(x.script, y.script)


def script_digest(*scripts: str) -> str:
    """A short digest of scripts, kept beside a timing so that a rerun knows what was timed."""
    return hashlib.sha256(json.dumps(list(scripts)).encode()).hexdigest()[:16]


def _pairs(a: list[Attempt], b: list[Attempt]) -> list[tuple[Attempt, Attempt]]:
    """(A's attempt, B's attempt) wherever both made one, by (split, index, sample), in B's order."""
    by_key = {_key(x): x for x in a}
    return [(by_key[_key(y)], y) for y in b if _key(y) in by_key]


def _key(x) -> tuple[str, int, int]:
    """What pairs an Attempt with the other model's, and with its PairTiming."""
    return x.split, x.index, x.sample


def noise_threshold(timings: Sequence[PairTiming], quantile: float = 0.95) -> float:
    """The `quantile` of |A' / A - 1| over the prompts timed side by side (0 when none were)."""
    nulls = sorted(abs(t.null) for t in timings if t.null is not None)
    if not nulls:
        return 0.0
    return math.exp(nulls[min(len(nulls) - 1, int(quantile * len(nulls)))]) - 1


def compare(a: list[Attempt], b: list[Attempt], timings: Sequence[PairTiming], threshold: float,
            reward_config: RewardConfig = RewardConfig()) -> list[Comparison]:
    """Per task and overall, B against A; attempts are paired by (split, index, sample), latencies
    compared by `timings` (`time_pairs`), beyond `threshold`."""
    pairs = _pairs(a, b)
    change = {_key(t): t.change for t in timings}
    out = []
    for task in sorted({x.task for x, _ in pairs}) + ["all"]:
        group = [(x, y) for x, y in pairs if task in ("all", x.task)]
        ratios = []  # B / A of the kernels timed side by side
        wins = losses = ties = only_a = only_b = both = untimed = 0
        net: Counter = Counter()  # per workload, B's wins less its losses
        for x, y in group:
            lx, ly = x.evaluation.latency, y.evaluation.latency
            if lx and ly:
                both += 1
                c = change.get(_key(x))
                if c is None:
                    untimed += 1
                    continue
                ratios.append(math.exp(c))
                if c < -math.log1p(threshold):
                    wins += 1
                    net[x.workload] += 1
                elif c > math.log1p(threshold):
                    losses += 1
                    net[x.workload] -= 1
                else:
                    ties += 1
            elif lx:
                only_a += 1
            elif ly:
                only_b += 1
        n = len(group)
        won, lost = sum(v > 0 for v in net.values()), sum(v < 0 for v in net.values())
        out.append(Comparison(
            task, n, sum(x.evaluation.correct for x, _ in group) / n, sum(y.evaluation.correct for _, y in group) / n,
            sum(reward(x.evaluation, reward_config) for x, _ in group) / n,
            sum(reward(y.evaluation, reward_config) for _, y in group) / n,
            both, wins, losses, ties, only_a, only_b, threshold, sign_test(wins, losses), untimed,
            geomean(ratios), geomean_interval(ratios), won, lost, sign_test(won, lost)))
    return out


def compare_models(evaluator, workloads: dict, a: list[Attempt], b: list[Attempt], *, rounds: int = 3,
                   quantile: float = 0.95, reward_config: RewardConfig = RewardConfig(),
                   record: str | os.PathLike | None = None, progress: bool = False) -> ModelComparison:
    """B's attempts against A's on the same prompts (paired by split, index and sample), by the
    protocol above, the kernels timed again by `evaluator`. `workloads`: by key, as `dataset.load`
    gives them. `record`: where the timings are appended as they are made, and read back by a
    rerun (`time_pairs`)."""
    timings = time_pairs(evaluator, workloads, a, b, rounds=rounds, record=record, progress=progress)
    threshold = noise_threshold(timings, quantile)
    retimed = sum(t.null is not None for t in timings)
    return ModelComparison(threshold, retimed, tuple(compare(a, b, timings, threshold, reward_config)), tuple(timings))


def format_comparison(rows: list[Comparison], a: str = "A", b: str = "B") -> str:
    lines = [f"{'task':<13}{'prompts':>8}{f'correct {a}':>12}{f'correct {b}':>12}{f'reward {a}':>11}"
             f"{f'reward {b}':>11}  {b} vs {a} where both are correct (threshold {rows[0].threshold:.1%})"]
    for r in rows:
        lines.append(f"{r.task:<13}{r.prompts:>8}{r.correct_a:>12.1%}{r.correct_b:>12.1%}{r.mean_reward_a:>11.3f}"
                     f"{r.mean_reward_b:>11.3f}  faster {r.wins}/{r.both_correct}, slower {r.losses}, "
                     f"ties {r.ties}; sign test p = {r.p_value:.3g}{_workload_text(r)}{_geomean_text(r, a, b)}; "
                     f"only {a} correct {r.only_a}, "
                     f"only {b} correct {r.only_b}" + (f"; {r.untimed} failed when timed again" if r.untimed else ""))
    return "\n".join(lines)


def _workload_text(r: Comparison) -> str:
    if r.workload_p is None:
        return ""
    return f"; by workload won {r.workloads_won}, lost {r.workloads_lost}, p = {r.workload_p:.3g}"


def _geomean_text(r: Comparison, a: str, b: str) -> str:
    if r.ratio is None:
        return ""
    return f"; geomean {b}/{a} {r.ratio:.3f}" + (f" ({r.interval[0]:.3f}-{r.interval[1]:.3f})" if r.interval else "")
