"""The component's one export, `berm:program/tools@1.0.0`, as componentize-py wants it.

The build's entry module imports the program's module, then these classes; componentize-py
finds `WitWorld` and `Tools` there. Only the component imports this module: `wit_world` is
the bindings componentize-py generates at build time.
"""

import wit_world
from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.tools import ToolError as WitToolError

from berm import the_program


class WitWorld(wit_world.WitWorld):
    """The world itself exports nothing but the `tools` interface."""


class Tools(exports.Tools):
    """`call(tool, arguments)`: any exception a tool raises is the failure the model sees."""

    def call(self, tool: str, arguments: str) -> str:
        try:
            return the_program().call(tool, arguments)
        except Exception as e:  # noqa: BLE001 -- every failure of a tool is the model's to read
            raise Err(WitToolError(message=str(e) or type(e).__name__))
