"""Commands that run every stage: `demo` (the quick pipeline as a batch of the notebooks) and
`campaign` (a campaign file: checked and estimated with --dry-run, or run as the demo); and
`parts`, which carries a long job's directory to another machine in parts that never change.

The demo's codec check runs as `dragonlab codec check` through `main`, and its closing lines are
`summary_text`'s; both are looked up in this module when the demo runs, so a test can stand in
for them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from dragonlab.cli.app import main
from dragonlab.cli.options import Command, UsageError, command
from dragonlab.cli.reporting import summary_text

# Seconds each demo stage took on an idle 2-core machine (README): the estimate's proportions.
DEMO_SECONDS = {"03_dataset": 288, "codec check": 13, "04_sft": 155, "05_rl": 83, "06_evaluate": 717}


def add_demo(sub, name: str, help: str):
    quick = _quick_toml()  # the defaults are campaigns/quick.toml's
    c = command(sub, name, help, description="The quick end-to-end pipeline on the CPU: campaigns/quick.toml, whose "
                                             "numbers are the defaults below and every other setting of the demo.")
    c.add_argument("--out", type=Path, default=Path(quick["out"]), help="run directory (a rerun resumes)")
    c.add_argument("--trials", type=int, default=quick["collect"]["trials"],
                   help="MetaSchedule candidates per quick workload")
    c.add_argument("--preset", default=quick["sft"]["preset"], help="the model fine-tuned by SFT")
    c.add_argument("--sft-steps", type=int, default=quick["sft"]["max_steps"], help="SFT optimizer steps")
    c.add_argument("--rl-steps", type=int, default=quick["rl"]["max_steps"], help="GRPO optimizer steps")
    c.set_defaults(run=demo)


def _quick_toml() -> dict:
    """campaigns/quick.toml as plain TOML, for the demo's option defaults: every one is a setting
    the file must write. Its checks (`campaign.load`) import TVM, which `demo --help` need not."""
    import tomllib

    from dragonlab.cli.campaign.estimate import QUICK

    if not QUICK.is_file():
        raise UsageError(f"{QUICK} is missing: the demo runs from a source checkout (pip install -e .)")
    with open(QUICK, "rb") as f:
        return tomllib.load(f)


def demo(args) -> int:
    """The quick pipeline as a papermill batch of the notebooks: collect the quick suite and build
    the datasets (03), check the codec on every record, fine-tune (04), RL (05), and the report
    (06). The executed notebooks stay in OUT/notebooks; every stage resumes or reuses what an
    earlier run left in OUT."""
    import papermill

    from dragonlab.cli import campaign

    notebooks = Path(__file__).resolve().parents[2] / "notebooks"
    if not notebooks.is_dir():
        raise UsageError(f"{notebooks} is missing: the demo runs from a source checkout (pip install -e .)")
    quick = campaign.load(campaign.QUICK)  # every setting the options leave
    out = args.out.resolve()
    (out / "notebooks").mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TQDM_DISABLE", "1")  # the notebooks' own progress output, not one line per update
    start, times = time.monotonic(), []
    steps = _demo_steps(args, out, quick)
    log = out / "demo.log"
    print(f"kernel and TVM messages -> {log}", flush=True)
    with _stderr_of_children_to(log):
        for i, (name, what) in enumerate(steps):
            began = time.monotonic()
            print(f"\n[{i + 1}/{len(steps)}] {name} {_eta(times, [n for n, _ in steps[i:]])}", flush=True)
            if isinstance(what, list):
                print(f"$ dragonlab {' '.join(what)}", flush=True)
                code = main(what)
                if code:
                    return code
            else:
                target = out / "notebooks" / f"{name}.ipynb"
                print(f"notebooks/{name}.ipynb -> {target}", flush=True)
                papermill.execute_notebook(
                    str(notebooks / f"{name}.ipynb"), str(target), parameters=what, kernel_name="python3",
                    cwd=str(out), execution_timeout=3600,  # a cell that hangs fails the demo
                    progress_bar={"desc": name, "disable": False, "file": sys.stderr, "dynamic_ncols": True})
            times.append((name, time.monotonic() - began))
            print(f"   {name}: {times[-1][1]:.0f} s (total {_minutes(time.monotonic() - start)})", flush=True)
    from dragonlab.reporting.report import read_report

    print("\n" + summary_text(read_report(out / "report")))
    print(f"\ndemo finished in {_minutes(time.monotonic() - start)} ({', '.join(f'{n} {t:.0f} s' for n, t in times)})")
    print(f"report: {out / 'report' / 'report.html'}; executed notebooks: {out / 'notebooks'}")
    return 0


def _demo_steps(args, out: Path, quick) -> list[tuple[str, dict | list]]:
    """(name, the notebook's parameters or a dragonlab command line) of each stage: the options'
    numbers, and the other settings of the campaign `quick` (campaigns/quick.toml)."""
    from dragonlab.cli import campaign

    data, sft, rl = out / "dataset", out / "sft", out / "rl"
    r, report = campaign.rl_config(quick), campaign.report_config(quick)
    return [
        ("03_dataset", {"records": str(out / "records"), "trials": args.trials, "families": None, "resume": True,
                        "population": quick.collect.population, "out": str(data),
                        "holdout_family": quick.dataset.holdout_family}),
        ("codec check", ["codec", "check", str(out / "records")]),
        ("04_sft", {"data": str(data), "model": None, "run": str(sft), "preset": args.preset,  # trains its own
                    "max_steps": args.sft_steps, "threads": campaign.sft_config(quick).threads,
                    "split": "test", "n": 1, "limit": 4, "constrained": False}),
        ("05_rl", {"data": str(data), "sft_run": str(sft), "run": str(rl), "max_steps": args.rl_steps,
                   "num_generations": r.num_generations, "prompts_per_step": r.prompts_per_step,
                   "constrained": r.constrained, "splits": ["test", "test_family"], "limit": 2}),
        ("06_evaluate", {"run": str(out), "k": report.k, "best_of": report.best_of, "budgets": list(report.budgets),
                         "seeded_budget": report.seeded_budget, "turns": report.turns,
                         "refinement_per_workload": report.refinement_per_workload,
                         "constrained": report.constrained}),
    ]


def _eta(done: list[tuple[str, float]], left: list[str]) -> str:
    """"about N min left": the reference times of the stages left, scaled by how this machine
    did on the stages done so far."""
    ref_done = sum(DEMO_SECONDS.get(n, 0) for n, _ in done)
    scale = sum(t for _, t in done) / ref_done if ref_done else 1.0
    return f"(about {_minutes(scale * sum(DEMO_SECONDS.get(n, 0) for n in left))} left)"


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"


@contextlib.contextmanager
def _stderr_of_children_to(path: Path):
    """Point file descriptor 2 at `path` so that processes started inside (notebook kernels, TVM's
    C++ logging, worker processes) write their warnings there; this process's `sys.stderr` (the
    progress bars, errors) stays on the terminal."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    terminal, old = os.fdopen(os.dup(saved), "w", buffering=1), sys.stderr
    sys.stderr = terminal
    try:
        yield
    finally:
        terminal.flush()
        sys.stderr = old
        os.dup2(saved, 2)
        os.close(saved)
        terminal.close()


