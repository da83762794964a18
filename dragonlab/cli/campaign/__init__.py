"""A campaign: every stage's settings at one scale in one TOML file, and a dry run of it.

    c = campaign.load("campaigns/paper.toml")     # CampaignError names the file and the field
    checks = campaign.dry_run(c)                  # what can be checked here, without a GPU
    print(campaign.format_checks(c, checks))
    print(campaign.format_estimate(c, campaign.estimate(c, checks), checks))

`campaigns/quick.toml` is what `dragonlab demo` runs, `standard.toml` the CPU corpus and its
model, `paper.toml` the paper's scale on GPUs (docs/scale.md). Sections are the stages' own
configs (`CollectConfig`, `DatasetConfig`, `SFTConfig`, `RLConfig`, `ReportConfig`): a key is a
field, a key left out takes that field's default, and `load` builds every config once, so a
setting the stage would refuse is refused here, before any work. Relative paths are read from
the directory the command runs in (the repository root, for the shipped files).

Modules: `file` (sections and load), `dryrun` (the checks), `estimate` (device-hours, the
commands a campaign runs, the demo it is).
"""

from dragonlab.cli.campaign.dryrun import Check, accelerate_check, dry_run, format_checks
from dragonlab.cli.campaign.estimate import QUICK, Row, benchmark, demo_options, estimate, format_estimate, plan
from dragonlab.cli.campaign.file import (REQUIRED, SECTIONS, Campaign, CampaignError, Collect, DryRun, Estimate, Lora,
                                         SFT, collect_config, dataset_config, load, report_config, rl_config,
                                         sft_config)

__all__ = ["Campaign", "CampaignError", "Check", "Collect", "DryRun", "Estimate", "Lora", "QUICK", "REQUIRED", "Row",
           "SECTIONS", "SFT", "accelerate_check", "benchmark", "collect_config", "dataset_config", "demo_options",
           "dry_run", "estimate", "format_checks", "format_estimate", "load", "plan", "report_config", "rl_config",
           "sft_config"]
