"""The `dragonlab` command: one subcommand per pipeline stage.

A `DragonlabError` (bad input: a malformed file, an unknown target, a bad parameter; or an
unavailable service) ends the command with one line `dragonlab: error: ...` naming what is wrong,
and exit status 2; nothing is overwritten. Ctrl-C ends it with one line and status 130. Anything
else is a bug and shows its traceback.

Each command group's module (search, evaluation, learn, reporting, pipeline) lists its commands
in COMMANDS. Only the command being run gets its full parser: its flags come from config
dataclasses whose modules import TVM or transformers, so `dragonlab --help` lists the others by
name and help line alone and stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from dragonlab.cli.options import HelpFormatter
from dragonlab.core.errors import DragonlabError

GROUPS = ("search", "evaluation", "learn", "reporting", "tune", "pipeline")  # modules of dragonlab.cli, in help order


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        return args.run(args) or 0
    except DragonlabError as e:  # bad input or an unavailable service; anything else is a bug
        print(f"dragonlab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dragonlab: interrupted; what was finished is kept, and the same command resumes long jobs",
              file=sys.stderr)
        return 130


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser, with every flag of the command `argv` names and a stand-in for the others."""
    p = argparse.ArgumentParser(prog="dragonlab", description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    sub = p.add_subparsers(title="commands", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)  # dragonlab has no options of its own but -h
    for c in commands():
        if c.name == chosen:
            c.add(sub, c.name, c.help)
        else:  # never parses anything: a command's arguments always follow its name
            sub.add_parser(c.name, help=c.help)
    return p


def commands() -> list:
    """Every command, in the order `dragonlab --help` lists them."""
    return [c for group in GROUPS for c in importlib.import_module(f"dragonlab.cli.{group}").COMMANDS]
