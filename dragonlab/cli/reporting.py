"""Commands that judge trained models: `compare` and `report`.

`report`'s settings are ReportConfig's fields (dragonlab.reporting.config), one flag each; the
LLM endpoint's flags are the command's own. `summary_text` is the report's few terminal lines
(`dragonlab demo` prints them too).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from dragonlab.cli.options import Command, UsageError, command, config_from, number, require


def add_compare(sub, name: str, help: str):
    c = command(sub, name, help,
                description="--draws attempts per prompt and model under a fixed seed, judged by one evaluator; "
                            "where both of a pair (the same prompt and draw) are correct, the two kernels timed "
                            "again side by side (A, B, A again, three rounds), the noise threshold being A's kernel "
                            "against itself; wins, losses and ties, with sign tests over pairs and over workloads "
                            "won and lost.")
    c.add_argument("--a", type=Path, required=True, help="the baseline model directory (e.g. runs/demo/sft/model)")
    c.add_argument("--b", type=Path, required=True, help="the challenger model directory (e.g. runs/demo/rl/model)")
    c.add_argument("--data", type=Path, required=True, help="a directory written by `dataset build`")
    c.add_argument("--split", nargs="+", default=["test", "test_family"], help="held-out splits")
    c.add_argument("--temperature", type=number(">= 0"), default=0.8)
    c.add_argument("--seed", type=int, default=0, help="sampling seed")
    c.add_argument("--limit", type=int, default=None, help="only the first N examples of each split")
    c.add_argument("--per-workload", type=int, default=None, metavar="R",
                   help="only one construction prompt per workload and its first R refinement prompts, as the "
                        "report takes them (default: every example)")
    c.add_argument("--draws", type=int, default=1, metavar="N",
                   help="attempts per prompt and model, sample i of A paired with sample i of B: power where "
                        "prompts are few")
    c.add_argument("--constrained", action="store_true", help="constrained decoding for both models")
    c.add_argument("--out", type=Path, required=True,
                   help="directory for both models' attempts and the side by side timings (appended; a rerun "
                        "resumes) and comparison.json")
    c.set_defaults(run=compare)


def compare(args) -> int:
    import torch

    from dragonlab.core.jsonl import write_atomic
    from dragonlab.evaluation.evaluate import Evaluator
    from dragonlab.learn import dataset
    from dragonlab.reporting.compare import compare_models

    if args.per_workload is not None:
        require("--per-workload", args.per_workload, ">= 0")
    require("--draws", args.draws, "> 0")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dsd, workloads = dataset.load(args.data)
    splits = [s for s in args.split if s in dsd]
    if not splits:
        raise UsageError(f"the dataset has none of the splits {args.split} (it has {', '.join(dsd)})")
    args.out.mkdir(parents=True, exist_ok=True)
    with Evaluator(dataset.target_of(dsd, splits)) as evaluator:
        judged = {name: _attempts(args, name, path, evaluator, dsd, workloads, splits)
                  for name, path in (("a", args.a), ("b", args.b))}
        result = compare_models(evaluator, workloads, judged["a"], judged["b"], record=args.out / "timings.jsonl",
                                progress=True)
    print(result.text())
    write_atomic(args.out / "comparison.json", json.dumps({"a": str(args.a), "b": str(args.b), "splits": splits,
                                                           **result.to_json()}, indent=1) + "\n")
    return 0


def _attempts(args, name: str, path: Path, evaluator, dsd, workloads, splits: list[str]) -> list:
    """One model's judged attempts at every split, appended to OUT/attempts-NAME.jsonl."""
    from dragonlab.learn import models
    from dragonlab.learn.attempts import format_summary, sample_and_evaluate, summary

    model, tokenizer = models.load(path)
    judged = [a for split in splits for a in sample_and_evaluate(
        model, tokenizer, evaluator, dsd, workloads, split=split, n=args.draws, temperature=args.temperature,
        limit=args.limit, out=args.out / f"attempts-{name}.jsonl", seed=args.seed, constrained=args.constrained,
        refinement_per_workload=args.per_workload)]
    print(f"{name} = {path}\n{format_summary(summary(judged))}\n")
    return judged


