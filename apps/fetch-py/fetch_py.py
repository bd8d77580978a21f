"""fetch-py: web pages through berm's egress, with a bound token, written in Python.

Tools are written as FastMCP writes them (a decorated function whose type hints give the
schema). Built by scripts/build-apps.sh with sdk/python/build.py into one WebAssembly component.
"""

from dataclasses import dataclass
from typing import Annotated

from berm import Program, ToolError
from berm import http

mcp = Program(
    "fetch-py",
    description="Fetches web pages from the hosts the operator granted (`net=HOST[:PORT]`), "
    "sending the operator's token to its bound host only.",
    usage="Reach for fetch-py to read a page or an API answer by URL. Only granted hosts answer; "
    "a refusal says which host was not granted.",
)


@dataclass
class Page:
    """A page's status and body."""

    status: int
    body: Annotated[str, "the body as text (invalid UTF-8 replaced)"]


# Module state lives only as long as one call: every call runs in a fresh instance, so this
# reads 1 on every call (the `calls` tool shows it; the tests check it).
calls_seen = 0


@mcp.tool(annotations={"readOnlyHint": True, "openWorldHint": True})
def get(url: Annotated[str, "an absolute http or https URL on a granted host"], authorized: bool = False) -> Page:
    """GET a URL and return its status and body. With `authorized`, the request carries
    `Authorization: Bearer <TOKEN>`: the operator's secret TOKEN, which bermd fills in only
    toward the host it is bound to."""
    headers = {"authorization": f"Bearer {http.secret('TOKEN')}"} if authorized else {}
    try:
        response = http.get(url, headers=headers)
    except http.BermError as e:
        raise ToolError(f"{url}: {e} ({e.code})") from None
    return Page(status=response.status, body=response.text)


@mcp.tool(annotations={"readOnlyHint": True})
def calls() -> dict:
    """How many calls this instance has served (always 1: nothing survives a call)."""
    global calls_seen
    calls_seen += 1
    return {"calls": calls_seen}
