"""One real MCP client session over Streamable HTTP with a bearer token (the Python SDK),
for the image and replica tests: lists the tools, calls one, prints the result as JSON.

    python mcp_http_call.py URL TOKEN TOOL ARGS_JSON [--mode legacy|auto]
"""

import json
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client


async def main():
    url, token, tool, arguments = sys.argv[1:5]
    mode = sys.argv[6] if len(sys.argv) > 6 and sys.argv[5] == "--mode" else "auto"
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    server = streamable_http_client(url, http_client=http)
    async with Client(server, mode=mode, read_timeout_seconds=30, cache=None) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        result = await client.call_tool(tool, json.loads(arguments))
        print(json.dumps({
            "server": client.server_info.name,
            "tools": tools,
            "is_error": bool(result.is_error),
            "text": [c.text for c in result.content if getattr(c, "text", None) is not None],
        }))


anyio.run(main)
