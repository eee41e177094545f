"""One way to read settings: dataclass fields -> validated values, from a file, a dict or `--set`.

Every settings file of the product (experiment, job, RL environment, forecaster settings) is a
dataclass whose fields say what they accept:

    @dataclass
    class CpuSettings:
        budget_millicores: float = setting(24000.0, gt=0)
        interpolation: str = setting("spline", choices=("spline", "linear"))

`load_settings(CpuSettings, table, path=...)` turns a TOML table (or any dict) into an instance:

* values are checked against the field's declared type. A settings file's values carry their own
  type (TOML), so there they must have it: `steps = "400"` or `online = "true"` is refused (a quoted
  value is text), `int` takes 3 and 3.0 but never 3.5 or true, `float` takes ints but never NaN or
  infinity (no setting of this product can use them). Text from the command line (`--set`, a flag,
  an environment variable) is parsed: "3" is 3, "true" is true, `list[X]` takes a comma-separated
  string, `X | None` takes the empty string or "none" as None;
* numbers are range-checked (`ge`, `gt`, `le`, `lt`, and never above 1e12 in size), strings checked
  against `choices`;
* `dict[str, X]` is a table of free keys (a program's `env`), every value an X;
* a nested dataclass field is a table (`[cpu]`), a `list[SomeDataclass]` an array of tables
  (`[[task]]`, named `task[3].stressor` in errors);
* unknown keys are refused, naming the file, the field and the keys that are known there.

`apply_overrides(obj, ["cpu.budget_millicores=6000"], flag="--set")` goes through the same path, so a
value from the command line is checked exactly like one from a file. Cross-field rules live in the
settings class's `validate(path)` method, which both call once everything is in place.

Every problem is an InputError naming the file (or the flag), the field and what was expected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import tomllib
import types
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

from ..core.errors import InputError

T = TypeVar("T")

#: No setting of this product is larger (seconds, millicores, steps, seeds below 2**32): a larger one is
#: a typo, and 1e300 would only fill the tables with 300-digit numbers or overflow a total to infinity
MAX_MAGNITUDE = 1e12

_CHECKS = "bsp_planner.check"
_INTERNAL = "bsp_planner.internal"


def setting(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[str, ...] | None = None,
    min_items: int | None = None,
) -> Any:
    """A dataclass field with its checks. Bounds apply to a number, or to every item of a list."""
    check = {"ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices, "min_items": min_items}
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        metadata={_CHECKS: {k: v for k, v in check.items() if v is not None}},
    )


def internal(default: Any = None, **kw: Any) -> Any:
    """A field that is not a setting (a file's own path, its name): never read from a file."""
    return dataclasses.field(default=default, metadata={_INTERNAL: True}, **kw)


def setting_fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get(_INTERNAL)}


def describe(tp: Any) -> str:
    """A type as a user reads it in an error: 'int', 'a number', 'list of int', 'one of a, b'."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is bool:
        return "true or false"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} {describe(args[0])} values"
        return f"a list of {describe(args[0])}" if args else "a list"
    if origin in (typing.Union, types.UnionType):
        parts = [describe(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + " (or nothing)" if type(None) in args else text
    if dataclasses.is_dataclass(tp):
        return "a table"
    if origin is dict:
        return f"a table of {describe(args[1])} values" if args else "a table"
    return getattr(tp, "__name__", str(tp))


class _Bad(Exception):
    """A value does not fit a type; the message (if any) says why beyond the expected type."""


def _split_list(text: str) -> list[str]:
    """'a, b' or '[1, 7]' from the command line -> items (quotes around items dropped)."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return [item.strip().strip("'\"") for item in text.split(",") if item.strip()]


