"""Campaign files: the shipped ones load, malformed ones get one error naming file and field, the
paper's dry run passes on a CPU machine and prints the estimate, and quick.toml is the demo."""

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from dragonlab.cli import campaign, main, pipeline

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGNS = ROOT / "campaigns"


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dragonlab: error: "), err
    return err[0]


@pytest.mark.parametrize("name", ["quick", "standard", "paper"])
def test_every_shipped_campaign_loads(name):
    c = campaign.load(CAMPAIGNS / f"{name}.toml")
    assert c.collect.suite == name
    assert c.collect.target == ("cuda-sm90" if name == "paper" else "cpu")
    assert campaign.plan(c)[0].startswith("# collect")


def test_paper_dry_run_passes_and_prints_the_estimate(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the file's paths (the accelerate config) are read from the repository root
    start = time.monotonic()
    code = main(["campaign", "--config", "campaigns/paper.toml", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert time.monotonic() - start < 120
    assert "the first 200 of 54,116 paper workloads generated" in out
    assert re.search(r"ok +model +.*8\.03B parameters on the meta device; LoRA r=16: 41\.94M trainable", out)
    assert re.search(r"ok +target cuda-sm90 +.* characters of CUDA source for sm_90", out)
    assert "7 checks" in out and "0 failed" in out
    # 54,116 x 32 candidates at the file's 1 s each; 8,000 steps x 32 examples x 800 tokens at 1,500 tokens/s
    assert re.search(r"^  collect +candidates +1,731,712 +54,116 workloads \[suite\] x 32 trials +1 s \[file\] "
                     r"+481\.03$", out, re.M), out
    assert re.search(r"^  sft +training tokens +204,800,000 .* 1,500 tokens/s \[file\] +37\.93$", out, re.M), out
    # the report's side-by-side timing: 108 workloads x 10 best kernels, and RL vs SFT's 108 x (4 + 2 x 4) pairs x 2
    assert re.search(r"^  report +kernels timed side by side +3,672 +108 workloads x 10 best kernels .* RL vs SFT's "
                     r"1,296 pairs x 2 .* +1\.02$", out, re.M), out
    assert re.search(r"^  total [\d,.]+ device-hours; wall-clock with 8 collecting machine\(s\) and 8 training "
                     r"device\(s\): collect 60\.13 h, sft 4\.74 h", out, re.M), out


@pytest.mark.parametrize("change, message", [
    (("[sft]", "[sft]\nbogus = 1"), r"\[sft\] bogus: unknown key; known: preset, full_finetune, max_steps"),
    (("[dry_run]", "[dryrun]"), r"dryrun: unknown section or key; known: out, \[collect\]"),
    (("max_steps = 8000", "max_steps = -3"), r"\[sft\] max_steps: expected a positive integer, got -3"),
    (("max_steps = 8000", 'max_steps = "many"'), r"\[sft\] max_steps: expected a positive integer, got 'many'"),
    (("trials = 32", "trials = true"), r"\[collect\] trials: expected a positive integer, got True"),
    (('target = "cuda-sm90"', 'target = "cuda-sm100"'),
     r"\[collect\] target: expected one of 'cpu', 'cuda-sm80', .*, got 'cuda-sm100'"),
    (('runner = "local"', 'runner = "rpc"'),
     r"\[collect\] CollectConfig\.tracker: missing \(runner 'rpc' needs tracker HOST:PORT and key\)"),
    (("hidden_size = 4096", "hidden_sise = 4096"), r"\[sft\.architecture\] hidden_sise: not a field of "
                                                   r"transformers\.LlamaConfig"),
    (("seconds_per_candidate = 1.0", ""), r"\[estimate\] seconds_per_candidate: missing"),
    (("num_generations = 8", "num_generations = 1"), r"\[rl\] RLConfig\.num_generations must be at least 2"),
    (("[report]", "[report"), r"not TOML"),
])
def test_a_malformed_campaign_gets_one_error_naming_file_and_field(tmp_path, capsys, change, message):
    text = (CAMPAIGNS / "paper.toml").read_text()
    assert change[0] in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(change[0], change[1], 1))
    assert main(["campaign", "--config", str(bad), "--dry-run"]) == 2
    error = _one_error(capsys)
    assert error.startswith(f"dragonlab: error: {bad}: ") and re.search(message, error), error


def test_a_missing_campaign_file_is_a_usage_error(tmp_path, capsys):
    assert main(["campaign", "--config", str(tmp_path / "none.toml"), "--dry-run"]) == 2
    assert "none.toml: no such campaign file" in _one_error(capsys)


@pytest.mark.parametrize("name", ["quick", "standard", "paper", "standard with [rl.reward]"])
def test_the_printed_commands_train_with_every_setting_of_the_file(name, tmp_path):
    """`dragonlab sft`, `rl` and `report` as the plan prints them, parsed by dragonlab's own
    parser, give the file's settings (one left out would train or judge something else)."""
    import shlex

    from dragonlab.cli.app import build_parser
    from dragonlab.cli.options import config_from
    from dragonlab.evaluation.reward import RewardConfig
    from dragonlab.learn.rl import RLConfig
    from dragonlab.learn.sft import SFTConfig
    from dragonlab.reporting.config import ReportConfig

    path = CAMPAIGNS / f"{name.split()[0]}.toml"
    if "[rl.reward]" in name:  # a nested config: its flags are the reward's own
        path = tmp_path / "reward.toml"
        path.write_text((CAMPAIGNS / "standard.toml").read_text() + "\n[rl.reward]\nbonus_weight = 0.3\nrun = -0.5\n")
    c = campaign.load(path)
    assert "[rl.reward]" not in name or (c.rl.reward.bonus_weight, c.rl.reward.run) == (0.3, -0.5)
    argv = {}
    for stage in ("sft", "rl", "report"):
        words = shlex.split(next(line for line in campaign.plan(c) if f" {stage} --" in line))
        argv[stage] = words[words.index(stage):]
    sft = build_parser(argv["sft"]).parse_args(argv["sft"])
    rl = build_parser(argv["rl"]).parse_args(argv["rl"])
    assert config_from(SFTConfig, sft) == campaign.sft_config(c)
    assert config_from(RLConfig, rl, reward=config_from(RewardConfig, rl)) == \
        campaign.rl_config(c)
    report = build_parser(argv["report"]).parse_args(argv["report"])
    assert config_from(ReportConfig, report) == campaign.report_config(c)


def test_a_campaign_other_than_quick_prints_its_commands_and_exits_2(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["campaign", "--config", "campaigns/paper.toml"]) == 2
    captured = capsys.readouterr()
    assert ("accelerate launch --config_file configs/accelerate/fsdp-8b-lora.yaml -m dragonlab.cli sft "
            "--data runs/paper/dataset --out runs/paper/sft --preset /models/Llama-3.1-8B") in captured.out
    assert "--shard I/8" in captured.out
    assert "only --dry-run is implemented for this campaign" in captured.err


def test_the_quick_campaign_runs_the_demo_with_its_numbers(tmp_path, monkeypatch):
    """`campaign --config quick.toml` is `dragonlab demo`: the notebooks get the file's numbers
    (the notebooks, the codec check and the report reading are stubbed out here)."""
    import papermill

    import dragonlab.reporting.report

    text = (CAMPAIGNS / "quick.toml").read_text().replace('out = "runs/demo"', f'out = "{tmp_path}"')
    quick = tmp_path / "quick.toml"
    quick.write_text(text.replace("max_steps = 200", "max_steps = 20"))
    ran = {}
    monkeypatch.setattr(papermill, "execute_notebook", lambda src, dst, parameters, **_: ran.update(
        {Path(src).stem: parameters}))
    monkeypatch.setattr(pipeline, "main", lambda argv: ran.update({"codec": argv}) or 0)  # the demo's codec check
    monkeypatch.setattr(dragonlab.reporting.report, "read_report", lambda path: None)
    monkeypatch.setattr(pipeline, "summary_text", lambda report: "")
    monkeypatch.setenv("TQDM_DISABLE", "1")  # the demo sets it; restored after the test
    assert main(["campaign", "--config", str(quick)]) == 0
    c = campaign.load(quick)
    assert ran["03_dataset"]["trials"] == c.collect.trials and ran["03_dataset"]["holdout_family"] == "softmax"
    assert ran["03_dataset"]["population"] == c.collect.population == 64  # the report's baseline keeps 512
    assert ran["04_sft"]["preset"] == c.sft.preset and ran["04_sft"]["max_steps"] == 20
    assert ran["04_sft"]["model"] is None  # the demo trains its own model, not the shipped one
    from dragonlab.learn.models import PRESETS

    assert (c.sft.batch_size, c.sft.learning_rate) == (PRESETS[c.sft.preset].batch_size,
                                                       PRESETS[c.sft.preset].learning_rate)
    rl = campaign.rl_config(c)
    assert (ran["05_rl"]["max_steps"], ran["05_rl"]["num_generations"], ran["05_rl"]["prompts_per_step"],
            ran["05_rl"]["constrained"]) == (rl.max_steps, rl.num_generations, rl.prompts_per_step, rl.constrained)
    report = campaign.report_config(c)
    assert (ran["06_evaluate"]["k"], tuple(ran["06_evaluate"]["budgets"]), ran["06_evaluate"]["turns"],
            ran["06_evaluate"]["refinement_per_workload"], ran["06_evaluate"]["constrained"]) == \
        (report.k, report.budgets, report.turns, report.refinement_per_workload, report.constrained)
    assert ran["codec"] == ["codec", "check", str(tmp_path / "records")]


def test_the_demo_options_default_to_the_quick_campaign():
    from dragonlab.cli.app import build_parser

    args = build_parser(["demo"]).parse_args(["demo"])
    assert campaign.demo_options(campaign.load(CAMPAIGNS / "quick.toml")) == {
        "out": args.out, "trials": args.trials, "preset": args.preset, "sft_steps": args.sft_steps,
        "rl_steps": args.rl_steps}


def test_a_quick_campaign_with_other_settings_is_not_the_demo():
    c = campaign.load(CAMPAIGNS / "quick.toml")
    assert campaign.demo_options(c)["sft_steps"] == 200
    assert campaign.demo_options(replace(c, report=replace(c.report, k=4))) is None
    assert campaign.demo_options(replace(c, sft=replace(c.sft, learning_rate=1e-3))) is None
    assert campaign.demo_options(replace(c, collect=replace(c.collect, population=512))) is None


def test_the_accelerate_check_names_what_is_wrong(tmp_path):
    assert campaign.accelerate_check(tmp_path / "none.yaml", 8) == campaign.Check(
        "accelerate config", False, f"{tmp_path / 'none.yaml'}: not found")
    good = tmp_path / "good.yaml"
    good.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_machines: 1\n"
                    "num_processes: 2\nmixed_precision: 'no'\n")
    assert campaign.accelerate_check(good, 2).ok
    assert "the campaign trains on 8" in campaign.accelerate_check(good, 8).detail
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(good.read_text() + "num_procesess: 2\n")
    check = campaign.accelerate_check(unknown, 2)
    assert not check.ok and "unknown keys (['num_procesess'])" in check.detail
    broken = tmp_path / "broken.yaml"
    broken.write_text("distributed_type: [MULTI_GPU\n")
    assert not campaign.accelerate_check(broken, 2).ok


def test_the_demo_shows_each_stage_and_keeps_kernel_warnings_in_its_log(tmp_path, monkeypatch, capfd):
    """What a user sees: a header per stage with the time left, the notebooks' cell bars, the
    total; what kernels and TVM write to their stderr goes to OUT/demo.log instead."""
    import subprocess
    import sys

    import papermill

    import dragonlab.reporting.report

    def notebook(src, dst, parameters, progress_bar, **_):  # a kernel that warns, and papermill's bar
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('Kernel is running over TCP "
                        "without encryption.\\nTrace replay failed\\n')"], check=True)
        assert progress_bar["disable"] is False and progress_bar["desc"] == Path(src).stem

    monkeypatch.setattr(papermill, "execute_notebook", notebook)
    monkeypatch.setattr(pipeline, "main", lambda argv: 0)
    monkeypatch.setattr(dragonlab.reporting.report, "read_report", lambda path: None)
    monkeypatch.setattr(pipeline, "summary_text", lambda report: "")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert main(["demo", "--out", str(tmp_path)]) == 0
    out, err = capfd.readouterr()
    total = sum(pipeline.DEMO_SECONDS.values())  # before any stage ran, the reference times themselves
    assert f"[1/5] 03_dataset (about {total // 60} min {total % 60:02d} s left)" in out
    assert "[5/5] 06_evaluate (about" in out
    assert "demo finished in 0 min" in out and "report: " in out
    assert "without encryption" not in out + err and "Trace replay failed" not in out + err
    log = (tmp_path / "demo.log").read_text()
    assert log.count("without encryption") == 4 and log.count("Trace replay failed") == 4  # one per notebook
