"""MetaSchedule JSONDatabases in and out: databases written by MetaSchedule itself (plain
`tune_tir` on the CPU, a sampled CUDA design space), not by dragonlab."""

import pytest
import tvm.s_tir.meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from dragonlab.cli import main
from dragonlab.core import tensor_intrinsics
from dragonlab.core.errors import InputError
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family
from dragonlab.search.explore import sample_traces
from dragonlab.search.measure import fast_build
from dragonlab.search.msdb import export_database, import_databases, read_database
from dragonlab.search.records import FAILED, OK, UNMEASURED, RecordStore

QUICK = first_of_each_family("quick")


@pytest.fixture(scope="module")
def tune_tir_db(tmp_path_factory):
    """A work dir written by plain `ms.tune_tir` (8 trials of a quick softmax on the CPU)."""
    work = tmp_path_factory.mktemp("tune_tir")
    target = get_target("cpu").tvm()
    # fast_build only skips the per-worker tensor_intrin import, so the stock builder's 30 s
    # limit is not hit on a busy 2-core machine, and `for_target` spares the TuneContext the same
    # import (a minute or two in a process that loaded torch); the database is MetaSchedule's own.
    with tensor_intrinsics.for_target(target):
        ms.tune_tir(QUICK["softmax"].mod, target, work_dir=str(work), max_trials_global=8,
                    num_trials_per_iter=8, strategy=ms.search_strategy.EvolutionarySearch(population_size=64),
                    builder=ms.builder.LocalBuilder(f_build=fast_build),
                    runner=ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(number=2, repeat=2)))
    return work


@pytest.fixture(scope="module")
def cuda_sampled_db(tmp_path_factory):
    """Sampled and post-processed CUDA candidates of a quick matmul, committed unmeasured."""
    work = tmp_path_factory.mktemp("cuda_db")
    w = QUICK["matmul"]
    target = get_target("cuda-sm80").tvm()
    samples = sample_traces(w, "cuda-sm80", n=6, seed=7)
    db = ms.database.JSONDatabase(work_dir=str(work))
    token = db.commit_workload(w.mod)
    for s in samples:
        db.commit_tuning_record(ms.database.TuningRecord(s.sch.trace, token, None, target,
                                                         ArgInfo.from_prim_func(w.mod["main"])))
    candidates = samples
    return work, len(candidates)


def test_tune_tir_database_imports_with_latencies_and_failures_kept(tune_tir_db, tmp_path):
    workloads, records = read_database(tune_tir_db)
    assert [w.family for w in workloads] == ["imported"]
    assert workloads[0].key == QUICK["softmax"].key
    assert len(records) == 8 and {r.target for r in records} == {"cpu"}
    assert all(r.status in (OK, FAILED) for r in records)
    assert any(r.status == OK for r in records)
    for r in records:
        if r.status == OK:
            assert len(r.latencies) == 2 and all(0 < s < 1 for s in r.latencies)
    store = RecordStore(tmp_path / "store", create=True)
    assert import_databases([tune_tir_db], store) == 8
    assert import_databases([tune_tir_db], store) == 0  # importing twice adds nothing


def test_cuda_design_space_database_imports_as_unmeasured_traces(cuda_sampled_db, capsys, tmp_path):
    work, n = cuda_sampled_db
    _, records = read_database(work)
    assert len(records) == n > 0
    assert all(r.status == UNMEASURED and r.target == "cuda-sm80" for r in records)
    assert any(inst[0] == "Bind" for inst in records[0].trace[0])
    assert main(["records", "stats", str(work)]) == 0
    out = capsys.readouterr().out
    assert f"unmeasured {n}" in out and "cuda-sm80" in out


def test_stats_reads_databases_and_stores_alike(tune_tir_db, tmp_path, capsys):
    assert main(["records", "import", str(tune_tir_db), "--out", str(tmp_path / "s")]) == 0
    capsys.readouterr()
    assert main(["records", "stats", str(tune_tir_db)]) == 0
    from_db = capsys.readouterr().out
    assert main(["records", "stats", str(tmp_path / "s")]) == 0
    assert capsys.readouterr().out == from_db
    assert "total: 8 records" in from_db


def test_export_round_trips_and_never_overwrites(tune_tir_db, tmp_path):
    store = RecordStore(tmp_path / "store", create=True)
    import_databases([tune_tir_db], store)
    out = tmp_path / "exported"
    assert export_database(store, out, "cpu") == 8
    _, again = read_database(out)
    assert {(r.workload, r.status, r.latencies) for r in again} == \
        {(r.workload, r.status, r.latencies) for r in store.records()}
    with pytest.raises(InputError, match="exists and is not empty"):
        export_database(store, out, "cpu")


def test_import_of_a_broken_database_names_it(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "database_workload.json").write_text('["1", "not base64!"]\n')
    (bad / "database_tuning_record.json").write_text("")
    assert main(["records", "import", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dragonlab: error:") and str(bad) in err
