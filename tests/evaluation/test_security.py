"""No script can create a file, start a process or open a socket while it is evaluated.

Every slot of the script grammar that can hold a value (every parameter that is not a variable,
of every instruction kind the codec knows) gets a verbatim JSON graph whose expressions call
`system`, a packed function, or load a buffer, as an index map and as a bare expression. The
evaluator must refuse each before anything is built, and the command must not have run. Then
the same scripts again with the allowlist switched off: the checks behind it (TVM's own type
checks, the build-time check for calls and pragmas, the kernel sandbox) must still keep the
command from running.
"""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest
import tvm
from tvm import tirx

from dragonlab.core import codec
from dragonlab.core.workloads import suite
from dragonlab.evaluation.config import EvalConfig
from dragonlab.evaluation.evaluate import Evaluator

WORKLOAD = "elementwise_fusion_m64_n64_ops-add-mul-relu_float32"
PREFIX = "get add0\nloops b0 >2\n"


def _payloads(marker: Path, port: int) -> dict[str, str]:
    """Verbatim graphs that would reach the OS if TVM generated code from them: a file, a
    process that opens a socket to the test's listener, a socket, a packed call, a load."""
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    connect = f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)'"
    exprs = {"system": tirx.call_extern("int32", "system", f"touch {marker}"),
             "connect": tirx.call_extern("int32", "system", connect),
             "socket": tirx.call_extern("int32", "socket", 2, 1, 0),
             "packed": tirx.call_packed("runtime.ModuleLoadFromFile", str(marker), "so"),
             "load": tirx.BufferLoad(tirx.decl_buffer((64,), "int32", name="secret"), [i])}
    graphs = {}
    for name, expr in exprs.items():
        graphs[f"index map calling {name}"] = tvm.ir.save_json(tirx.IndexMap([i, j], [j + expr, i], None))
        graphs[f"expression {name}"] = tvm.ir.save_json(expr)
    return graphs


def _slots() -> list[tuple[str, int]]:
    """(mnemonic, parameter index) of every parameter that is not a variable."""
    return [(k.mnemonic, n) for k in codec.KINDS.values() for n, p in enumerate(k.params) if p.type != "rv"]


def _line(mnemonic: str, slot: int, value: str) -> str:
    kind = codec.BY_MNEMONIC[mnemonic]
    words, rvs = [mnemonic], iter(["b0", "l1", "l2"])
    for n, p in enumerate(kind.params):
        if n == slot:
            words.append(value)
        elif p.type == "rv":
            words.append(next(rvs, "l2"))
        elif p.default == () or n < slot:
            words.append({"int": "0", "bool": "true", "str": '"x"', "key": "par", "thread": "tx"}.get(p.type, "1"))
        if p.index is None and n < len(kind.params) - 1:
            words.append(";")
    return " ".join(words)


class Witness:
    """What a payload would leave behind: a file, or a connection to a listener on loopback."""

    def __init__(self, directory: Path):
        self.marker = directory / "ran"
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.5)
        self.port = self.listener.getsockname()[1]

    def nothing_happened(self) -> bool:
        try:
            self.listener.accept()[0].close()
            return False
        except TimeoutError:
            return not self.marker.exists()


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    witness = Witness(tmp_path_factory.mktemp("security"))
    graphs = _payloads(witness.marker, witness.port)
    scripts = [(f"{m} parameter {n + 1}, {name}", PREFIX + _line(m, n, "{" + codec.quote(g) + "}"))
               for (m, n), (name, g) in itertools.product(_slots(), graphs.items())]
    yield witness, scripts
    witness.listener.close()


def _evaluate(scripts):
    w = next(x for x in suite("quick") if x.name == WORKLOAD)
    with Evaluator("cpu", EvalConfig(workers=1, time=True)) as ev:
        return ev.evaluate_many([(w, s) for _, s in scripts], progress=False)


def _decoded(scripts):
    """The scripts as traces, read by the permissive decoder (a model's text may not hold
    verbatim graphs at all; a trace from a tuning log may)."""
    out = []
    for name, s in scripts:
        try:
            out.append((name, codec.decode(s)))
        except codec.CodecError:
            pass
    return out


def test_every_slot_of_the_grammar_is_covered(cases):
    _, scripts = cases
    assert len({name.split(",")[0] for name, _ in scripts}) == len(_slots()) > 60
    assert all(any(word in s for word in ("system", "socket", "ModuleLoad", "secret")) for _, s in scripts)


def test_no_payload_in_any_slot_gets_past_validation_or_runs(cases):
    witness, scripts = cases
    evaluations = _evaluate(scripts)
    passed = [(name, e.stage, e.reason) for (name, _), e in zip(scripts, evaluations) if e.stage not in ("decode", "validate")]
    assert passed == []
    assert witness.nothing_happened()
    traces = _decoded(scripts)  # as traces (a tuning log's), past the text-only refusal of verbatim maps
    assert len(traces) > len(scripts) // 2
    passed = [(name, e.stage, e.reason) for (name, _), e in zip(traces, _evaluate(traces)) if e.stage != "validate"]
    assert passed == []
    assert witness.nothing_happened()


def test_behind_the_allowlist_nothing_runs_either(cases, monkeypatch):
    witness, scripts = cases
    monkeypatch.setattr("dragonlab.core.allowlist.refusal", lambda *_: None)
    traces = _decoded(scripts)
    evaluations = _evaluate(traces)
    assert witness.nothing_happened()
    built = [(name, e.stage) for (name, _), e in zip(traces, evaluations) if e.correct]
    assert built == []  # TVM refuses most; the call check refuses the rest before a build


def test_the_witness_sees_a_connection_and_a_file(tmp_path):
    """So that `nothing_happened` can fail: what the payloads would do, done from here."""
    witness = Witness(tmp_path)
    try:
        socket.create_connection(("127.0.0.1", witness.port), 2).close()
        assert not witness.nothing_happened()
        witness.marker.touch()
        assert not witness.nothing_happened()
    finally:
        witness.listener.close()
