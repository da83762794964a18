"""Every `dragonlab COMMAND --flag value` written in the README, docs, results' and data's READMEs,
notebooks and Makefile names flags that command has, with values they take: a renamed flag or a
changed choice breaks the documented command, and argparse's abbreviations no longer hide a
misspelling. Snippets may leave out required arguments, and placeholders (`DIR`, `{model}`, `$M`)
are not values, so only the flags and the values written out are checked."""

import argparse
import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"\{[^}]*\}|\$\{?\w+\}?|<[^>]*>")
UPPER = re.compile(r"[A-Z][A-Z0-9_]*(?:[./:][\w.:/]*)?\Z")  # DIR, FILE.py:FUNCTION, N


def _texts() -> dict[str, str]:
    paths = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "results").rglob("README.md")), *sorted((ROOT / "data").rglob("README.md")),
             *sorted((ROOT / "notebooks").glob("*.ipynb"))]
    texts = {}
    for path in paths:
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        # continued lines joined (in a comment too), placeholders made one word
        texts[str(path.relative_to(ROOT))] = PLACEHOLDER.sub("X", re.sub(r"\\\n\s*#?", " ", text))
    return texts


def _commands() -> list[tuple[str, str]]:
    from dragonlab.cli.app import commands

    names = "|".join(c.name for c in commands())
    found = []
    for where, text in _texts().items():
        for m in re.finditer(rf"\bdragonlab ((?:{names})\b[^`\n|#;&>),]*)", text):
            command = m.group(1).replace("[", " ").replace("]", " ").strip()  # [--optional flags]
            if "--" in command and "..." not in command:
                found.append((where, command))
    return found


def _optional(parser: argparse.ArgumentParser) -> None:
    """Required arguments made optional, in the parser and its subcommands' (snippets leave them out)."""
    for action in parser._actions:  # argparse has no public list of its actions
        action.required = False
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _optional(sub)


COMMANDS = _commands()


def test_the_documents_write_dragonlab_commands():
    assert len(COMMANDS) > 80, COMMANDS  # the finder above still finds them


@pytest.mark.parametrize("where, command", COMMANDS, ids=[f"{w}:{c[:60]}" for w, c in COMMANDS])
def test_a_documented_command_parses(where, command):
    from dragonlab.cli.app import build_parser

    try:
        words = shlex.split(command)
    except ValueError:  # prose around a command, not a command
        pytest.skip(f"not a shell command: {command}")
    # a placeholder that stands for flags (`$ARGS`) is left out; one that stands for a value stays
    words = [w for i, w in enumerate(words) if w != "X" or i and words[i - 1].startswith("--")]
    parser = build_parser(words)
    _optional(parser)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(words)
        except SystemExit as e:
            if e.code:
                message = err.getvalue().strip().splitlines()[-1]
                value = re.search(r"(?:invalid \w+ value:|invalid choice:|got) '([^']*)'", message)
                if value is None or not UPPER.match(value.group(1)) and value.group(1) != "X":
                    pytest.fail(f"{where}: `dragonlab {command}`: {message}")