def _coerce(value: Any, tp: Any, from_text: bool, typed: bool = False) -> Any:
    """Value -> tp, or _Bad. from_text: the value came from the command line (always a string); typed:
    it came from a file whose values carry their own type (TOML), so text is never read as a number."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if typed and isinstance(value, str) and tp not in (str, Path, Any) and origin is not Literal:
        if not (
            origin in (typing.Union, types.UnionType)
            and any(a in (str, Path) or typing.get_origin(a) is Literal for a in args)
        ):
            raise _Bad(f"{describe(tp)}, written without quotes (a quoted value is text in TOML)")
    if origin in (typing.Union, types.UnionType):
        spelled_none = from_text and isinstance(value, str) and value.strip().lower() in ("", "none")
        if type(None) in args and (value is None or spelled_none):
            return None
        # A literal string alternative ("auto") first, so it is never read as a number.
        ordered = sorted((a for a in args if a is not type(None)), key=lambda a: typing.get_origin(a) is not Literal)
        reasons = []
        for a in ordered:
            try:
                return _coerce(value, a, from_text, typed)
            except _Bad as exc:
                if exc.args:
                    reasons.append(str(exc.args[0]))
        raise _Bad(*reasons[:1])
    if origin is Literal:
        if value in args:
            return value
        raise _Bad()
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise _Bad()
    if tp in (int, float):
        if isinstance(value, bool):
            raise _Bad()
        if isinstance(value, str):
            try:
                value = float(value.strip()) if tp is float or any(c in value for c in ".eE") else int(value.strip())
            except ValueError:
                raise _Bad() from None
        if not isinstance(value, (int, float)):
            raise _Bad()
        if tp is float:
            if not math.isfinite(value):
                raise _Bad("a finite number (not NaN or infinity)")
            return float(value)
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise _Bad()
        return int(value)
    if tp is str:
        if not isinstance(value, str):
            raise _Bad()
        return value
    if origin in (list, tuple):
        if isinstance(value, str):
            items: list[Any] = _split_list(value)
            from_text = True
        elif isinstance(value, (list, tuple)):
            items = list(value)
        else:
            raise _Bad()
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(items) != len(args):
                raise _Bad()
            return tuple(_coerce(v, a, from_text, typed) for v, a in zip(items, args, strict=True))
        item_type = args[0] if args else Any
        out = [v if item_type is Any else _coerce(v, item_type, from_text, typed) for v in items]
        return tuple(out) if origin is tuple else out
    if origin is dict:  # a table of free keys (a program's environment): the keys are strings, values of args[1]
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _Bad()
        return {k: _coerce(v, args[1], from_text) for k, v in value.items()} if args else dict(value)
    if tp is Any:
        return value
    if tp is Path:
        if not isinstance(value, str):
            raise _Bad()
        return Path(value)
    raise TypeError(f"settings of type {tp!r} are not supported")  # a programming error, not an input error


def _check(value: Any, checks: dict, tp: Any) -> str | None:
    """What is wrong with an already coerced value, or None."""
    if value is None:
        return None
    items = value if isinstance(value, (list, tuple)) else [value]
    if "min_items" in checks and isinstance(value, (list, tuple)) and len(value) < checks["min_items"]:
        return f"expected at least {checks['min_items']} item(s), got {list(value)!r}"
    if "choices" in checks:
        bad = [v for v in items if v not in checks["choices"]]
        if bad:
            return f"expected one of {', '.join(checks['choices'])}, got {bad[0]!r}"
    for v in items:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        for key, ok, text in (
            ("ge", lambda a, b: a >= b, ">="),
            ("gt", lambda a, b: a > b, ">"),
            ("le", lambda a, b: a <= b, "<="),
            ("lt", lambda a, b: a < b, "<"),
        ):
            if key in checks and not ok(v, checks[key]):
                return f"expected a number {text} {checks[key]:g}, got {v!r}"
        if abs(v) > MAX_MAGNITUDE:  # after the field's own bounds, which say more
            return f"expected a number of at most {MAX_MAGNITUDE:g} in size, got {v!r}"
    return None


def coerce_field(
    value: Any,
    tp: Any,
    checks: dict,
    *,
    where: str,
    path: str | Path | None,
    from_text: bool = False,
    typed: bool = False,
) -> Any:
    """One value of one field, coerced and checked; an InputError naming `where` otherwise."""
    try:
        out = _coerce(value, tp, from_text, typed)
    except _Bad as exc:
        expected = exc.args[0] if exc.args else describe(tp)
        raise InputError(f"expected {expected}, got {value!r}", path=path, field=where) from None
    problem = _check(out, checks, tp)
    if problem:
        raise InputError(problem, path=path, field=where)
    return out


def _build(
    cls: type[T], data: Any, base: T | None, prefix: str, path: str | Path | None, from_text: bool, typed: bool = False
) -> T:
    """An instance of cls from a table, on top of `base` (or the defaults)."""
    label = prefix.rstrip(".") or None
    if not isinstance(data, dict):
        raise InputError(f"expected a table of settings, got {data!r}", path=path, field=label)
    fields = setting_fields(cls)
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for key, raw in data.items():
        where = f"{prefix}{key}"
        if key not in fields:
            raise InputError(
                f"unknown setting; known settings here: {', '.join(sorted(fields))}", path=path, field=where
            )
        tp = hints[key]
        values[key] = _value(
            tp, raw, getattr(base, key) if base is not None else None, fields[key], where, path, from_text, typed
        )
    missing = [
        n
        for n, f in fields.items()
        if n not in values
        and base is None
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise InputError(f"missing required setting '{missing[0]}'", path=path, field=f"{prefix}{missing[0]}")
    if base is not None:
        return dataclasses.replace(base, **values)  # type: ignore[type-var]
    return cls(**values)


def _value(
    tp: Any,
    raw: Any,
    current: Any,
    f: dataclasses.Field,
    where: str,
    path: str | Path | None,
    from_text: bool,
    typed: bool = False,
) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, raw, current, f"{where}.", path, from_text, typed)
    if origin in (typing.Union, types.UnionType) and type(None) in args:  # an optional table: `X | None`
        tables = [a for a in args if isinstance(a, type) and dataclasses.is_dataclass(a)]
        if len(tables) == 1 and len(args) == 2:
            return None if raw is None else _build(tables[0], raw, current, f"{where}.", path, from_text, typed)
    if origin is list and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        if not isinstance(raw, list):
            raise InputError(f"expected an array of [[{where}]] tables, got {raw!r}", path=path, field=where)
        out = [_build(args[0], item, None, f"{where}[{i}].", path, from_text, typed) for i, item in enumerate(raw)]
        problem = _check(out, f.metadata.get(_CHECKS, {}), tp)
        if problem:
            raise InputError(problem, path=path, field=where)
        return out
    return coerce_field(raw, tp, f.metadata.get(_CHECKS, {}), where=where, path=path, from_text=from_text, typed=typed)


def load_settings(
    cls: type[T],
    data: dict,
    *,
    path: str | Path | None = None,
    base: T | None = None,
    prefix: str = "",
    typed: bool = False,
) -> T:
    """A settings instance from a table (a parsed TOML file, saved metadata): every value coerced and
    checked, unknown keys refused; then the class's own `validate(path)` if it has one. `typed`: the
    table is a settings file's (TOML), whose numbers and booleans must not be quoted."""
    obj = _build(cls, data, base, prefix, path, from_text=False, typed=typed)
    _validate(obj, path)
    return obj


