"""``--set KEY=VALUE`` for every experiment: parse, then apply through the frozen config.

A setting names a field of the experiment's config dataclass (``lora.lr`` a field of a
nested one).  Its value is read as JSON where it parses (numbers, true/false, null, lists),
else as a string, then checked against the field's type; the config's ``__post_init__``
checks the value itself.  An unknown key, a value of the wrong type or a value the config
refuses raises ``InputError`` naming the key — before anything is loaded.  Torch-free.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from updatescope.errors import InputError

__all__ = ["parse_settings", "apply_settings"]


def parse_settings(items: list[str] | None) -> dict[str, Any]:
    """``["ground_truth=head", "lora.lr=3e-4"]`` -> {"ground_truth": "head", "lora": {"lr": 0.0003}}."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise InputError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            value = raw
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"--set {item!r} conflicts with an earlier setting of {part!r}")
        if isinstance(node.get(parts[-1]), dict):
            raise InputError(f"--set {item!r} conflicts with an earlier setting inside {parts[-1]!r}")
        node[parts[-1]] = value
    return out


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """``value`` checked (and lightly converted: int -> float, list -> tuple) against ``hint``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except InputError as exc:
                errors.append(str(exc))
        raise InputError(f"setting {key!r}: {value!r} is not a {' or '.join(_type_name(a) for a in args)}")
    if origin is typing.Literal:
        if value not in args:
            raise InputError(f"setting {key!r} must be one of {', '.join(map(repr, args))}; got {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise InputError(f'setting {key!r} must be a list (JSON, e.g. ["a", "b"]); got {value!r}')
        item = args[0] if args else Any
        return tuple(_coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value))
    if hint is bool:
        if not isinstance(value, bool):
            raise InputError(f"setting {key!r} must be true or false; got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"setting {key!r} must be an integer; got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"setting {key!r} must be a finite number; got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise InputError(f"setting {key!r} must be a string; got {value!r}")
        return value
    raise InputError(f"setting {key!r} cannot be set from the command line")  # pragma: no cover


def apply_settings(config: Any, settings: Mapping[str, Any], where: str = "") -> Any:
    """A copy of the frozen dataclass ``config`` with ``settings`` (nested dicts) applied and
    validated (the config's ``__post_init__`` runs again)."""
    fields = {f.name: f for f in dataclasses.fields(config) if f.init}
    hints = typing.get_type_hints(type(config))
    changes: dict[str, Any] = {}
    for key, value in settings.items():
        name = where + key
        if key not in fields:
            raise InputError(f"unknown setting {name!r}; known: {', '.join(where + k for k in sorted(fields))}")
        current = getattr(config, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                inner = ", ".join(f"{name}.{f.name}" for f in dataclasses.fields(current))
                raise InputError(f"setting {name!r} is a group; set its fields instead ({inner})")
            changes[key] = apply_settings(current, value, name + ".")
        else:
            changes[key] = _coerce(value, hints.get(key, Any), name)
    try:
        return dataclasses.replace(config, **changes)
    except InputError:
        raise
    except (TypeError, ValueError) as exc:
        raise InputError(f"invalid settings {sorted(where + k for k in changes)}: {exc}") from None