def add_report(sub, name: str, help: str):
    from dragonlab.reporting.config import ReportConfig
    from dragonlab.search.config import MeasureConfig

    c = command(sub, name, help, configs=[ReportConfig, MeasureConfig],
                description="On the held-out prompts of RUN/dataset: k attempts per prompt by each model "
                            "(RUN/sft/model, RUN/rl/model) and an optional LLM endpoint, multi-turn refinement, "
                            "MetaSchedule search at several budgets (plain and model-seeded), random design-space "
                            "samples and dlight's defaults, all judged by one evaluator; writes "
                            "RUN/report/report.json and report.html. Rerunning resumes.")
    c.add_argument("--run", dest="run_dir", type=Path, required=True,
                   help="a run directory holding dataset/ and sft/ (rl/)")
    c.add_argument("--llm-base-url", help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    c.add_argument("--llm-model", help="the model name the endpoint serves")
    c.add_argument("--llm-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    c.add_argument("--llm-endpoint", choices=("chat", "completions"), default="chat",
                   help="completions: the dataset prompt alone, for a served dragonlab model")
    c.add_argument("--replay", type=Path, metavar="REPORT_DIR",
                   help="judge again, on this machine, what this report directory holds (made with the same "
                        "settings): its models' scripts in the same batches and its searches' kernels, writing and "
                        "searching nothing; everything is timed again")
    c.add_argument("--other-machine", action="store_true",
                   help="resume on a machine that runs the calibration kernel at another speed than the one the "
                        "report started on (refused otherwise: the latencies would not compare)")
    c.set_defaults(run=report)


def report(args) -> int:
    from dragonlab.reporting.config import ReportConfig
    from dragonlab.reporting.report import run_report
    from dragonlab.search.config import MeasureConfig

    if bool(args.llm_base_url) != bool(args.llm_model):
        raise UsageError("--llm-base-url and --llm-model go together")
    config = config_from(ReportConfig, args, measure=config_from(MeasureConfig, args))
    if not (args.run_dir / "dataset").is_dir():
        raise UsageError(f"{args.run_dir}/dataset does not exist (a run directory holds dataset/, sft/ and rl/)")
    llm = None
    if args.llm_base_url:
        from dragonlab.learn.llm import ChatModel

        llm = ChatModel(args.llm_base_url, args.llm_model, api_key_env=args.llm_key_env, endpoint=args.llm_endpoint,
                        temperature=config.temperature)
    start = time.monotonic()
    result = run_report(args.run_dir, config, llm=llm, replay=args.replay, other_machine=args.other_machine)
    print(summary_text(result))
    print(f"report in {time.monotonic() - start:.0f} s -> {args.run_dir / 'report' / 'report.html'}")
    return 0


def add_scaling(sub, name: str, help: str):
    c = command(sub, name, help,
                description="One point per SFT run: its training workloads and model size, its exact per-attempt "
                            "correctness per task, and the best-of-k speedup of its construction attempts (bootstrap "
                            "95%% interval), from an attempts file written by `dragonlab attempts`. Writes "
                            "OUT/points.json, OUT/points.md and each run's run.json, log.jsonl, attempts and counts.json (its "
                            "parameters and training workloads: the points can be computed again from OUT) under "
                            "OUT/<run>/, and prints the table.")
    c.add_argument("runs", nargs="+", metavar="RUN[=ATTEMPTS]",
                   help="an SFT run directory (or a shipped model directory with its run.json), and its attempts "
                        "file when it is not RUN/attempts-test.jsonl; a run may come again with other attempts "
                        "(constrained and unconstrained: a point each)")
    c.add_argument("--out", type=Path, required=True, help="directory for the points and the runs' evidence")
    c.set_defaults(run=scaling_points)


def scaling_points(args) -> int:
    from dragonlab.reporting import scaling

    runs, attempts = [], []
    for arg in args.runs:
        run, _, judged = arg.partition("=")
        runs.append(Path(run))
        attempts.append((Path(judged) if judged else Path(run) / "attempts-test.jsonl").resolve())
    names = [(scaling.label(r), a.name) for r, a in zip(runs, attempts)]
    if len(set(names)) != len(names):
        raise UsageError("two runs share a directory name and an attempts file name "
                         f"({', '.join('/'.join(n) for n in names)}): OUT/<name>/ would mix them")
    points = [scaling.point(r, a) for r, a in zip(runs, attempts)]
    print(scaling.table(points))
    print(f"-> {scaling.write(points, runs, attempts, args.out)}")
    return 0


def summary_text(report) -> str:
    """A few lines of a `Report` for the terminal (`dragonlab demo` prints them too)."""
    lines = []
    for name, s in report.systems.items():
        cells = [f"{t} {s.task(t).correct:.1%}" for t in ("construction", "refinement") if s.task(t)]
        lines.append(f"{name}: per-attempt correctness {', '.join(cells)}")
    for name, by_budget in report.best_of_k_vs_metaschedule.items():
        cells = [f"N={n}: {r.geomean_latency_ratio:.3g}x ({r.workloads} wl)" if r.geomean_latency_ratio
                 else f"N={n}: -" for n, r in by_budget.items()]
        label = name if "best-of" in name else f"{name} best-of-{report.config.k}"
        lines.append(f"{label} latency / MetaSchedule at N: {', '.join(cells)}")
    lines += [f"warning: {w}" for w in report.audit.warnings()]
    return "\n".join(lines)


COMMANDS = [
    Command("compare", "two models' kernels on held-out prompts: faster beyond measured noise?", add_compare),
    Command("report", "the replication report: models against search, dlight, random and LLMs", add_report),
    Command("scaling", "the scaling curve: exact correctness and best-of-k of SFT runs, by data and size",
            add_scaling),
]