def _validate(obj: Any, path: str | Path | None) -> None:
    validate = getattr(obj, "validate", None)
    if callable(validate):
        validate(path)


def read_toml(path: str | Path, what: str) -> dict:
    """A TOML file's table (a UTF-8 byte-order mark dropped); a missing file, a folder or bad TOML is an
    InputError naming the file."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"expected a {what} file, this is a folder", path=path)
    if not path.is_file():
        raise InputError(f"{what} file not found", path=path)
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", path=path) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read it: {exc}", path=path) from exc


def load_settings_file(
    cls: type[T], path: str | Path, what: str, init: dict[str, Any] | None = None, *, required: tuple[str, ...] = ()
) -> T:
    """Read a TOML settings file into cls. `init`: internal fields to set first (the file's path, name);
    `required`: keys the file must give although they have defaults (an empty experiment is a mistake)."""
    data = read_toml(path, what)
    missing = [k for k in required if k not in data]
    if missing:
        empty = "the file is empty; " if not data else ""
        raise InputError(
            f"{empty}the {what} file must give {' and '.join(missing)} (`bsp-planner init DIR` writes a complete one)",
            path=path,
            field=missing[0],
        )
    base = dataclasses.replace(cls(), **init) if init else cls()  # type: ignore[type-var]
    return load_settings(cls, data, path=path, base=base, typed=True)


def parse_override(item: str, flag: str) -> tuple[list[str], str]:
    """'cpu.budget_millicores=6000' -> (['cpu', 'budget_millicores'], '6000')."""
    if "=" not in item:
        raise InputError(f"expected KEY=VALUE, got {item!r}", field=flag)
    key, value = item.split("=", 1)
    parts = [p.strip() for p in key.strip().split(".")]
    if not all(parts):
        raise InputError(f"expected KEY or SECTION.KEY, got {key.strip()!r}", field=flag)
    return parts, value.strip()


def apply_overrides(obj: T, overrides: list[str] | None, *, flag: str = "--set", validate: bool = True) -> T:
    """`KEY=VALUE` / `SECTION.KEY=VALUE` overrides, checked exactly like the file's values. Returns the
    updated instance (a new one for frozen settings); errors name the flag, the field and the value."""
    for item in overrides or []:
        parts, text = parse_override(item, flag)
        obj = _override(obj, parts, text, flag, ".".join(parts))
    if validate:
        _validate(obj, None)
    return obj


def flag_overrides(flags: Iterable[tuple[str, str, Any]]) -> list[tuple[str, str]]:
    """Command-line flags as settings overrides: every (flag, KEY, value) given -> (flag, 'KEY=VALUE').

    A flag not given (None, False or an empty list) is left out; true is written 'true', a path as its
    absolute path, a list comma-separated. Apply them with `apply_flag_overrides`, so that a bad value is
    checked exactly like the file's and its error names the flag.
    """
    out: list[tuple[str, str]] = []
    for flag, key, value in flags:
        if value is None or value is False or (isinstance(value, (list, tuple)) and not value):
            continue
        if value is True:
            text = "true"
        elif isinstance(value, Path):
            text = str(value.resolve())
        elif isinstance(value, (list, tuple)):
            text = ",".join(str(v) for v in value)
        else:
            text = str(value)
        out.append((flag, f"{key}={text}"))
    return out


def apply_flag_overrides(obj: T, flagged: Iterable[tuple[str, str]]) -> T:
    """(flag, KEY=VALUE) overrides applied in order, each error naming its flag; then the settings'
    cross-field rules once, on the result (an intermediate state may break them)."""
    flagged = list(flagged)
    for flag, item in flagged:
        obj = apply_overrides(obj, [item], flag=flag, validate=False)
    with flags_blamed(flagged, getattr(obj, "path", None)):
        _validate(obj, None)
    return obj


def flag_for(field: str | None, flagged: Iterable[tuple[str, str]]) -> tuple[str, str] | None:
    """The last (flag, KEY=VALUE) that set `field` (or a field inside it, or the table holding it)."""
    if not field:
        return None
    found = None
    for flag, item in flagged:
        key = item.split("=", 1)[0].strip()
        if key == field or key.startswith(f"{field}.") or field.startswith(f"{key}."):
            found = (flag, item)
    return found


@contextlib.contextmanager
def flags_blamed(flagged: Iterable[tuple[str, str]], settings_file: str | Path | None = None) -> Iterator[None]:
    """An InputError about a field a flag set names the flag and its value, not the settings file the field
    would otherwise have come from (`-s floor,floor` is the command line's, not the experiment's); an
    error naming another file (a forecast file the flag pointed at) keeps that file."""
    flagged = list(flagged)
    try:
        yield
    except InputError as exc:
        by = flag_for(exc.field, flagged)
        if by is None:
            raise
        flag, item = by
        given = item if flag.endswith("set") else item.split("=", 1)[1]  # --set KEY=VALUE, --budget VALUE
        # the settings file the field would have come from is not the culprit; a file the flag itself names
        # (a run folder's steps.jsonl for --actual), or another one it led to (a forecast file), stays named
        settings_own = settings_file is None or (
            exc.path is not None and Path(exc.path).resolve() == Path(settings_file).resolve()
        )
        inside = exc.path is not None and Path(exc.path).resolve().is_relative_to(Path(given).resolve())
        keep = exc.path is not None and (inside or not settings_own)
        path, line = (exc.path, exc.line) if keep else (None, None)
        raise InputError(f"{exc.message} (from {flag} {given})", path=path, line=line, field=exc.field) from None


def _is_table_list(tp: Any) -> bool:
    """A list or tuple of settings tables (an array of tables in TOML, [[node]])."""
    args = [a for a in typing.get_args(tp) if a is not Ellipsis]
    return typing.get_origin(tp) in (list, tuple) and bool(args) and all(dataclasses.is_dataclass(a) for a in args)


def _override(obj: Any, parts: list[str], text: str, flag: str, where: str) -> Any:
    """Set the field at `parts` (a path through nested settings) from text; `where` is the full key."""
    cls = type(obj)
    fields = setting_fields(cls)
    key = parts[0]
    if key not in fields:
        raise InputError(
            f"unknown setting in {flag} {where}={text}; known settings here: {', '.join(sorted(fields))}", field=where
        )
    tp = typing.get_type_hints(cls)[key]
    current = getattr(obj, key)
    if _is_table_list(tp):  # [[node]]: several tables, each whole; a flag cannot say which one or all of it
        raise InputError(
            f"[[{key}]] is a list of tables, set in the settings file only ([[{key}]] blocks); {flag} cannot set it",
            field=where,
        )
    if len(parts) > 1:
        if not dataclasses.is_dataclass(tp):
            raise InputError(f"{key} is not a table; expected {flag} {key}=VALUE", field=where)
        new = _override(current, parts[1:], text, flag, where)
    elif dataclasses.is_dataclass(tp):
        raise InputError(f"[{key}] is a table; expected {flag} {key}.FIELD=VALUE", field=where)
    else:
        try:
            new = coerce_field(text, tp, fields[key].metadata.get(_CHECKS, {}), where=where, path=None, from_text=True)
        except InputError as exc:
            raise InputError(f"{exc.message} (from {flag} {where}={text})", field=where) from None
    return dataclasses.replace(obj, **{key: new})
