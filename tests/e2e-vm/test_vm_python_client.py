"""The Python MCP SDK (PyPI `mcp`) against an app's bermd inside the VM: straight to
`rpc-0.sock` (through socat) and through the stdio bridge `berm mcp --socket`."""

import re

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from conftest import BIN


def servers(vm):
    return {
        "rpc-socket": StdioServerParameters(command="socat", args=["-", f"UNIX-CONNECT:{vm.rpc}"]),
        "berm-mcp-bridge": StdioServerParameters(command=str(BIN / "berm"), args=["mcp", "--socket", str(vm.rpc)]),
    }


@pytest.mark.parametrize("route", ["rpc-socket", "berm-mcp-bridge"])
@pytest.mark.anyio
async def test_lists_and_calls_the_apps_tools(vm, route):
    async with Client(servers(vm)[route], mode="legacy", read_timeout_seconds=120, cache=None) as c:
        assert c.server_info.name == "bermd"
        tools = {t.name for t in (await c.list_tools()).tools}
        assert {"notes_add", "notes_list", "notes_search", "notes_delete"} <= tools
        # What the strictest clients (Claude Desktop, claude.ai) accept.
        assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) for name in tools), tools
        added = await c.call_tool("notes_add", {"title": f"from {route}", "text": "in the VM"})
        assert not added.is_error, added.content[0].text
        listed = await c.call_tool("notes_list", {})
        assert f"from {route}" in listed.content[0].text


@pytest.mark.anyio
async def test_failures_are_answered_and_the_app_keeps_serving(vm):
    async with Client(servers(vm)["rpc-socket"], mode="legacy", read_timeout_seconds=120, cache=None) as c:
        # Arguments that do not match the schema: refused before the program runs,
        # as a result the model reads.
        bad = await c.call_tool("notes_add", {"title": "no text"})
        assert bad.is_error
        assert bad.content[0].text == 'invalid arguments for `notes_add`: "text" is a required property'
        # An unknown tool stays a protocol error.
        with pytest.raises(MCPError, match="no tool `notes_nosuch`"):
            await c.call_tool("notes_nosuch", {})
        # The program itself reports a failure: a tool result marked as an error.
        failed = await c.call_tool("notes_add", {"title": " ", "text": "x"})
        assert failed.is_error
        assert "non-empty title" in failed.content[0].text
        listed = await c.call_tool("notes_list", {})
        assert not listed.is_error


@pytest.fixture
def anyio_backend():
    return "asyncio"
