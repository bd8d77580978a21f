"""berm programs in Python, written the way FastMCP writes tools.

    from berm import Program
    mcp = Program("greet", description="Greets people.")

    @mcp.tool()
    def hello(name: str) -> str:
        \"\"\"Greet someone by name.\"\"\"
        return f"hello, {name}"

The function's type hints give the input schema (and, for a dataclass or TypedDict return, the
output schema), its docstring the description. `sdk/python/build.py` imports the program
once in CPython to write berm's manifest from this code, then builds one WebAssembly component
with componentize-py that exports `berm:program/tools@1.0.0` (docs/components.md).
Host calls are in `berm.kv`, `berm.http` and `berm.log`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from typing import Any, Callable

from berm._schema import Field, input_schema, output_schema, to_json_value

__all__ = ["Program", "ToolError", "Field"]

_TOOL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class ToolError(Exception):
    """A failure the model should see (MCP's `isError` result) rather than a host error."""


@dataclasses.dataclass
class _Tool:
    name: str
    fn: Callable[..., Any]
    description: str
    annotations: dict[str, Any]
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


_program: Program | None = None


def the_program() -> Program:
    """The one Program the app's module created (the build and the export find it here)."""
    if _program is None:
        raise RuntimeError("the program's module created no `berm.Program(...)`")
    return _program


class Program:
    """One berm program: its tools, registered as with FastMCP's `@mcp.tool()`."""

    def __init__(self, name: str, description: str = "", usage: str = "", calls: list[str] | None = None):
        global _program
        if _program is not None:
            raise RuntimeError("a berm program creates one Program")
        self.name = name
        self.description = inspect.cleandoc(description).strip()
        self.usage = inspect.cleandoc(usage).strip()
        self.calls = list(calls or [])
        self._tools: dict[str, _Tool] = {}
        _program = self

    def tool(
        self,
        name_or_fn: str | Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        title: str | None = None,
        annotations: dict[str, Any] | None = None,
    ) -> Any:
        """Registers a function as a tool: `@mcp.tool`, `@mcp.tool()` or `@mcp.tool("name")`."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            tool_name = name or (name_or_fn if isinstance(name_or_fn, str) else None) or fn.__name__
            if not _TOOL_NAME.match(tool_name):
                raise ValueError(
                    f"tool name `{tool_name}` is not valid: use 1-64 of a-z, 0-9, `_`, `-`, starting with a letter or digit"
                )
            if tool_name in self._tools:
                raise ValueError(f"tool `{tool_name}` is registered twice")
            notes = dict(annotations or {})
            if title:
                notes["title"] = title
            self._tools[tool_name] = _Tool(
                name=tool_name,
                fn=fn,
                description=inspect.cleandoc(description or fn.__doc__ or ""),
                annotations=notes,
                input_schema=input_schema(fn),
                output_schema=output_schema(fn),
            )
            return fn

        if callable(name_or_fn):
            return register(name_or_fn)
        return register

    def manifest(self) -> dict[str, Any]:
        """The manifest JSON (ABI 1's `berm.manifest` section) for the tools registered so far."""
        tools = []
        for t in self._tools.values():
            entry: dict[str, Any] = {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            if t.output_schema is not None:
                entry["output_schema"] = t.output_schema
            if t.annotations:
                entry["annotations"] = t.annotations
            tools.append(entry)
        return {"abi": 1, "description": self.description, "usage": self.usage, "calls": self.calls, "tools": tools}

    def call(self, tool: str, arguments: str) -> str:
        """Runs one tool: what the component's `tools.call` export does."""
        t = self._tools.get(tool)
        if t is None:
            raise ToolError(f"no tool `{tool}` in {self.name}")
        args = json.loads(arguments)
        if not isinstance(args, dict):
            raise ToolError("the arguments must be a JSON object")
        result = t.fn(**args)
        if inspect.iscoroutine(result):
            result = _run(result)
        if isinstance(result, str) and t.output_schema is None:
            return result
        return json.dumps(to_json_value(result))


def _run(coroutine: Any) -> Any:
    """Runs an `async def` tool to its end: host calls are synchronous, so nothing awaits long."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise ToolError("an async tool awaited something that does not complete at once; berm's host calls are synchronous")
