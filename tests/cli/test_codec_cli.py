"""`dragonlab codec check` and `codec show` on a JSONDatabase that MetaSchedule wrote itself."""

import json
import re

import pytest
import tvm.s_tir.meta_schedule as ms
from tvm.s_tir.meta_schedule.arg_info import ArgInfo

from dragonlab.cli import main
from dragonlab.core.targets import get_target
from dragonlab.core.workloads import first_of_each_family
from dragonlab.evaluation import codec_check
from dragonlab.search.explore import sample_traces
from dragonlab.search.msdb import import_databases
from dragonlab.search.records import RecordStore

QUICK = first_of_each_family("quick")
SUMMARY = re.compile(r"exact: (\d+)/(\d+), chars vs as_python: (\d+\.\d\d)x, vs json: (\d+\.\d\d)x")


@pytest.fixture(scope="module")
def sampled_db(tmp_path_factory):
    """8 sampled, postprocessed candidates committed unmeasured (as test_msdb's CUDA recipe):
    5 of a quick matmul on the CPU, 3 of a quick softmax on CUDA."""
    work = tmp_path_factory.mktemp("codec_db")
    db = ms.database.JSONDatabase(work_dir=str(work))
    for family, target_name, n in (("matmul", "cpu", 5), ("softmax", "cuda-sm80", 3)):
        w, target = QUICK[family], get_target(target_name).tvm()
        token = db.commit_workload(w.mod)
        for s in sample_traces(w, target_name, n=n, seed=7):
            db.commit_tuning_record(ms.database.TuningRecord(s.sch.trace, token, None, target,
                                                             ArgInfo.from_prim_func(w.mod["main"])))
    assert len((work / "database_tuning_record.json").read_text().splitlines()) == 8
    return work


def store_with(db, tmp_path, edit) -> tuple:
    """The database imported into a record store, with `edit(trace)` applied to record 2's trace."""
    store = RecordStore(tmp_path / "store", create=True)
    import_databases([db], store)
    path = tmp_path / "store" / "records.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    edit(record["trace"])
    lines[2] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    return tmp_path / "store", record


def test_check_finds_every_trace_exact_and_prints_one_summary_line(sampled_db, capsys):
    assert main(["codec", "check", str(sampled_db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and SUMMARY.fullmatch(out[0]), out
    _, _, python, json_ratio = SUMMARY.fullmatch(out[0]).groups()
    assert out[0].startswith("exact: 8/8, ") and float(python) > 3 and float(json_ratio) > 2


def test_check_reports_a_trace_that_cannot_be_encoded(sampled_db, tmp_path, capsys):
    def bogus(trace):
        fuse = next(inst for inst in trace[0] if inst[0] in ("Fuse", "Split"))
        fuse[0] = "FuseBogus"

    store, record = store_with(sampled_db, tmp_path, bogus)
    assert main(["codec", "check", str(store)]) == 1
    out = capsys.readouterr().out.splitlines()
    index = next(i for i, inst in enumerate(record["trace"][0]) if inst[0] == "FuseBogus")
    assert re.fullmatch(rf"not exact: record 2 \(\S+ on cpu\): encode: instruction {index}: "
                        r"unknown instruction kind 'FuseBogus'", out[0]), out[0]
    assert len(out) == 2 and SUMMARY.fullmatch(out[1]) and out[1].startswith("exact: 7/8, ")


def test_check_reports_a_trace_that_does_not_apply_to_its_workload(sampled_db, tmp_path, capsys):
    def rename_block(trace):
        get = next(inst for inst in trace[0] if inst[0] == "GetSBlock")
        get[2][0] = "no_such_block"

    store, _ = store_with(sampled_db, tmp_path, rename_block)
    assert main(["codec", "check", str(store)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert re.match(r"not exact: record 2 \(\S+ on cpu\): the stored trace does not apply to its workload: ",
                    out[0]) and "no_such_block" in out[0], out[0]
    assert out[-1].startswith("exact: 7/8, ")


def test_check_refuses_a_database_with_an_unregistered_instruction(sampled_db, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "database_workload.json").write_text((sampled_db / "database_workload.json").read_text())
    lines = (sampled_db / "database_tuning_record.json").read_text().splitlines()
    lines[2] = lines[2].replace('"GetLoops"', '"GetLoopsBogus"', 1)
    (bad / "database_tuning_record.json").write_text("\n".join(lines) + "\n")
    assert main(["codec", "check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dragonlab: error:") and str(bad) in err and "GetLoopsBogus" in err


def test_a_lossy_codec_is_caught_with_instruction_and_field(sampled_db, monkeypatch, capsys):
    real = codec_check.codec.decode

    def lossy(script):  # drops Split's disable_predication, as a buggy codec might
        plain = real(script)
        for inst in plain[0]:
            if inst[0] == "Split":
                inst[2][1] = 0
        return plain

    monkeypatch.setattr(codec_check.codec, "decode", lossy)
    assert main(["codec", "check", str(sampled_db)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 9 and out[-1].startswith("exact: 0/8, ")
    assert re.fullmatch(r"not exact: record 0 \(\S+ on cpu\): round trip: "
                        r"instruction \d+ \(Split\) attrs\[1\]: expected false, got 0", out[0]), out[0]


def test_first_difference_names_instruction_field_and_decision():
    plain = [[["GetSBlock", [], ["C", "main"], ["b0"]], ["GetLoops", ["b0"], [], ["l1", "l2"]],
              ["SamplePerfectTile", ["l1"], [2, 64], ["v3", "v4"]]], [[2, [4, 16]]]]
    changed = json.loads(json.dumps(plain))
    assert codec_check.first_difference(plain, changed) is None
    changed[0][1][3] = ["l1"]
    assert codec_check.first_difference(plain, changed) == "instruction 1 (GetLoops) outputs: expected 2 items, got 1"
    changed = json.loads(json.dumps(plain))
    changed[1][0][1] = [16, 4]
    assert codec_check.first_difference(plain, changed) == "decision of instruction 2: expected [4, 16], got [16, 4]"
    assert codec_check.first_difference(plain, [plain[0][:2], []]) == "instruction count: expected 3, got 2"


def test_show_prints_the_script_beside_python_then_the_scheduled_tir(sampled_db, capsys):
    assert main(["codec", "show", str(sampled_db), "--index", "6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("record 6 of 8: ") and "on cuda-sm80 (unmeasured)" in out
    script, rest = out.split("scheduled TIR (sch.mod.script())")
    header = script.splitlines()[2]
    assert re.match(r"script \(\d+ chars\) +\| as_python \(\d+ chars\)", header), header
    assert re.search(r"^bind l\d+ tx +\| sch\.bind\(loop=l\d+, thread_axis=\"threadIdx\.x\"\)$", script, re.M)
    assert "@I.ir_module" in rest and 'thread="threadIdx.x"' in rest


def test_show_picks_a_workload_by_key_and_rejects_a_bad_index(sampled_db, capsys):
    assert main(["codec", "show", str(sampled_db), "--workload", QUICK["softmax"].key]) == 0
    assert capsys.readouterr().out.startswith("record 5 of 8: ")
    assert main(["codec", "show", str(sampled_db), "--index", "8"]) == 2
    assert "has 8 records" in capsys.readouterr().err
