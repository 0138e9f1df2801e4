"""The config engine: defaults -> YAML -> command-line overrides -> one `validate`, for any frozen dataclass.

Every component has one frozen dataclass, defined where the component lives (`SimConfig` in `robo_rl.sim`,
`PPOConfig` in PPO's module, `TrainConfig` in `robo_rl.learn.train_config`, ...). Field constraints live in the
field metadata (`ge`, `gt`, `le`, `choices`, and `note`: why a value is not allowed) so validation is generic and
every error message has the same shape: ``config error: <path> = <value>: <what is allowed>``. Every float must
be finite. A dataclass may add a `validate()` method for what the metadata cannot say; `build` calls it.

This module imports no torch, no mujoco and nothing else of robo_rl.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml


class UserError(Exception):
    """A user mistake (command line, config, files); the CLI prints it as one line and exits 2."""


class ConfigError(UserError, ValueError):
    """A user mistake in a config file or override; the CLI prints it as one line."""


class RankLost(RuntimeError):
    """A collective of a distributed run failed: another rank died, stalled past the timeout or became unreachable;
    the CLI prints it as one line and exits 3."""


MAX_SEED = 2**31 - 1
"""Largest seed (torch, numpy and the envs all accept it)."""


def _f(default: Any = dataclasses.MISSING, **meta: Any) -> Any:
    """A dataclass field with validation metadata (ge, gt, le, choices, note)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> {dotted path: leaf value}."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        out.update(flatten(value, _join(prefix, str(key))))
    return out


def changed_paths(old: dict[str, Any], new: dict[str, Any], allowed: typing.Collection[str] = ()) -> list[str]:
    """`path (old -> new)` for every dotted path outside `allowed` whose value differs between two trees."""
    a, b = flatten(old), flatten(new)

    def shown(tree: dict[str, Any], path: str) -> str:
        return repr(tree[path]) if path in tree else "unset"

    return [
        f"{path} ({shown(a, path)} -> {shown(b, path)})"
        for path in sorted(a.keys() | b.keys())
        if path not in allowed and (path in a, a.get(path)) != (path in b, b.get(path))
    ]


def apply_overrides(raw: dict[str, Any], overrides: typing.Iterable[str] = ()) -> dict[str, Any]:
    """A deep copy of the plain mapping `raw` with `section.field=value` overrides applied in order."""
    tree = json.loads(json.dumps(raw))  # deep copy of plain data
    for text in overrides:
        keys, value = parse_override(text)
        set_in(tree, keys, value)
    return tree


# ----------------------------------------------------------------------------------------------
# Generic construction and validation
# ----------------------------------------------------------------------------------------------


