"""A campaign's device-hours, and how it runs: the commands of each stage, or `dragonlab demo`.

The estimate multiplies units (candidates, tokens, scripts) by per-unit costs. Costs that this
machine cannot measure (anything on a GPU) are the `[estimate]` section's assumptions, and the
output marks every figure with where it came from.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields, is_dataclass, replace
from pathlib import Path

from dragonlab.cli.campaign.dryrun import Check
from dragonlab.cli.campaign.file import (Campaign, collect_config, dataset_config, load, report_config, rl_config,
                                         sft_config, written)
from dragonlab.cli.options import flag_name
from dragonlab.learn.sft import SFTConfig

QUICK = Path(__file__).resolve().parents[3] / "campaigns" / "quick.toml"  # what `dragonlab demo` runs


@dataclass(frozen=True)
class Row:
    stage: str
    what: str
    units: float
    derivation: str  # how `units` follows from the settings, each figure marked with its source
    cost: str  # the per-unit cost and its source
    hours: float  # device-hours
    devices: int  # devices the work is spread over (shards, processes): wall-clock hours = hours / devices


def estimate(c: Campaign, checks: list[Check]) -> list[Row]:
    """Device-hours per stage: units x per-unit cost. Empty when the workloads check failed (the
    count of workloads is the base of every other figure)."""
    found = next((ch.measured for ch in checks if ch.name == "workloads" and ch.ok), None)
    if not found:
        return []
    e, s, r, rep = c.estimate, sft_config(c), rl_config(c), report_config(c)
    w, wsrc = found["count"], found["source"]
    cand, train, gen = e.seconds_per_candidate, e.train_tokens_per_second_per_device, \
        e.generate_tokens_per_second_per_device
    rl_gen = e.vllm_tokens_per_second_per_device if r.generation == "vllm" else gen
    scripts = r.max_steps * r.prompts_per_step * r.num_generations
    bench = benchmark(c)
    held, held_src = (len(bench[0].judged()), f"[{bench[1]}]") if bench else \
        (max(1, round(w * dataset_config(c).test)), "(the test share)")
    best_of, refinements = rep.construction_attempts, rep.refinement_per_workload or 0
    prompts = held * (best_of + refinements * rep.k + rep.turns)  # scripts per model; a turn writes one
    per_candidate, top = f"{cand:g} s [file]", max(rep.budgets)
    seeded = rep.seeded_trials
    # Timed again side by side: each model's best-of-k kernel beside every baseline's (search's at
    # each budget, the seeded search's, random's, dlight's), and RL's first compared_draws attempts
    # at each prompt beside SFT's (both kernels built again).
    best_kernels = 2 + len(rep.budgets) + 3
    drawn = lambda attempts: min(rep.compared_draws, attempts)  # noqa: E731
    pairs = held * (drawn(best_of) + refinements * drawn(rep.k))
    tps = lambda x: f"{x:,g} tokens/s [file]"  # noqa: E731

    def row(stage, what, units, derivation, seconds_each, cost, devices=1):
        return Row(stage, what, units, derivation, cost, units * seconds_each / 3600, devices)

    rows = [row("collect", "candidates", w * c.collect.trials, f"{w:,} workloads {wsrc} x {c.collect.trials} trials",
                cand, per_candidate, c.collect.shards)]
    if bench:  # the judged workloads' searches continue to the benchmark's trials; the report reuses them
        more = sum(max(0, t - c.collect.trials) * len(keys) for t, keys in bench[0].search.items())
        rows.append(row("collect", "benchmark search", more, " + ".join(
            f"{len(keys)} x {t}" for t, keys in sorted(bench[0].search.items(), reverse=True))
            + f" trials, less the {c.collect.trials} collected", cand, per_candidate))
    rows += [
        row("sft", "training tokens", s.max_steps * s.batch_size * e.tokens_per_example,
            f"{s.max_steps:,} steps x {s.batch_size} examples x {e.tokens_per_example} tokens [file]", 1 / train,
            tps(train), c.sft.processes),
        row("rl", "generated tokens", scripts * e.tokens_per_script,
            f"{r.max_steps:,} steps x {r.prompts_per_step} prompts x {r.num_generations} scripts x "
            f"{e.tokens_per_script} tokens [file]", 1 / rl_gen, f"{tps(rl_gen)} ({r.generation})", c.sft.processes),
        row("rl", "training tokens", scripts * e.tokens_per_example,
            f"{scripts:,} scripts x {e.tokens_per_example} tokens [file]", 1 / train, tps(train), c.sft.processes),
        row("rl", "scripts judged", scripts, f"{scripts:,} scripts", cand, per_candidate, c.sft.processes),
        row("report", "generated tokens", 2 * prompts * e.tokens_per_script,
            f"2 models x {held:,} held-out workloads {held_src} x ({best_of} construction + {refinements} "
            f"refinement x {rep.k} + {rep.turns} turns) x {e.tokens_per_script} tokens [file]", 1 / gen, tps(gen)),
        row("report", "scripts judged", 2 * prompts + held * (rep.k + 2 + len(rep.budgets)),
            f"the models' {2 * prompts:,} + baselines' {held:,} x {rep.k + 2 + len(rep.budgets)}", cand,
            per_candidate),
        row("report", "search candidates", held * (seeded + (0 if bench else top)),
            f"{held:,} workloads x ({seeded} trials of seeded search"
            + (", the plain one stored)" if bench else f" + {top} of plain search)"), cand, per_candidate),
        row("report", "kernels timed side by side", held * best_kernels + 2 * pairs,
            f"{held:,} workloads x {best_kernels} best kernels (2 models, {len(rep.budgets)} budgets, seeded, random, "
            f"dlight) + "
            f"RL vs SFT's {pairs:,} pairs x 2 ({held:,} x ({drawn(best_of)} construction + {refinements} refinement "
            f"x {drawn(rep.k)}) draws)", cand, f"{cand:g} s [file], as a candidate: built, then 3 rounds of timing"),
    ]
    return rows


def benchmark(c: Campaign):
    """(Benchmark, its path) when the dataset takes its splits from a benchmark: the one [dataset]
    names, or the one shipped beside the records (as `dataset build` does when the file sets no
    split option); else None."""
    from dragonlab.search.benchmark import find
    from dragonlab.search.benchmark import load as load_benchmark

    if c.dataset.benchmark:  # the file names one
        return load_benchmark(c.dataset.benchmark), Path(c.dataset.benchmark)
    path = find(c.collect.records or f"{c.out}/records")
    if path is None or written(c, "dataset", "holdout_family", "validation", "test"):
        return None
    return load_benchmark(path), path


def format_estimate(c: Campaign, rows: list[Row], checks: list[Check]) -> str:
    if not rows:
        return "no estimate: the workloads check failed"
    from dragonlab.core.targets import get_target

    device = "one GPU" if get_target(c.collect.target).is_gpu else "one CPU machine"
    head = ("stage", "what", "units", "from", "cost per unit", "device-hours")
    table = [head] + [(x.stage, x.what, f"{x.units:,.0f}", x.derivation, x.cost, f"{x.hours:,.2f}") for x in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    fmt = lambda t: "  " + "  ".join(  # noqa: E731
        v.rjust(n) if i in (2, 5) else v.ljust(n) for i, (v, n) in enumerate(zip(t, widths))).rstrip()
    wall = {}
    for x in rows:
        wall[x.stage] = wall.get(x.stage, 0.0) + x.hours / x.devices
    wl = next(ch.measured for ch in checks if ch.name == "workloads")
    return "\n".join([
        f"estimate in device-hours (a device: {device}, {c.collect.target})",
        "  [file]: an assumption of the file's [estimate]; [measured]: measured by this dry run; [suite]: the "
        "suite's definition; unmarked: the campaign's settings",
        *map(fmt, table),
        f"  total {sum(x.hours for x in rows):,.2f} device-hours; wall-clock with {c.collect.shards} collecting "
        f"machine(s) and {c.sft.processes} training device(s): "
        + ", ".join(f"{stage} {hours:,.2f} h" for stage, hours in wall.items()),
        f"  not device time: generating the {wl['count']:,} workloads, {wl['seconds_each'] * 1e3:.1f} ms each "
        f"[measured], takes {wl['count'] * wl['seconds_each'] / 60:,.1f} CPU-minutes"])


def plan(c: Campaign) -> list[str]:
    """The commands the campaign runs, stage by stage (comments start with #)."""
    col, s = c.collect, c.sft
    records, out = col.records or f"{c.out}/records", c.out
    cmd = (f"dragonlab collect --suite {col.suite} --target {col.target} --trials {col.trials} "
           f"--per-round {col.trials_per_round} --seed {col.seed}")
    if col.runner == "rpc":
        cmd += f" --runner rpc --tracker {col.tracker} --key {col.key}"
    cmd += "".join(f" --population {n}" for n in written(c, "collect", "population").values())
    if col.shards == 1:
        lines = ["# collect", f"{cmd} --out {records}"]
    else:  # shards at once write separate stores (they would share the store's workload file)
        lines = [f"# collect: {col.shards} shards at once, one machine each (or in turn into one store)",
                 f"{cmd} --shard I/{col.shards} --out {records}-I   # I = 0 .. {col.shards - 1}",
                 f"dragonlab records merge {records}-* --out {records}"]
    bench = benchmark(c)
    if bench:
        lines.append(f"{cmd.replace(f' --trials {col.trials}', '')} --benchmark-search {bench[1]} --out {records}")
    # only the options the file sets: any split option replaces a benchmark shipped beside the records
    options = "".join(f" --{k.replace('_', '-')} {v}" for k, v in written(c, "dataset").items())
    lines += ["# dataset", f"dragonlab dataset build --records {records} --out {out}/dataset{options}"]
    launch = f"accelerate launch --config_file {s.accelerate_config} -m dragonlab.cli" if s.accelerate_config \
        else "dragonlab"
    # every setting the file gives the stage, so the commands train what the file describes
    sft_flags = _flags({k: v for k, v in written(c, "sft").items() if k in {f.name for f in fields(SFTConfig)}})
    lines += [f"# sft and rl on {s.processes} process(es)",
              f"{launch} sft --data {out}/dataset --out {out}/sft{sft_flags}",
              f"{launch} rl --from {out}/sft --data {out}/dataset --out {out}/rl{_flags(written(c, 'rl'))}",
              "# report",
              f"dragonlab report --run {out}{_flags(written(c, 'report'))}"]
    return lines


def _flags(settings: dict, config=None) -> str:
    """Settings as the flags of the command whose config they are (`--max-steps 240`; a switch
    as `--constrained true`, a tuple as its items)."""
    def text(v) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, (tuple, list)):
            return " ".join(map(text, v))
        return shlex.quote(f"{v:g}" if isinstance(v, float) else str(v))

    def flags(k, v) -> str:
        if is_dataclass(v):  # a nested config ([rl.reward]): the flags of the fields it changes
            return _flags({f.name: getattr(v, f.name) for f in fields(v) if getattr(v, f.name) != f.default}, type(v))
        return f" --{flag_name(config, k).replace('_', '-')} {text(v)}"

    return "".join(flags(k, v) for k, v in settings.items())


def demo_options(c: Campaign) -> dict | None:
    """The `dragonlab demo` options that run this campaign, or None when the demo cannot: it runs
    campaigns/quick.toml, with any run directory, trials and SFT and RL steps."""
    if not QUICK.is_file():
        return None
    if _fixed_by_demo(c) != _fixed_by_demo(load(QUICK)):
        return None
    return {"out": Path(c.out), "trials": c.collect.trials, "preset": c.sft.preset, "sft_steps": c.sft.max_steps,
            "rl_steps": c.rl.max_steps}


def _fixed_by_demo(c: Campaign) -> tuple:
    """What `dragonlab demo` always runs the same way (its options excepted)."""
    return (c.collect.suite, c.collect.target, c.collect.shards, c.collect.records, c.sft.processes,
            c.sft.accelerate_config, c.sft.lora, replace(collect_config(c), trials=1), dataset_config(c),
            replace(sft_config(c), max_steps=1), replace(rl_config(c), max_steps=1), report_config(c))
