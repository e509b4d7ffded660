"""A TOML table → a frozen dataclass, field by field from its type hints.

Every error names the file and the dotted key; an unknown key is answered with the closest known
one ("Perhaps you meant 'partition'?").
"""

from __future__ import annotations

import difflib
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, fields, is_dataclass
from typing import Annotated, Any, Literal, TypeVar

from pytest_gpucluster.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_bytes(value: int | str, where: str) -> int:
    """``"64MiB"``, ``"1GB"`` or a plain integer → bytes; ``where`` names the key on error."""
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a size such as 64MiB, got {value!r}.")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{where}: a size cannot be negative, got {value}.")
        return value
    match = _SIZE.match(value)
    if not match:
        raise ConfigError(f"{where}: {value!r} is not a size; write e.g. 64MiB, 1GiB or 1048576.")
    number, unit = match.groups()
    return int(float(number) * _UNITS[(unit or "").upper()])


def reject_unknown(table: Mapping[str, Any], known: Iterable[str], where: str, file: str) -> None:
    """Raise on the first key of ``table`` not in ``known``, naming the closest known one."""
    known = list(known)
    for key in table:
        if key not in known:
            guess = difflib.get_close_matches(key, known, n=1)
            hint = f" Perhaps you meant '{guess[0]}'?" if guess else f" Known keys: {', '.join(known)}."
            raise ConfigError(f"{file}: {where}.{key}: unknown key.{hint}")


def build(
    cls: Any, table: Mapping[str, Any], where: str, file: str, *, settable: Mapping[type, Iterable[str]], **given: Any
) -> Any:
    """``cls`` from ``table``: each key converted to its field's type (a nested dataclass from a
    nested table). ``given`` fields are not read from the table; ``settable`` limits the keys of
    the dataclasses it names, the others keep their defaults."""
    hints = typing.get_type_hints(cls, include_extras=True)
    allowed = set(settable.get(cls, [f.name for f in fields(cls)]))
    names = [f.name for f in fields(cls) if f.name not in given and f.name in allowed]
    reject_unknown(table, names, where, file)
    kwargs = dict(given)
    for f in fields(cls):
        if f.name in table:
            kwargs[f.name] = _convert(hints[f.name], table[f.name], f"{where}.{f.name}", file, settable)
        elif f.name not in given and f.default is MISSING and f.default_factory is MISSING:
            raise ConfigError(f"{file}: {where}: missing key {f.name!r}.")
    try:
        return cls(**kwargs)
    except ValueError as exc:  # the dataclass's own check of its values (``__post_init__``)
        raise ConfigError(f"{file}: {where}: {exc}.") from None


def _describe(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if tp in names:
        return names[tp]
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        return "a list of strings"
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Mapping, dict):
        return "a table of strings"
    return str(tp)


def _convert(tp: Any, value: Any, where: str, file: str, settable: Mapping[type, Iterable[str]]) -> Any:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        if "bytes" in tp.__metadata__ and isinstance(value, int | str):
            return parse_bytes(value, f"{file}: {where}")
        return _convert(typing.get_args(tp)[0], value, where, file, settable)
    if origin in (types.UnionType, typing.Union):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _convert(option, value, where, file, settable)
            except ConfigError as exc:
                errors.append(_describe(option))
                last = exc
        if len(options) == 1:
            raise last
        raise ConfigError(f"{file}: {where}: expected {' or '.join(errors)}, got {value!r}.")
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{file}: {where}: expected {_describe(tp)}, got {value!r}.")
        return value
    if origin in (tuple, list):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{file}: {where}: expected a list of strings, got {value!r}.")
        return tuple(value)
    if origin in (Mapping, dict) and typing.get_args(tp)[1:] == (int,):
        whole = isinstance(value, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in value.values())
        if not whole:
            raise ConfigError(f"{file}: {where}: expected a table of whole numbers, got {value!r}.")
        return types.MappingProxyType(dict(value))
    if origin in (Mapping, dict):
        if not isinstance(value, dict) or not all(isinstance(v, str | int | float) for v in value.values()):
            raise ConfigError(f"{file}: {where}: expected a table of strings, got {value!r}.")
        return types.MappingProxyType({k: str(v) for k, v in value.items()})
    if is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{file}: {where}: expected a table, got {value!r}.")
        return build(tp, value, where, file, settable=settable)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{file}: {where}: expected a finite number, got {value!r}.")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{file}: {where}: expected an integer, got {value!r}.")
        return value
    if tp is bool or tp is str:
        if not isinstance(value, tp):
            raise ConfigError(f"{file}: {where}: expected {_describe(tp)}, got {value!r}.")
        return value
    raise TypeError(f"unsupported field type {tp!r}")  # a bug in this module, not in the file


T = TypeVar("T")


def resolve_extends(
    items: Mapping[str, T],
    parent_of: Callable[[str], str | None],
    merge: Callable[[T, T], T],
    kind: str,
    noun: str,
    file: str,
) -> dict[str, T]:
    """Every item of ``[kind.NAME]`` with what its ``extends`` chain gives it: ``merge(parent,
    own)`` with the parent already resolved. ``parent_of`` reads (and checks) an item's
    ``extends``; a missing parent or a loop names the key."""
    out: dict[str, T] = {}

    def resolve(name: str, chain: tuple[str, ...]) -> T:
        if name in out:
            return out[name]
        value = items[name]
        parent = parent_of(name)
        if parent is not None:
            if parent not in items:
                raise ConfigError(
                    f"{file}: {kind}.{name}.extends: no {noun} {parent!r}; {noun}s are: {', '.join(sorted(items))}."
                )
            if parent in chain:
                raise ConfigError(f"{file}: {kind}.{name}.extends: loop through {' → '.join(chain)}.")
            value = merge(resolve(parent, (*chain, name)), value)
        out[name] = value
        return value

    for name in items:
        resolve(name, ())
    return out