def to_plain(obj: Any) -> Any:
    """Dataclasses, tuples and mappings -> plain dicts and lists (what YAML and JSON hold)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """Convert a YAML / command-line value to the annotated type, or raise ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], path)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"config error: {path} = {value!r}: expected true or false")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"config error: {path} = {value!r}: expected an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ConfigError(f"config error: {path} = {value!r}: expected an integer")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"config error: {path} = {value!r}: expected a number")
        number = None
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"config error: {path} = {value!r}: expected a number")
        if not math.isfinite(number):
            raise ConfigError(f"config error: {path} = {value!r}: must be a finite number")
        return number
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"config error: {path} = {value!r}: expected a string")
    if origin is tuple:
        (elem, *_rest) = typing.get_args(tp)
        if isinstance(value, str):
            value = _yaml_value(value, path)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config error: {path} = {value!r}: expected a list of {_type_name(elem)}")
        return tuple(_coerce(v, elem, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        key_t, val_t = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"config error: {path} = {value!r}: expected a mapping")
        return {str(k): _coerce(v, val_t, f"{path}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    return value


def _check_meta(value: Any, meta: typing.Mapping[str, Any], path: str) -> None:
    if value is None:
        return
    values = value if isinstance(value, tuple) else (value,)
    for v in values:
        if "choices" in meta and v not in meta["choices"]:
            allowed = ", ".join(map(str, meta["choices"]))
            note = f" ({meta['note']})" if "note" in meta else ""
            raise ConfigError(f"config error: {path} = {v!r}: allowed values are {allowed}{note}")
        if "ge" in meta and not v >= meta["ge"]:
            raise ConfigError(f"config error: {path} = {v!r}: must be >= {meta['ge']}")
        if "gt" in meta and not v > meta["gt"]:
            raise ConfigError(f"config error: {path} = {v!r}: must be > {meta['gt']}")
        if "le" in meta and not v <= meta["le"]:
            raise ConfigError(f"config error: {path} = {v!r}: must be <= {meta['le']}")


def build(cls: type, raw: Any, path: str = "") -> Any:
    """Build dataclass `cls` from a (possibly partial) mapping, validating every field.

    Args:
        cls: a frozen dataclass type.
        raw: mapping of field name -> raw value (None or {} gives the defaults).
        path: dotted prefix used in error messages.
    """
    if raw is None:
        raw = {}
    if dataclasses.is_dataclass(raw):
        raw = to_plain(raw)
    if not isinstance(raw, dict):
        raise ConfigError(f"config error: {path or 'config'} = {raw!r}: expected a mapping")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in raw:
        if key not in fields:
            where = f"'{path}'" if path else "the top level"
            raise ConfigError(
                f"config error: unknown key '{_join(path, key)}'; valid keys in {where}: {', '.join(fields)}"
            )
    kwargs = {}
    for name, f in fields.items():
        if name not in raw:
            continue
        given = raw[name]
        has_factory = f.default_factory is not dataclasses.MISSING
        if dataclasses.is_dataclass(hints[name]) and isinstance(given, dict) and has_factory:
            # a partial section overrides the field's own default (which may differ from its class's defaults)
            given = {**to_plain(f.default_factory()), **given}
        value = _coerce(given, hints[name], _join(path, name))
        if typing.get_origin(hints[name]) is dict and f.default_factory is not dataclasses.MISSING:
            value = {**f.default_factory(), **value}  # a partial mapping overrides single entries
        _check_meta(value, f.metadata, _join(path, name))
        kwargs[name] = value
    try:
        obj = cls(**kwargs)
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"config error: {path or cls.__name__}: {exc}") from None
    for name, f in fields.items():  # defaults are checked too (cheap, catches bad task defaults)
        _check_meta(getattr(obj, name), f.metadata, _join(path, name))
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate()
    return obj


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _yaml_value(text: str, where: str) -> Any:
    """A value written in YAML (`3e-4`, `[64, 64]`, `true`); ConfigError naming `where` if it does not parse."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"config error: {where} = {text!r}: not a valid YAML value ({problem})") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a", "b", "c"], value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"config error: override {text!r}: expected KEY=VALUE, e.g. algo.learning_rate=3e-4")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"config error: override {text!r}: empty key")
    return key.split("."), _yaml_value(value, f"override {key}") if value.strip() else ""


def set_in(tree: dict[str, Any], keys: list[str], value: Any) -> None:
    node = tree
    for k in keys[:-1]:
        child = node.get(k)
        if child is None:
            child = node[k] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"config error: override {'.'.join(keys)}: '{k}' is not a section")
        node = child
    node[keys[-1]] = value


def load_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config error: config file {str(p)!r} is a directory; expected a YAML file")
    if not p.is_file():
        raise ConfigError(f"config error: config file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except (UnicodeDecodeError, OSError) as exc:
        why = type(exc).__name__
        raise ConfigError(f"config error: config file {str(p)!r} cannot be read as text ({why})") from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" (line {line + 1})" if line is not None else ""
        raise ConfigError(f"config error: {p} is not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config error: {p}: top level must be a mapping")
    return data
