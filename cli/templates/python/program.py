"""{{name}}: a berm program in Python.

Tools are written as FastMCP writes them: the type hints give the schema, the docstring the
description. `./build` makes {{name}}.wasm, a WebAssembly component with berm's manifest.
Host calls, each needing its grant at deploy: `berm.kv` (kv), `berm.http` (net=HOST),
`berm.log` (log). Only the modules imported here reach the component.
"""

from typing import Annotated

from berm import Program

mcp = Program(
    "{{name}}",
    description="What this program is, for people and models.",
    usage="When a model should reach for it.",
)


@mcp.tool(annotations={"readOnlyHint": True, "idempotentHint": True})
def hello(name: Annotated[str, "who to greet"]) -> str:
    """Greet someone by name."""
    return f"hello, {name}"
