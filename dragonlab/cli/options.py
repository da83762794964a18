"""Flags and values from config dataclasses: what every command module builds its parser with.

    p = command(sub, "sft", "fine-tune", configs=[SFTConfig])   # --max-steps, --learning-rate, ...
    p.add_argument("--data", type=Path, required=True)             # the command's own flags
    ...
    config = config_from(SFTConfig, args)                          # SFTConfig checks its values

A config's fields are the one statement of a setting: `transformers.HfArgumentParser` turns each
field into a flag whose type, default, choices and help come from the field (its `metadata`
holds `help` and, where they apply, `choices` and `range`). The spelling shown is `--max-steps`;
`--max_steps` is accepted too. Fields that are dataclasses themselves (`measure`, `reward`) get
no flags.

`range` and `choices` say which values a field takes (`dragonlab.core.fields`); the config checks
them itself when it is made, naming the field ("CollectConfig.trials must be a positive integer,
got 0"). A float with a sign range is also refused while parsing, naming the flag ("expected a
positive finite number, got 'nan'"). The campaign files check their values with the same
metadata (`expected`, `within`).

Nothing heavy is imported here: building a command's parser imports its configs (some import
TVM) and transformers (about 1.5 s), and only for the command being run (dragonlab.cli.app).
A field's `choices` may be a function returning them, for names that live in heavy modules.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import MISSING
from typing import Callable

from dragonlab.core.errors import InputError
from dragonlab.core.fields import RANGES, SIGNS, expected, field_type, hints, within


class UsageError(InputError):
    """A bad combination of flags, or a path the command cannot use."""


METAVARS = {int: "N", float: "X"}


# --- values ----------------------------------------------------------------------------------------

def number(range_: str | None = None) -> Callable[[str], float]:
    """An argparse type: a finite float, in `range_` (one of SIGNS) if given."""
    what = expected(float, range_)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not within(value, float, range_):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = "number"  # argparse names the type in some messages
    return parse


def require(flag: str, value, range_: str) -> None:
    """Refuse a value outside `range_` after parsing: UsageError "--n must be positive, got 0"."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    for v in values:
        if v is not None and not RANGES[range_][1](v):
            raise UsageError(f"{flag} must be {RANGES[range_][0]}, got {v}")


def choices_of(metadata) -> tuple | None:
    """A field's `choices`: a tuple, or a function that returns one (names that live in heavy modules)."""
    c = metadata.get("choices")
    return tuple(c()) if callable(c) else c


# --- field types -----------------------------------------------------------------------------------

def flag_fields(cls, skip=()) -> list[dataclasses.Field]:
    """The fields of `cls` that become flags: every init field but nested dataclasses and `skip`."""
    types_ = hints(cls)
    return [f for f in dataclasses.fields(cls) if f.init and f.name not in skip
            and not dataclasses.is_dataclass(field_type(types_[f.name])[0])]


def flag_name(cls, name: str) -> str:
    """The flag's name (its argparse dest) of a config field: the field's own, unless the config
    renames it in its `FLAGS` mapping (RewardConfig's `--reward-run`: `--run` is taken)."""
    return getattr(cls, "FLAGS", {}).get(name, name)


def default_of(cls, name: str):
    """A field's default, for a flag that is not the field itself (`collect --timeout`)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default_factory() if f.default is MISSING else f.default


# --- flags -----------------------------------------------------------------------------------------

class Given(argparse.Action):
    """Stores the value, and notes its field in `args.given`: a command that must know whether a
    flag was written (not just its value) asks `given(args)`."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = given(namespace) | {self.dest}


def given(args) -> frozenset:
    return getattr(args, "given", frozenset())


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each flag's default, except None and an unset switch (their help says what they mean)."""

    def _get_help_string(self, action):
        if action.default is None or (action.default is False and action.nargs == 0):
            return action.help
        if isinstance(action.default, (tuple, list)):  # as it is typed: "8 32 128", not "(8, 32, 128)"
            shown = " ".join(map(str, action.default)).replace("%", "%%")
            return f"{action.help} (default: {shown})"
        return super()._get_help_string(action)


