"""JSON Schema from Python type hints, the way FastMCP derives a tool's schema.

Hand-written rather than pydantic: pydantic-core is a native extension that componentize-py
cannot put in a component, and the program runs this module inside the component too (for
`to_json_value`). It covers what tool signatures use: str, int, float, bool, None, list/tuple/
set, dict[str, T], Optional/unions, Literal, Enum, dataclasses and TypedDicts, and
`Annotated[T, "description"]` or `Annotated[T, Field(description=...)]`.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Field:
    """Extra schema for a parameter or field: `Annotated[int, Field(description="...", ge=0)]`."""

    description: str | None = None
    ge: float | None = None
    le: float | None = None
    min_length: int | None = None
    max_length: int | None = None

    def apply(self, schema: dict[str, Any]) -> dict[str, Any]:
        extra = {
            "description": self.description,
            "minimum": self.ge,
            "maximum": self.le,
            "minLength": self.min_length,
            "maxLength": self.max_length,
        }
        return {**schema, **{k: v for k, v in extra.items() if v is not None}}


def _is_typeddict(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, dict) and hasattr(t, "__total__")


def schema_of(t: Any) -> dict[str, Any]:
    """The JSON Schema of one type hint."""
    if t is inspect.Parameter.empty or t is Any:
        return {}
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is typing.Annotated:
        schema = schema_of(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema = {**schema, "description": extra}
            elif isinstance(extra, Field):
                schema = extra.apply(schema)
        return schema
    if t is str:
        return {"type": "string"}
    if t is bool:
        return {"type": "boolean"}
    if t is int:
        return {"type": "integer"}
    if t is float:
        return {"type": "number"}
    if t is None or t is type(None):
        return {"type": "null"}
    if t in (bytes, bytearray):
        raise TypeError("bytes has no JSON form: take a str (base64) instead")
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [schema_of(a) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, set, frozenset) or t in (list, set, frozenset):
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = schema_of(args[0])
        if origin in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0])}
        items = [schema_of(a) for a in args]
        return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items), "maxItems": len(items)}
    if origin is dict or t is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = schema_of(args[1])
        return schema
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return {"enum": [m.value for m in t]}
    if dataclasses.is_dataclass(t) and isinstance(t, type):
        hints = typing.get_type_hints(t, include_extras=True)
        props, required = {}, []
        for f in dataclasses.fields(t):
            props[f.name] = schema_of(hints[f.name])
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
        return _object(props, required, inspect.getdoc(t) if t.__doc__ and not t.__doc__.startswith(t.__name__ + "(") else None)
    if _is_typeddict(t):
        hints = typing.get_type_hints(t, include_extras=True)
        props = {k: schema_of(v) for k, v in hints.items()}
        return _object(props, sorted(t.__required_keys__), inspect.getdoc(t))
    raise TypeError(f"no JSON Schema for the type {t!r}: use str, int, float, bool, lists, dicts, dataclasses or TypedDicts")


def _object(props: dict[str, Any], required: list[str], description: str | None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    if description:
        schema["description"] = description
    return schema


def input_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The input schema of a tool function: one property per parameter."""
    hints = typing.get_type_hints(fn, include_extras=True)
    props, required = {}, []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: a tool takes named parameters, not *args or **kwargs")
        schema = schema_of(hints.get(p.name, p.annotation))
        if p.default is p.empty:
            required.append(p.name)
        else:
            schema = {**schema, "default": to_json_value(p.default)}
        props[p.name] = schema
    return _object(props, required, None)


def output_schema(fn: Callable[..., Any]) -> dict[str, Any] | None:
    """The output schema, when the tool returns an object (a dataclass or TypedDict)."""
    t = typing.get_type_hints(fn, include_extras=True).get("return")
    if typing.get_origin(t) is typing.Annotated:
        t = typing.get_args(t)[0]
    if (dataclasses.is_dataclass(t) and isinstance(t, type)) or _is_typeddict(t):
        return schema_of(t)
    return None


def to_json_value(value: Any) -> Any:
    """A result as JSON: dataclasses as objects, enums by value, tuples and sets as arrays."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json_value(v) for v in value]
    return value
