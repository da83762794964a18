"""The cheap import of TVM's tensor intrinsics lends `inspect` a stack that TVMScript cannot
tell from the real one, and only while it imports."""

import inspect
import sys

import pytest

from dragonlab.core import tensor_intrinsics


def test_the_lent_stack_has_every_frame_and_the_source_lines_tvmscript_reads():
    def inner():
        return inspect.stack(), tensor_intrinsics._stack()

    def outer():
        return inner()

    real, lent = outer()
    assert [f.frame for f in lent] == [f.frame for f in real]
    assert [(f.filename, f.lineno, f.function) for f in lent] == [(f.filename, f.lineno, f.function) for f in real]
    read = tensor_intrinsics._LINES_READ
    assert [f.code_context for f in lent[:read]] == [f.code_context for f in real[:read]]
    assert real[read].code_context is not None and lent[read].code_context is None


@pytest.mark.parametrize("body", ["import inspect\nSEEN = inspect.stack\n", "raise ImportError('broken')\n"])
def test_the_stack_is_lent_for_the_import_only(body, tmp_path, monkeypatch):
    (tmp_path / "fake_intrinsics.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tensor_intrinsics, "MODULE", "fake_intrinsics")
    monkeypatch.delitem(sys.modules, "fake_intrinsics", raising=False)
    stack = inspect.stack
    if "raise" in body:
        with pytest.raises(ImportError, match="broken"):
            tensor_intrinsics.load()
    else:
        tensor_intrinsics.load()
        assert sys.modules["fake_intrinsics"].SEEN is tensor_intrinsics._stack
        tensor_intrinsics.load()  # loaded: nothing to do
    assert inspect.stack is stack


def test_a_call_that_misses_an_intrinsic_is_retried_once_after_the_import(tmp_path, monkeypatch):
    (tmp_path / "fake_intrinsics.py").write_text("LOADED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tensor_intrinsics, "MODULE", "fake_intrinsics")
    monkeypatch.delitem(sys.modules, "fake_intrinsics", raising=False)
    calls = []

    def needs_intrinsics():
        calls.append("fake_intrinsics" in sys.modules)
        if not calls[-1]:
            raise ValueError("TensorIntrin 'wmma_sync' is not registered")
        return "applied"

    def fails(message):
        def call():
            raise ValueError(message)
        return call

    with pytest.raises(ValueError, match="bad trace"):  # any other error: no import, no retry
        tensor_intrinsics.retrying(fails("bad trace"))
    assert "fake_intrinsics" not in sys.modules
    assert tensor_intrinsics.retrying(needs_intrinsics) == "applied" and calls == [False, True]
    with pytest.raises(ValueError, match="TensorIntrin"):  # loaded and still missing: TVM's error stands
        tensor_intrinsics.retrying(fails("TensorIntrin 'x' is not registered"))
