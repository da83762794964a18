"""`dragonlab tune`: a PyTorch network's kernels written by the model, built into the network,
and measured against TVM's defaults and MetaSchedule (dragonlab.tune; docs/tune.md).

Its flags are TuneConfig's and MeasureConfig's fields (dragonlab.tune.config,
dragonlab.search.config), which set the model's attempts, MetaSchedule's budgets and the timing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dragonlab.cli.options import Command, command, config_from


def add_tune(sub, name: str, help: str):
    from dragonlab.search.config import MeasureConfig
    from dragonlab.tune.config import TuneConfig

    c = command(sub, name, help, configs=[TuneConfig, MeasureConfig],
                description="Import a PyTorch network (torch.export, TVM's Relax frontend), extract its MetaSchedule "
                            "tuning tasks, let the model write --attempts scripts per task and refine its fastest "
                            "--turns times (judged by the evaluator; "
                            "the fastest correct kernel per task goes into a JSONDatabase; tasks without one keep "
                            "TVM's default schedule), build the network with it, check its outputs against PyTorch "
                            "on fresh random inputs and time it, beside the untuned build and MetaSchedule's "
                            "tune_relax with the model's number of measurements and with --budget. Writes "
                            "OUT/tune.json and OUT/tune.html; rerunning the same command resumes.")
    c.add_argument("--model", required=True, metavar="FILE.py:FUNCTION",
                   help="FUNCTION() returns (torch.nn.Module, example_inputs); or a network of the repository: "
                        "resnet, mobilenet, transformer_block, mlp (the standard suite's)")
    c.add_argument("--dragon", type=Path, required=True,
                   help="the schedule-writing model: a model directory (sft's or rl's OUT/model)")
    c.add_argument("--out", type=Path, required=True, help="run directory (new, or the same run to resume)")
    c.add_argument("--target", default="cpu", help="a target name (`dragonlab targets`)")
    c.add_argument("--searches-from", type=Path, metavar="RUN",
                   help="take tune_relax's kernels, measurements and wall times from another run of this network "
                        "with the same search settings (e.g. results/tune/resnet) instead of searching: another "
                        "model against the same searches; everything is still timed in this run")
    c.set_defaults(run=tune)


def tune(args) -> int:
    import torch

    from dragonlab.search.config import MeasureConfig
    from dragonlab.tune import load, summary_text
    from dragonlab.tune import tune as run
    from dragonlab.tune.config import TuneConfig

    config = config_from(TuneConfig, args, measure=config_from(MeasureConfig, args))
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    start = time.monotonic()
    network = load(args.model, target=args.target)
    result = run(network, args.out, dragon=args.dragon, target=args.target, config=config,
                 searches_from=args.searches_from)
    print(summary_text(result))
    print(f"tuned in {time.monotonic() - start:.0f} s -> {args.out / 'tune.json'}, {args.out / 'tune.html'}")
    return 0


COMMANDS = [
    Command("tune", "tune a PyTorch network with the model, against TVM's defaults and MetaSchedule", add_tune),
]
