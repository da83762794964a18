"""Settings that check themselves: what a config field takes is written once, in its metadata.

A field of a config dataclass may carry, besides its `help`:

    range    one of RANGES: which numbers it takes ("> 0", ">= 0", "(0, 1)", "[0, 1)")
    choices  a tuple of the values it takes (or a function returning them, for names that live
             in heavy modules; those are checked by the command that imports them)

`check(config)`, called first in the config's `__post_init__`, refuses a value of the wrong type
or outside its range or choices with one `InputError` naming the class and field
("CollectConfig.trials must be a positive integer, got 0"); the config's own `__post_init__`
then checks what involves several fields. The command line (`dragonlab.cli.options`) and the
campaign files (`dragonlab.cli.campaign.file`) read the same metadata for their flags and keys.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing

from dragonlab.core.errors import InputError

# range -> (what a value "must be", what test it passes)
RANGES = {
    "> 0": ("positive", lambda v: v > 0),
    ">= 0": ("non-negative", lambda v: v >= 0),
    "(0, 1)": ("between 0 and 1 (exclusive)", lambda v: 0 < v < 1),
    "[0, 1)": ("a share in [0, 1)", lambda v: 0 <= v < 1),
}
SIGNS = ("> 0", ">= 0")  # the ranges whose words read as an adjective: "a positive integer"


def expected(kind: type, range_: str | None = None) -> str:
    """What a value of this type and range is, for "expected ...": "a positive integer"."""
    if kind is bool:
        return "true or false"
    if kind is str:
        return "a non-empty string"
    noun = "integer" if kind is int else "finite number"
    if range_ in SIGNS:
        return f"a {RANGES[range_][0]} {noun}"
    if range_:
        return f"a number in {range_}"
    return f"an {noun}" if kind is int else f"a {noun}"


def within(value, kind: type, range_: str | None = None) -> bool:
    """Whether `value` (as Python, TOML or JSON gives it) is of the type and in the range."""
    if kind is bool or kind is str:
        return isinstance(value, kind) and (kind is bool or value.strip() != "")
    if isinstance(value, bool) or not isinstance(value, int if kind is int else (int, float)):
        return False
    if not math.isfinite(value):
        return False
    return range_ is None or RANGES[range_][1](value)


def field_type(hint) -> tuple[type | tuple, bool]:
    """(the type a value has, whether the field is a tuple of those) of a type hint, None left
    out: `tuple[int, ...] | None` -> (int, True); a union of several types -> a tuple of them."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = tuple(a for a in typing.get_args(hint) if a is not type(None))
        if len(rest) > 1:
            return rest, False
        hint = rest[0]
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint, False


@functools.cache
def hints(cls) -> dict:
    """The resolved type of every field of a config class (the configs' modules postpone their
    annotations); resolved once per class, not at every config made."""
    return typing.get_type_hints(cls)


def takes_none(hint) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def check(config) -> None:
    """Refuse the first field of `config` whose value is not of its type or outside its
    `range` or `choices` (see the module docstring)."""
    cls = type(config)
    types_ = hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        value, hint = getattr(config, f.name), types_[f.name]
        if value is None and takes_none(hint):
            continue
        kind, many = field_type(hint)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not all(k in (int, float, str, bool) for k in kinds):
            continue  # a nested config checks itself; anything else its owner checks
        choices, range_ = f.metadata.get("choices"), f.metadata.get("range")
        choices = None if callable(choices) else choices
        if choices:
            fits, what = (lambda v: v in choices), "one of " + ", ".join(map(str, choices))
        else:
            fits = lambda v: any(within(v, k, range_) if k is not str else isinstance(v, str) for k in kinds)  # noqa: E731
            what = " or ".join("a string" if k is str else expected(k, range_) for k in kinds)
        if many:  # as a campaign file's list: at least one value
            ok = isinstance(value, (tuple, list)) and len(value) > 0 and all(map(fits, value))
            what = f"a non-empty tuple, each {what}"
        else:
            ok = fits(value)
        if not ok:
            raise InputError(f"{cls.__name__}.{f.name} must be {what}, got {value!r}")