def add_campaign(sub, name: str, help: str):
    c = command(sub, name, help,
                description="Check a campaign on this machine without a GPU and estimate its device-hours "
                            "(--dry-run: exit 1 if a check fails), or run it: campaigns/quick.toml runs as "
                            "`dragonlab demo`; for the others the commands are printed (docs/scale.md).")
    c.add_argument("--config", type=Path, required=True, help="a campaign file, e.g. campaigns/paper.toml")
    c.add_argument("--dry-run", action="store_true", help="check what needs no GPU, then estimate device-hours")
    c.set_defaults(run=run_campaign)


def run_campaign(args) -> int:
    from dragonlab.cli import campaign

    c = campaign.load(args.config)
    if args.dry_run:
        start = time.monotonic()
        checks = campaign.dry_run(c)
        print(campaign.format_checks(c, checks, time.monotonic() - start))
        print(campaign.format_estimate(c, campaign.estimate(c, checks), checks))
        return 0 if all(check.ok for check in checks) else 1
    options = campaign.demo_options(c)
    if options is None:
        print("\n".join(campaign.plan(c)))
        raise UsageError(f"{args.config}: only --dry-run is implemented for this campaign; the commands above are "
                         "what it would run (a campaign runs from here only as `dragonlab demo`: campaigns/quick.toml "
                         "with other out, trials or steps)")
    return demo(argparse.Namespace(**options))


def add_parts(sub, name: str, help: str):
    p = command(sub, name, help, description="A report, attempts run or search writes only append-only *.jsonl "
                                             "files: `save` writes what each gained since the last save as a new "
                                             "part (PARTS/<stem>.partN.jsonl.gz, never changed again, for git); "
                                             "`restore` puts the files back together, and the job's own command "
                                             "resumes.")
    psub = p.add_subparsers(title="parts commands", metavar="ACTION")
    c = command(psub, "save", "the lines each *.jsonl file under RUN gained since the last save, as new parts")
    c.add_argument("source", type=Path, metavar="RUN", help="the job's directory (e.g. runs/standard/report)")
    c.add_argument("--to", type=Path, required=True, metavar="PARTS", help="directory of the parts")
    c.set_defaults(run=lambda args: _parts("save", args.source, args.to))
    c = command(psub, "restore", "put the saved files back together under RUN, to resume the job there")
    c.add_argument("source", type=Path, metavar="PARTS", help="directory of the parts")
    c.add_argument("--to", type=Path, required=True, metavar="RUN", help="the job's directory")
    c.set_defaults(run=lambda args: _parts("restore", args.source, args.to))


def _parts(action: str, source: Path, to: Path) -> int:
    from dragonlab.core import parts

    written = getattr(parts, action)(source, to)
    print("\n".join(map(str, written)) if written else f"nothing to {action}: {to} is up to date")
    return 0


COMMANDS = [
    Command("demo", "the quick end-to-end pipeline on the CPU", add_demo),
    Command("campaign", "every stage at one scale from a campaign file (campaigns/*.toml)", add_campaign),
    Command("parts", "carry a report's (or any append-only job's) files across machines in parts for git",
            add_parts),
]
