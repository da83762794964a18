"""`dragonlab tune` end to end on a network written for the tests, with the tiny model: every
build's outputs match PyTorch, the tables say which tasks kept TVM's defaults, a rerun resumes,
and a network that does not import fails naming the op, before anything is written."""

import json
import logging
import shutil

import pytest

from dragonlab.cli import main
from dragonlab.tune.tuning import DRAGON, UNTUNED, TuneResult, tune_relax
from conftest import TUNE_FLAGS, TUNE_NETWORK


def test_tune_builds_every_system_and_matches_pytorch(tuned, tiny):
    result = TuneResult.from_json(json.loads((tuned / "tune.json").read_text()))
    assert [s.system for s in result.systems] == [UNTUNED, DRAGON, tune_relax(4), tune_relax(8)]
    assert [t.name.split("_", 2)[-1] for t in result.tasks] == [
        "fused_matmul1_add1_add2", "fused_matmul_add_relu", "transpose", "transpose1"]
    for s in result.systems:  # real builds, checked on 2 fresh input sets and timed end to end
        assert s.stage == "ok", (s.system, s.reason)
        assert 0 <= s.max_error <= 1 and len(s.latencies) == 3 and all(0 < t < 1 for t in s.latencies)
    untuned = result.system(UNTUNED)
    assert untuned.seconds is None and untuned.measurements == 0
    dragon = result.system(DRAGON)
    assert dragon.measurements == 4 and dragon.seconds > 0  # one script per task
    for t in result.tasks:  # the fastest correct attempt, or TVM's default schedule: said which
        assert (t.name in dragon.defaults) == (t.latencies[DRAGON] is None) == (t.dragon_correct == 0)
        assert t.unscheduled > 0 and t.weight == 1
    for n in (4, 8):  # tune_relax: every task scheduled, n measurements at most in all
        ms = result.system(tune_relax(n))
        assert ms.defaults == () and 4 <= ms.measurements <= n and ms.seconds > 0
        assert all(t.latencies[tune_relax(n)] > 0 for t in result.tasks)
        assert (tuned / f"tune_relax-{n}" / "database_tuning_record.json").is_file()  # every candidate kept
    # what a user reuses: the databases MetaSchedule reads, the builds, the page
    for system in (DRAGON, tune_relax(4)):
        db = tuned / "databases" / system
        lines = (db / "database_tuning_record.json").read_text().splitlines()
        assert len(lines) == 4 - (len(dragon.defaults) if system == DRAGON else 0)
    assert "tune_relax@8" in (tuned / "tune.html").read_text()


def test_tune_resumes_where_it_stopped_and_refuses_another_run_in_its_directory(tuned, tiny, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tuned, run)
    log = run / "networks.jsonl"  # as if killed while the last build was timed, after it was built
    measured = log.read_text().splitlines()
    log.write_text("\n".join(measured[:-1]) + "\n")
    (run / "tune.json").unlink()
    builds = {p.name: p.stat().st_mtime_ns for p in (run / "builds").iterdir()}
    args = ["tune", "--model", TUNE_NETWORK, "--dragon", str(tiny[0].model_dir), "--out", str(run)]
    assert main([*args, *TUNE_FLAGS]) == 0
    again = log.read_text().splitlines()
    assert again[:-1] == measured[:-1] and json.loads(again[-1])["system"] == tune_relax(8)
    assert {p.name: p.stat().st_mtime_ns for p in (run / "builds").iterdir()} == builds  # none built again
    result = json.loads((run / "tune.json").read_text())
    assert [s["system"] for s in result["systems"]] == [UNTUNED, DRAGON, tune_relax(4), tune_relax(8)]
    assert result["tasks"] == json.loads((tuned / "tune.json").read_text())["tasks"]  # kept, not timed again
    assert "dragon at least as fast as tune_relax@4" in capsys.readouterr().out
    before = (run / "tune.json").read_text()
    assert main([*args, "--attempts", "2", "--budget", "2", "--checks", "2"]) == 2
    assert "holds another run" in capsys.readouterr().err and (run / "tune.json").read_text() == before


