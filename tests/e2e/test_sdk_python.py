"""sdk/python without a component: the schemas its type hints give (each checked as a JSON
Schema 2020-12 and against sample arguments), the manifest, and how a call's result and
failures come out. The components themselves are tested in test_components.py."""

import dataclasses
import enum
import json
import sys
from pathlib import Path
from typing import Annotated, Literal, Optional, TypedDict

import jsonschema
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdk" / "python"))
import berm  # noqa: E402
from berm import Field, ToolError  # noqa: E402


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    """A point."""

    x: float
    y: float = 0.0


class Box(TypedDict):
    """A box."""

    corner: Point
    label: str


@pytest.fixture
def mcp():
    berm._program = None  # one Program per module: a fresh one per test
    return berm.Program("sample", description="  A sample.\n  ", usage="For tests.")


def test_type_hints_give_valid_schemas_that_accept_and_refuse(mcp):
    @mcp.tool(title="All types", annotations={"readOnlyHint": True})
    def every(
        s: Annotated[str, "a string"],
        i: Annotated[int, Field(ge=1, le=9)],
        f: float,
        b: bool,
        items: list[int],
        pair: tuple[str, int],
        tags: set[str],
        scores: dict[str, float],
        maybe: Optional[str],
        either: int | str,
        mode: Literal["a", "b"],
        color: Color,
        point: Point,
        box: Box,
        default: int = 3,
    ) -> Box:
        """Takes every kind of hint."""
        return box

    tool = mcp.manifest()["tools"][0]
    assert tool["name"] == "every" and tool["description"] == "Takes every kind of hint."
    assert tool["annotations"] == {"readOnlyHint": True, "title": "All types"}
    schema = tool["input_schema"]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator.check_schema(tool["output_schema"])
    props = schema["properties"]
    assert props["s"] == {"type": "string", "description": "a string"}
    assert props["i"] == {"type": "integer", "minimum": 1, "maximum": 9}
    assert props["pair"]["prefixItems"] == [{"type": "string"}, {"type": "integer"}]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    assert props["maybe"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert props["color"] == {"enum": ["red", "blue"]}
    assert props["point"]["required"] == ["x"] and props["point"]["description"] == "A point."
    assert props["default"] == {"type": "integer", "default": 3}
    assert "default" not in schema["required"] and "maybe" in schema["required"]
    assert tool["output_schema"]["required"] == ["corner", "label"]

    good = {
        "s": "x", "i": 5, "f": 1.5, "b": True, "items": [1], "pair": ["a", 1], "tags": ["t"],
        "scores": {"a": 1.0}, "maybe": None, "either": "e", "mode": "a", "color": "red",
        "point": {"x": 1}, "box": {"corner": {"x": 1, "y": 2}, "label": "l"},
    }
    jsonschema.validate(good, schema, cls=jsonschema.Draft202012Validator)
    for bad in [{**good, "i": 10}, {**good, "mode": "c"}, {**good, "pair": ["a"]}, {**good, "point": {"x": 1, "z": 2}}]:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema, cls=jsonschema.Draft202012Validator)


def test_the_manifest_is_abi_1(mcp):
    @mcp.tool
    def hello(name: str) -> str:
        """Greet."""
        return f"hello, {name}"

    assert mcp.manifest() == {
        "abi": 1,
        "description": "A sample.",
        "usage": "For tests.",
        "calls": [],
        "tools": [{
            "name": "hello",
            "description": "Greet.",
            "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "additionalProperties": False, "required": ["name"]},
        }],
    }


def test_results_and_failures(mcp):
    @mcp.tool("point")
    def make(x: float) -> Point:
        return Point(x=x)

    @mcp.tool()
    async def later(n: int) -> list[int]:
        return list(range(n))

    @mcp.tool()
    def refuse() -> str:
        raise ToolError("no, on purpose")

    assert json.loads(mcp.call("point", '{"x": 2}')) == {"x": 2, "y": 0.0}
    assert json.loads(mcp.call("later", '{"n": 3}')) == [0, 1, 2]
    with pytest.raises(ToolError, match="no, on purpose"):
        mcp.call("refuse", "{}")
    with pytest.raises(ToolError, match="no tool `nope` in sample"):
        mcp.call("nope", "{}")


def test_bad_tools_are_refused_when_registered(mcp):
    with pytest.raises(ValueError, match="tool name `Bad.Name` is not valid"):
        mcp.tool("Bad.Name")(lambda: None)
    with pytest.raises(TypeError, match="no JSON Schema for the type"):

        @mcp.tool()
        def takes_bytes(b: complex) -> str:
            return ""
    with pytest.raises(RuntimeError, match="one Program"):
        berm.Program("second")
