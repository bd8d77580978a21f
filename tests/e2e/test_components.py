"""Programs built as WebAssembly components, through the Python MCP SDK (PyPI `mcp`): notes-ts
(TypeScript, sdk/ts, kv), fetch-py (Python, sdk/python, net= and a bound secret) and shapes
(Rust, plain WIT exports and no berm manifest), from the app folders scripts/build-apps.sh
assembles. Each call runs in a fresh instance: a module-level counter reads 1 every time."""

import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from conftest import BIN, ROOT, Bermd, free_port

APPS = Path(os.environ.get("BERM_APPS_DIR", ROOT / "target" / "apps"))
# A test program for sdk/ts's http module (apps/web-ts), built by scripts/build-components.sh.
WEB_TS = ROOT / "target" / "components" / "web-ts.wasm"
TOKEN = "s3cret-token-for-fetch-py"


class Recorder(http.server.BaseHTTPRequestHandler):
    """A page server on loopback that records the Authorization header of each request."""

    seen: list = []

    def do_GET(self):  # noqa: N802 -- the name http.server calls
        Recorder.seen.append((self.path, self.headers.get("authorization")))
        body = f"page {self.path}".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A bermd serving the three components and web-ts, and two page servers: one granted, one not."""
    pages = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder) for _ in range(2)]
    for server in pages:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    granted, ungranted = (f"127.0.0.1:{s.server_address[1]}" for s in pages)
    home = tmp_path_factory.mktemp("berm-components") / "home"
    daemon = Bermd(home, free_port())
    daemon.berm("deploy", "--app", str(APPS / "notes-ts"))
    daemon.berm("deploy", "--app", str(APPS / "shapes"))
    secret = subprocess_input(daemon, ["secret", "set", "fetch-py", "TOKEN"], TOKEN + "\n")
    assert secret.returncode == 0, secret.stderr
    daemon.berm(
        "deploy", "fetch-py", str(APPS / "fetch-py" / "fetch-py.wasm"),
        "--grant", "random", "--grant", f"net={granted}", "--secret", f"TOKEN=http://{granted}",
    )
    secret = subprocess_input(daemon, ["secret", "set", "web-ts", "TOKEN"], TOKEN + "\n")
    assert secret.returncode == 0, secret.stderr
    daemon.berm(
        "deploy", "web-ts", str(WEB_TS),
        "--grant", f"net={granted}", "--secret", f"TOKEN=http://{granted}",
    )
    yield daemon, granted, ungranted
    for server in pages:
        server.shutdown()
    # Dropping three compiled components of 35-40 MB each takes a loaded machine a while.
    daemon.proc.terminate()
    daemon.proc.wait(timeout=60)
    daemon.log.close()


def subprocess_input(daemon, args, stdin):
    return subprocess.run([str(BIN / "berm"), *args], env=daemon.env, input=stdin, capture_output=True, text=True)


def client(daemon, transport):
    if transport == "stdio":
        server = StdioServerParameters(command=str(BIN / "berm"), args=["mcp"], env={"BERM_HOME": str(daemon.home)})
    else:
        server = streamable_http_client(daemon.url, http_client=create_mcp_http_client(headers=daemon.headers))
    return Client(server, read_timeout_seconds=60, cache=None)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.anyio
async def test_notes_in_typescript(served, transport):
    daemon, _, _ = served
    async with client(daemon, transport) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert {"notes-ts_add", "notes-ts_list", "notes-ts_search", "notes-ts_delete"} <= set(tools)
        add = tools["notes-ts_add"]
        # The schema comes from the zod shape, read at build time.
        assert add.input_schema["properties"]["title"] == {"type": "string", "description": "a short title"}
        assert sorted(add.input_schema["required"]) == ["text", "title"]
        assert tools["notes-ts_list"].annotations.read_only_hint is True

        added = await c.call_tool("notes-ts_add", {"title": f"from {transport}", "text": "Written in TypeScript"})
        assert not added.is_error, added.content
        note = json.loads(added.content[0].text)
        assert note["title"] == f"from {transport}"
        found = await c.call_tool("notes-ts_search", {"query": "typescript"})
        assert note["id"] in [n["id"] for n in json.loads(found.content[0].text)]

        empty = await c.call_tool("notes-ts_add", {"title": " ", "text": "x"})
        assert empty.is_error and empty.content[0].text == "a note needs a non-empty title"
        bad = await c.call_tool("notes-ts_delete", {"id": "one"})
        assert bad.is_error and "invalid arguments" in bad.content[0].text


@pytest.mark.anyio
async def test_nothing_survives_a_call_in_typescript_or_python(served):
    daemon, _, _ = served
    async with client(daemon, "stdio") as c:
        for tool in ["notes-ts_calls", "fetch-py_calls"]:
            seen = [json.loads((await c.call_tool(tool, {})).content[0].text)["calls"] for _ in range(3)]
            assert seen == [1, 1, 1], tool


@pytest.mark.anyio
async def test_python_fetches_through_egress_with_the_bound_token(served):
    daemon, granted, ungranted = served
    Recorder.seen.clear()
    async with client(daemon, "http") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        get = tools["fetch-py_get"]
        # The schema comes from the type hints, the description from the docstring.
        assert get.input_schema["properties"]["url"]["type"] == "string"
        assert get.input_schema["required"] == ["url"]
        assert get.input_schema["properties"]["authorized"] == {"type": "boolean", "default": False}
        assert get.output_schema["required"] == ["status", "body"]
        assert get.description.startswith("GET a URL and return its status and body.")

        page = await c.call_tool("fetch-py_get", {"url": f"http://{granted}/doc", "authorized": True})
        assert not page.is_error, page.content
        assert page.structured_content == {"status": 200, "body": "page /doc"}
        assert Recorder.seen == [("/doc", f"Bearer {TOKEN}")]

        plain = await c.call_tool("fetch-py_get", {"url": f"http://{granted}/plain"})
        assert not plain.is_error
        assert Recorder.seen[-1] == ("/plain", None)

        denied = await c.call_tool("fetch-py_get", {"url": f"http://{ungranted}/x", "authorized": True})
        assert denied.is_error
        assert "(denied)" in denied.content[0].text and ungranted in denied.content[0].text
        assert not any(path == "/x" for path, _ in Recorder.seen), "an ungranted host was reached"


@pytest.mark.anyio
async def test_typescript_fetches_through_egress_with_the_bound_token(served):
    daemon, granted, ungranted = served
    Recorder.seen.clear()
    async with client(daemon, "stdio") as c:
        page = await c.call_tool("web-ts_get", {"url": f"http://{granted}/ts", "authorized": True})
        assert not page.is_error, page.content
        assert page.structured_content == {"status": 200, "body": "page /ts"}
        assert Recorder.seen == [("/ts", f"Bearer {TOKEN}")]

        denied = await c.call_tool("web-ts_get", {"url": f"http://{ungranted}/y", "authorized": True})
        assert denied.is_error
        assert "(denied)" in denied.content[0].text and ungranted in denied.content[0].text
        assert not any(path == "/y" for path, _ in Recorder.seen), "an ungranted host was reached"


@pytest.mark.anyio
async def test_a_component_without_a_manifest_gets_its_tools_from_its_wit(served):
    daemon, _, _ = served
    async with client(daemon, "stdio") as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        area = tools["shapes_area"]
        # No description: a cargo build for wasm32-wasip2 carries no `package-docs` section
        # (the WIT doc comments stay behind), so only the schemas come from the WIT.
        rect = area.input_schema["properties"]["rect"]
        assert rect["properties"]["unit"]["anyOf"][1] == {"type": "null"}
        assert tools["shapes_tiles"].input_schema["properties"]["tile"] == {
            "type": "integer", "minimum": 0, "maximum": 4294967295,
        }
        r = {"origin": {"x": 0, "y": 0}, "width": 3, "height": 4, "unit": "cm"}
        done = await c.call_tool("shapes_area", {"rect": r})
        assert not done.is_error, done.content
        assert done.structured_content == {"result": 12.0}
        failed = await c.call_tool("shapes_area", {"rect": {**r, "width": -1}})
        assert failed.is_error and "negative" in failed.content[0].text
        none = await c.call_tool("shapes_bounds", {"points": []})
        assert none.structured_content == {"result": None}


@pytest.fixture
def anyio_backend():
    return "asyncio"