def test_another_model_is_measured_against_the_searches_of_another_run(tuned, tiny, tmp_path, monkeypatch, capsys):
    """`--searches-from RUN`: tune_relax's kernels, measurements and wall times are RUN's, nothing
    is searched, and everything is timed again here; a run with other search settings is refused
    before anything is written."""
    from dragonlab.tune import tuning

    monkeypatch.setattr(tuning, "_tune_relax", lambda *args, **kwargs: pytest.fail("searched again"))
    run = tmp_path / "again"
    args = ["tune", "--model", TUNE_NETWORK, "--dragon", str(tiny[0].model_dir), "--searches-from", str(tuned)]
    assert main([*args, "--out", str(run), *TUNE_FLAGS]) == 0
    assert "tune_relax's kernels, measurements and tuning times are those of" in capsys.readouterr().out
    first, again = (json.loads((d / "tune.json").read_text()) for d in (tuned, run))
    chosen = [json.loads((d / "chosen.json").read_text()) for d in (tuned, run)]
    for n in (4, 8):
        assert chosen[1][tune_relax(n)] == chosen[0][tune_relax(n)]
        measured = [{s["system"]: (s["measurements"], s["seconds"]) for s in r["systems"]}[tune_relax(n)]
                    for r in (first, again)]
        assert measured[1] == measured[0]
    assert all(s["stage"] == "ok" for s in again["systems"]) and again["config"]["searches_from"]["run"] == str(tuned)
    assert (run / "networks.jsonl").read_text() != (tuned / "networks.jsonl").read_text()  # timed here
    other = tmp_path / "other"
    assert main([*args, "--out", str(other), *TUNE_FLAGS[:-2], "--checks", "2", "--population", "32"]) == 2
    assert "its population is 64, this run's 32, so its searches are not this run's" in capsys.readouterr().err
    assert not other.exists()
    # a run written before a setting existed had its default: a tune.json without `population` (the
    # default, 512) and without one of `measure`'s fields is still this run's search at 512
    from dragonlab.core.targets import get_target
    from dragonlab.tune import TuneConfig, load
    from dragonlab.tune.config import POPULATION

    older = tmp_path / "older"
    shutil.copytree(tuned, older)
    written = json.loads((older / "tune.json").read_text())
    del written["config"]["population"], written["config"]["measure"]["retries"]
    (older / "tune.json").write_text(json.dumps(written))
    network, spec = load(TUNE_NETWORK), get_target("cpu")
    config = TuneConfig(attempts=1, budget=8, checks=2, population=POPULATION)
    reused = tuning._searches(older, network, spec, network.workloads(spec.tvm()), config)
    assert reused[tune_relax(8)][1:] == measured[0]


def test_builds_are_timed_in_turn_one_repeat_each_per_round():
    """A slow spell of the machine falls on every build alike: round r times repeat r of each
    build, in turn; a build whose timing fails stops there, and the others go on."""
    import threading
    from types import SimpleNamespace

    from dragonlab.evaluation.workers import WorkerError
    from dragonlab.search.config import MeasureConfig
    from dragonlab.tune.config import TuneConfig
    from dragonlab.tune.tuning import _time_in_turn

    calls = []

    def call(fn, artifact, data, target, number, repeat, min_repeat_ms):
        calls.append((artifact, repeat))
        if artifact == "b.so" and len(calls) > 3:
            raise WorkerError("killed by signal 9", "time")
        return [len(calls) * 1e-3]

    evaluator = SimpleNamespace(timing_lock=threading.Lock(), timer=SimpleNamespace(call=call))
    checked = {"a": ("a.so", 0.1), "b": ("b.so", 0.2), "c": ("c.so", None)}
    config = TuneConfig(measure=MeasureConfig(repeat=3))
    timed = _time_in_turn("net", checked, SimpleNamespace(config={}), evaluator, "data.npz", config, progress=False)
    assert [a for a, _ in calls] == ["a.so", "b.so", "c.so", "a.so", "b.so", "c.so", "a.so", "c.so"]
    assert all(repeat == 1 for _, repeat in calls)
    assert timed["a"].stage == timed["c"].stage == "ok" and timed["a"].latencies == (1e-3, 4e-3, 7e-3)
    assert timed["c"].latencies == (3e-3, 6e-3, 8e-3) and timed["a"].max_error == 0.1
    assert timed["b"].stage == "time" and "killed by signal 9" in timed["b"].reason and timed["b"].max_error == 0.2