def config_flags(cls, *, skip=(), aliases=None) -> argparse.ArgumentParser:
    """A parent parser (no -h) with one flag per field of the config dataclass `cls`, in a help
    section named after it. `aliases`: field -> extra spellings."""
    from transformers import HfArgumentParser  # about 1.5 s: only for the command being run

    types_, aliases = hints(cls), aliases or {}
    view = dataclasses.make_dataclass(f"{cls.__name__}Flags", [
        _flag(f, flag_name(cls, f.name), types_[f.name], aliases.get(f.name)) for f in flag_fields(cls, skip)])
    view._argument_group_name = f"{cls.__name__} ({cls.__module__})"  # HfArgumentParser's help section
    return HfArgumentParser(view, add_help=False)


def _flag(f: dataclasses.Field, name: str, hint, aliases) -> tuple:
    """The field of the flag dataclass that HfArgumentParser reads: a field whose type is the
    argparse type (HfArgumentParser passes it on), a list for a tuple (it knows lists), and the
    metadata argparse takes."""
    kind, many = field_type(hint)
    range_ = f.metadata.get("range")
    meta = {"help": f.metadata.get("help", "").replace("%", "%%")}  # argparse %-formats help
    if choices_of(f.metadata):
        meta["choices"] = choices_of(f.metadata)
    if aliases:
        meta["aliases"] = aliases
    default = f.default if f.default is not MISSING else f.default_factory()
    if kind is bool:
        if default is not True:  # HfArgumentParser's --no-x switch for a True default takes neither
            meta["action"], meta["metavar"] = Given, "BOOL"  # --x alone is --x true
        return name, bool, dataclasses.field(default=default, metadata=meta)
    meta["action"] = Given
    if kind in METAVARS and "choices" not in meta:
        meta["metavar"] = METAVARS[kind]
    parse = _parser_of(kind, range_)
    if many:  # default_factory: make_dataclass refuses a mutable default, and HfArgumentParser wants one
        return name, list[parse], dataclasses.field(default_factory=lambda: default, metadata=meta)
    return name, parse, dataclasses.field(default=default, metadata=meta)


def _parser_of(kind, range_):
    if isinstance(kind, tuple):  # `int | str`: the first type that takes the text
        def parse(text: str):
            for k in kind:
                try:
                    return k(text)
                except ValueError:
                    pass
            raise argparse.ArgumentTypeError(f"expected one of the types {', '.join(k.__name__ for k in kind)}")
        return parse
    if kind is float:
        return number(range_ if range_ in SIGNS else None)
    return kind


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: `add(sub, name, help)` adds its parser (importing what its flags come from)."""

    name: str
    help: str
    add: Callable


def command(sub, name: str, help: str, *, configs=(), description: str | None = None):
    """A subcommand parser whose flags include those of `configs` (config classes, or parent
    parsers from `config_flags` for a config with options). Flags show only their `--a-b`
    spelling; the `--a_b` spelling HfArgumentParser adds is still accepted."""
    parents = [c if isinstance(c, argparse.ArgumentParser) else config_flags(c) for c in configs]
    p = sub.add_parser(name, help=help, description=description or help[:1].upper() + help[1:] + ".",
                       parents=parents, formatter_class=HelpFormatter,
                       allow_abbrev=False)  # `--run` silently meant `--runner`: a flag is written in full
    for action in p._actions:  # argparse has no public list of its actions
        spelled = [s for s in action.option_strings if "_" not in s]
        if spelled:  # errors and help name the flag as the documentation spells it
            action.option_strings = spelled
    return p


def config_from(cls, args, *, skip=(), **overrides):
    """The config from the parsed flags (see config_flags; `skip` as given there: those fields keep
    their defaults); the config checks its values."""
    types_ = hints(cls)
    values = {}
    for f in flag_fields(cls, skip):
        if hasattr(args, dest := flag_name(cls, f.name)):
            value = getattr(args, dest)
            values[f.name] = tuple(value) if isinstance(value, list) and field_type(types_[f.name])[1] else value
    values.update(overrides)
    return cls(**values)
