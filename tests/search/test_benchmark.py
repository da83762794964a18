"""The fixed benchmark: drawn once from the standard suite, shipped as keys beside the corpus,
checked when loaded, and taken by `dataset build` as the dataset's splits."""

import json
import re
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import datasets
import pytest

from dragonlab.cli import main
from dragonlab.core.workloads import GENERATORS, suite
from dragonlab.search import benchmark
from dragonlab.search.benchmark import Benchmark, BenchmarkFormatError

SHIPPED = Path(__file__).resolve().parents[2] / "data" / "cpu-standard-v1" / "benchmark.json"


@pytest.fixture(scope="module")
def standard():
    return suite("standard")


def test_the_shipped_benchmark_is_what_define_draws_from_the_standard_suite(standard):
    drawn = benchmark.define(standard, name="cpu-standard-v1")
    assert benchmark.load(SHIPPED) == drawn  # defined once: the file and the code agree


def test_the_benchmark_has_unseen_shapes_and_whole_held_out_families(standard):
    b = benchmark.load(SHIPPED)
    family = {w.key: benchmark.op_family(w) for w in standard}
    assert set(b.splits["test"]) | set(b.splits["test_family"]) | set(b.splits["validation"]) <= set(family)
    assert len(b.splits["test"]) >= 40 and len(b.held_out_families) >= 3
    held = set(b.held_out_families)
    trained = {family[w.key] for w in standard if b.split_of(w.key) is None}
    assert not held & trained  # whole families: no workload of a held-out family is trained on
    assert {family[k] for k in b.splits["test"]} <= trained  # test: unseen shapes of trained families
    assert {family[k] for k in b.splits["test_family"]} == held
    assert any(f not in GENERATORS for f in held)  # one held-out family only in an extracted network
    val = Counter(family[k] for k in b.splits["validation"])
    assert held <= set(val) and len(set(val) - held) >= 20  # validation: both kinds again
    assert len(b.search[512]) == 24 and sorted(b.search[512] + b.search[128]) == sorted(b.judged())
    assert {b.search_trials(k) for k in b.judged()} == {128, 512}


def test_extracted_tasks_group_into_op_families_without_tvms_counters(standard):
    names = {benchmark.op_family(w) for w in standard if w.family.startswith("model:resnet/fused_conv2d")}
    assert "model:fused_conv2d_subtract_divide_expand_dims_multiply_expand_dims_add_relu" in names
    assert all("conv2d" in n and not any(part[-1].isdigit() for part in n.split("_")) for n in names)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("splits"), "splits"),
    (lambda d: d["splits"]["test"].append({"key": "12x", "name": "n"}), "splits.test[45]"),
    (lambda d: d["splits"]["validation"].append(dict(d["splits"]["test"][0])), "splits.validation[44]"),
    (lambda d: d["splits"].update(train=[]), "splits"),
    (lambda d: d["search"]["512"].append(d["splits"]["validation"][0]["key"]), "search.512[24]"),
    (lambda d: d["search"]["128"].pop(), "search"),
    (lambda d: d["search"].update({"-1": []}), "search.-1"),
])
def test_a_malformed_benchmark_names_the_field(tmp_path, edit, field):
    d = json.loads(SHIPPED.read_text())
    edit(d)
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps(d))
    with pytest.raises(BenchmarkFormatError, match=re.escape(f"{path}: field '{field}'")):
        benchmark.load(path)


def _tiny_benchmark(collected, stores) -> Benchmark:
    """matmul in test, reduce_row held out, softmax in train."""
    matmul, softmax = collected[1]
    from dragonlab.search.records import RecordStore

    reduce_row = next(iter(RecordStore(stores[1]).workloads().values()))
    keys = {"test": (matmul.key,), "test_family": (reduce_row.key,), "validation": ()}
    names = {matmul.key: matmul.name, reduce_row.key: reduce_row.name}
    return Benchmark("tiny", "a test", ("reduce_row",), keys, names, {3: (matmul.key,), 2: (reduce_row.key,)})


def test_dataset_build_takes_the_benchmark_shipped_beside_the_records(collected, stores, tmp_path, capsys):
    bench = _tiny_benchmark(collected, stores)
    shipped = tmp_path / "corpus"
    shutil.copytree(stores[0], shipped)
    benchmark.save(bench, shipped / "benchmark.json")
    out = tmp_path / "ds"
    assert main(["dataset", "build", "--records", str(shipped), str(stores[1]), "--out", str(out)]) == 0
    assert "splits: the benchmark" in capsys.readouterr().out
    dsd = datasets.load_from_disk(str(out))
    by_split = {s: {r["workload"] for r in ds.to_list()} for s, ds in dsd.items()}
    matmul, softmax = collected[1]
    assert by_split == {"train": {softmax.key}, "test": {matmul.key}, "test_family": set(bench.splits["test_family"])}
    assert "as the benchmark `tiny`" in (out / "README.md").read_text()

    hashed = tmp_path / "hashed"
    assert main(["dataset", "build", "--records", str(shipped), "--out", str(hashed), "--no-benchmark",
                 "--validation", "0", "--test", "0"]) == 0
    assert set(datasets.load_from_disk(str(hashed))) == {"train"}


def test_a_held_out_familys_workload_the_benchmark_does_not_list_is_never_trained_on(collected, stores, tmp_path,
                                                                                    capsys):
    """Records of more shapes than the benchmark was drawn from (another suite, design-space
    samples): a shape of a held-out family must not land in train because the benchmark does
    not name it."""
    bench = _tiny_benchmark(collected, stores)
    bench = replace(bench, held_out_families=("reduce_row", "softmax"))  # softmax held out, listed nowhere
    path = tmp_path / "b.json"
    benchmark.save(bench, path)
    out = tmp_path / "ds"
    assert main(["dataset", "build", "--records", *map(str, stores), "--out", str(out), "--benchmark",
                 str(path)]) == 0
    assert "held-out family, not in the benchmark" in capsys.readouterr().out
    workloads = {r["workload"] for ds in datasets.load_from_disk(str(out)).values() for r in ds.to_list()}
    matmul, softmax = collected[1]
    assert softmax.key not in workloads and matmul.key in workloads


def test_a_benchmark_with_a_held_out_family_option_is_one_clear_error(collected, stores, tmp_path, capsys):
    path = tmp_path / "b.json"
    benchmark.save(_tiny_benchmark(collected, stores), path)
    out = tmp_path / "ds"
    assert main(["dataset", "build", "--records", str(stores[0]), "--out", str(out), "--benchmark", str(path),
                 "--holdout-family", "softmax"]) == 2
    assert "--benchmark fixes the splits" in capsys.readouterr().err and not out.exists()
    path.write_text('{"name": "x"}')
    assert main(["dataset", "build", "--records", str(stores[0]), "--out", str(out), "--benchmark",
                 str(path)]) == 2
    assert f"{path}: field 'doc'" in capsys.readouterr().err and not out.exists()