@pytest.mark.parametrize("spec, messages", [
    ("tests/tune/networks.py:eigenvalues", ("tests/tune/networks.py:eigenvalues: TVM's Relax frontend cannot import "
                                            "it: Unsupported function types [", "'linalg_eig.default'")),
    ("tests/tune/networks.py:missing", ("tests/tune/networks.py: no function 'missing'",)),
    ("tests/tune/networks.py", ("expected FILE.py:FUNCTION",)),
    (TUNE_NETWORK, ("not a model directory (no config.json)",)),  # --dragon is an empty directory
])
def test_a_network_that_does_not_import_or_a_missing_model_is_named(spec, messages, tmp_path, capsys):
    assert main(["tune", "--model", spec, "--dragon", str(tmp_path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert all(m in err for m in messages), err
    assert not (tmp_path / "run").exists()


def test_a_network_of_the_repository_loads_by_name_with_the_suites_weights_and_tasks():
    """`--model mlp` is the network the standard suite's `mlp` tasks come from: same weights
    (seed 0, whatever the global seed), same task keys."""
    import numpy as np
    import torch

    from dragonlab.core.networks import extract_model_workloads
    from dragonlab.tune.network import load

    torch.manual_seed(123)
    net, again = load("mlp"), load("mlp")
    assert net.name == "mlp" and net.inputs == (([8, 64], "float32"),)
    assert all(np.array_equal(a, b) for a, b in zip(net.params, again.params, strict=True))
    assert [w.key for w in net.workloads("cpu")] == [w.key for w in extract_model_workloads("mlp")]


def test_a_relax_module_is_checked_against_its_untuned_build_and_torch_against_eager(tmp_path):
    """The reference a build is checked against: PyTorch eager for a torch network; TVM's
    untuned build for a Relax module given as it is. On the same network, they agree."""
    import numpy as np

    from dragonlab.tune.network import from_relax, load, reference_data
    from dragonlab.evaluation.replay import error_ratio

    torch_net = load(TUNE_NETWORK)
    relax_net = from_relax(torch_net.mod, torch_net.params, name="residual_mlp")
    assert relax_net.inputs == torch_net.inputs == (([4, 16], "float32"),)
    eager = np.load(reference_data(torch_net, tmp_path / "eager.npz", checks=2, seed=3))
    untuned = np.load(reference_data(relax_net, tmp_path / "untuned.npz", checks=2, seed=3))
    assert sorted(eager.files) == sorted(untuned.files) == [
        "expected0_0", "expected1_0", "input0_0", "input1_0", "param0", "param1", "param2", "param3"]
    assert not np.array_equal(eager["input0_0"], eager["input1_0"])  # fresh inputs per set
    for name in eager.files:
        assert error_ratio(untuned[name], eager[name]) <= 1, name


def test_a_handler_on_metaschedules_logger_does_not_stop_tune_relax(tmp_path):
    """TVM's `tune_relax` configures its logger naming every handler on it and fails on one it
    did not make (a user's, or the one pytest attaches to loggers that do not propagate): tune
    sets such handlers aside while it searches, and puts them back."""
    from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir

    from dragonlab.tune.tuning import _foreign_handlers_set_aside

    logger, mine = logging.getLogger("tvm.s_tir.meta_schedule"), logging.NullHandler()
    logger.addHandler(mine)
    try:
        with pytest.raises(AttributeError):  # TVM alone; when this fails, the workaround can go
            get_loggers_from_work_dir(str(tmp_path / "alone"), ["task"])
        with _foreign_handlers_set_aside():
            assert mine not in logger.handlers
            (task,) = get_loggers_from_work_dir(str(tmp_path / "aside"), ["task"])
        assert mine in logger.handlers and (tmp_path / "aside" / "logs").is_dir()
    finally:
        logger.removeHandler(mine)


def test_the_model_refines_its_fastest_kernel_in_turns_and_a_killed_run_resumes_them(tuned, tiny, tmp_path):
    """`--turns T`: after its attempts, the model is shown the fastest correct kernel of each task
    so far and asked for a faster one, T times; each turn is a measurement, which tune_relax's N
    counts, and stored searches are reused only for as many measurements per task."""
    from dragonlab.core.errors import InputError
    from dragonlab.core.targets import get_target
    from dragonlab.evaluation.evaluate import Evaluator
    from dragonlab.tune import TuneConfig, load, tuning

    network, spec = load(TUNE_NETWORK), get_target("cpu")
    workloads = network.workloads(spec.tvm())
    config = TuneConfig(attempts=1, turns=2, budget=8, population=64, checks=2)
    assert config.search_budgets(len(workloads)) == (12, 8)
    with Evaluator(spec) as evaluator:
        attempts, seconds = tuning._dragon(workloads, spec, tmp_path, tiny[0].model_dir, evaluator, config, False)
        assert seconds > 0
        assert sorted((a.index, a.sample) for a in attempts) == [(i, s) for i in range(4) for s in range(3)]
        written = (tmp_path / "turns.jsonl").read_text().splitlines()
        lines = [json.loads(line) for line in written]
        assert [(d["index"], d["turn"]) for d in lines] == [(i, t) for t in (1, 2) for i in range(4)]
        correct = {(a.index, a.sample): a.evaluation.correct for a in attempts}
        for d in lines:  # a refinement of the fastest correct kernel so far, else a construction again
            assert (d["task"] == "refinement") == any(correct[(d["index"], s)] for s in range(d["turn"]))
        first = (tmp_path / "attempts.jsonl").read_text()
        (tmp_path / "turns.jsonl").write_text("\n".join(written[:5]) + "\n")  # killed during the 2nd turn
        again, _ = tuning._dragon(workloads, spec, tmp_path, tiny[0].model_dir, evaluator, config, False)
    assert (tmp_path / "attempts.jsonl").read_text() == first  # not written again
    assert (tmp_path / "turns.jsonl").read_text().splitlines() == written  # the same seeds: the same scripts
    assert [a.to_json() for a in again] == [a.to_json() for a in attempts]
    assert len((tmp_path / "seconds.jsonl").read_text().splitlines()) == 1  # a resumed run's time is unknown
    with pytest.raises(InputError, match="its measurements per task is 1, this run's 3, so its searches"):
        tuning._searches(tuned, network, spec, workloads, config)
