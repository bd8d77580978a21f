"""The Python MCP SDK (PyPI `mcp`) against bermd, over every transport and
both ways of negotiating: the initialize handshake ("legacy") and the
2026-07-28 discover flow ("auto"), where list_changed comes through
`subscriptions/listen`."""

import importlib.metadata
import json
import re
import itertools

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

from conftest import BIN, WASM

TRANSPORTS = ["stdio", "http", "unix"]
MODES = ["legacy", "auto"]
names = itertools.count()


def test_the_sdk_is_the_version_we_pin():
    assert importlib.metadata.version("mcp") == "2.3.0"


def server_for(bermd, transport):
    if transport == "stdio":
        return StdioServerParameters(command=str(BIN / "berm"), args=["mcp"], env={"BERM_HOME": str(bermd.home)})
    if transport == "http":
        # The SDK's own client with its timeouts, carrying bermd's token.
        return streamable_http_client(bermd.url, http_client=create_mcp_http_client(headers=bermd.headers))
    # The Unix socket, through socat (newline-delimited JSON-RPC both ways).
    return StdioServerParameters(command="socat", args=["-", f"UNIX-CONNECT:{bermd.home / 'mcp.sock'}"])


def client(bermd, transport, mode, **kwargs):
    return Client(server_for(bermd, transport), mode=mode, read_timeout_seconds=30, cache=None, **kwargs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_tools_calls_failures_and_bad_arguments(bermd, transport, mode):
    async with client(bermd, transport, mode) as c:
        assert c.server_info.name == "bermd"
        tools = {t.name: t for t in (await c.list_tools()).tools}
        assert {"echo_echo", "echo_reverse", "echo_fail"} <= set(tools)
        schema = tools["echo_echo"].input_schema
        assert schema["type"] == "object"
        assert schema["properties"]["message"]["type"] == "string"
        assert schema["required"] == ["message"]
        # Usage notes reach the model through the description.
        assert "Usage: Reach for echo" in tools["echo_echo"].description

        done = await c.call_tool("echo_reverse", {"message": "berm"})
        assert not done.is_error
        assert done.content[0].text == "mreb"

        failed = await c.call_tool("echo_fail", {"message": "on purpose"})
        assert failed.is_error
        assert failed.content[0].text == "on purpose"

        # Bad arguments are a result the model reads, naming the field.
        bad = await c.call_tool("echo_echo", {"message": 5})
        assert bad.is_error
        assert bad.content[0].text == 'invalid arguments for `echo_echo`: `message`: 5 is not of type "string"'

        missing = await c.call_tool("echo_echo", {})
        assert missing.is_error
        assert missing.content[0].text == 'invalid arguments for `echo_echo`: "message" is a required property'

        with pytest.raises(MCPError) as unknown:
            await c.call_tool("nosuch_tool", {})
        assert unknown.value.error.code == types.INVALID_PARAMS
        assert "no tool `nosuch_tool`" in unknown.value.error.message


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_names_are_portable_and_struct_results_are_structured(bermd, transport, mode):
    await anyio.to_thread.run_sync(
        lambda: bermd.berm("deploy", "test", str(WASM / "conformance.wasm"), "--grant", "log")
    )
    async with client(bermd, transport, mode) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        for name in tools:
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name), name
        assert tools["test_text_stats"].output_schema["required"] == ["chars", "words", "lines"]
        done = await c.call_tool("test_text_stats", {"text": "hello big world"})
        assert not done.is_error
        assert done.structured_content == {"chars": 15, "words": 3, "lines": 1, "longest": "world"}
        assert json.loads(done.content[0].text) == done.structured_content


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_images_and_resources_arrive_as_content_and_progress_as_callbacks(bermd, transport, mode):
    await anyio.to_thread.run_sync(
        lambda: bermd.berm("deploy", "test", str(WASM / "conformance.wasm"), "--grant", "log")
    )
    async with client(bermd, transport, mode) as c:
        mixed = await c.call_tool("test_multiple_content_types", {})
        assert not mixed.is_error
        text, image, resource = mixed.content
        assert isinstance(text, types.TextContent)
        assert isinstance(image, types.ImageContent) and image.mime_type == "image/png"
        assert isinstance(resource, types.EmbeddedResource)
        assert str(resource.resource.uri) == "test://mixed-content-resource"
        assert json.loads(resource.resource.text) == {"test": "data", "value": 123}
        audio = await c.call_tool("test_audio_content", {})
        assert [type(b) for b in audio.content] == [types.AudioContent]
        reports = []

        async def heard(progress, total, message):
            reports.append((progress, total, message))

        done = await c.call_tool("test_tool_with_progress", {}, progress_callback=heard)
        assert not done.is_error
        assert reports == [(0, 100, "started"), (50, 100, "half way"), (100, 100, "done")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_resources_and_prompts_are_served_by_programs(bermd, transport, mode):
    await anyio.to_thread.run_sync(
        lambda: bermd.berm("deploy", "test", str(WASM / "conformance.wasm"), "--grant", "log")
    )
    async with client(bermd, transport, mode) as c:
        resources = {str(r.uri): r for r in (await c.list_resources()).resources}
        assert resources["test://static-text"].mime_type == "text/plain"
        assert resources["test://static-text"].name == "test_static_text"
        templates = (await c.list_resource_templates()).resource_templates
        assert sorted(t.uri_template for t in templates) == [
            "test://template/{id}/data",
            "test://template/{id}/guarded",
        ]
        text = await c.read_resource("test://static-text")
        assert text.contents[0].text == "This is the content of the static text resource."
        binary = await c.read_resource("test://static-binary")
        assert binary.contents[0].mime_type == "image/png" and binary.contents[0].blob
        data = await c.read_resource("test://template/42/data")
        assert json.loads(data.contents[0].text)["data"] == "Data for ID: 42"
        with pytest.raises(MCPError) as missing:
            await c.read_resource("test://nowhere")
        assert "no program serves `test://nowhere`" in missing.value.error.message

        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        assert [a.name for a in prompts["test_prompt_with_arguments"].arguments] == ["arg1", "arg2"]
        got = await c.get_prompt("test_prompt_with_arguments", {"arg1": "x", "arg2": "y"})
        assert got.messages[0].role == "user"
        assert got.messages[0].content.text == "Prompt with arguments: arg1='x', arg2='y'"
        image = await c.get_prompt("test_prompt_with_image")
        assert [m.content.type for m in image.messages] == ["image", "text"]
        done = await c.complete(
            types.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"),
            {"name": "arg1", "value": "x"},
        )
        assert done.completion.values == []
        assert "test_simple_prompt" not in {t.name for t in (await c.list_tools()).tools}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_a_program_asks_the_client_and_runs_again_with_the_answers(bermd, transport, mode):
    # Legacy sessions answer server-to-client requests; modern ones input-required results,
    # whose sealed state the SDK sends back: the program's code is the same.
    await anyio.to_thread.run_sync(
        # Other tests deploy `test` without `ask`: widening its grants needs --accept.
        lambda: bermd.berm(
            "deploy", "test", str(WASM / "conformance.wasm"), "--grant", "log", "--grant", "ask", "--accept"
        )
    )
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(
            action="accept", content={"name": "Ada", "color": "teal", "context": "tests", "ok": True}
        )

    async def sample(context, params):
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="Paris"), model="test-model"
        )

    async def roots(context):
        return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])

    async with client(
        bermd,
        transport,
        mode,
        elicitation_callback=elicit,
        sampling_callback=sample,
        list_roots_callback=roots,
    ) as c:
        done = await c.call_tool("test_input_required_result_elicitation", {})
        assert not done.is_error, done
        assert done.content[0].text == "Hello, Ada!"
        rounds = await c.call_tool("test_input_required_result_multi_round", {})
        assert rounds.content[0].text == "Ada likes teal."
        assert asked[-2:] == ["Step 1: What is your name?", "Step 2: What is your favorite color?"]
        sampled = await c.call_tool("test_input_required_result_sampling", {})
        assert sampled.content[0].text == "The model said: Paris"
        listed = await c.call_tool("test_input_required_result_list_roots", {})
        assert listed.content[0].text == "The client's roots: file:///work"
        state = await c.call_tool("test_input_required_result_request_state", {})
        assert state.content[0].text == "Confirmed: state-ok"
        prompt = await c.get_prompt("test_input_required_result_prompt")
        assert prompt.messages[0].content.text == "Answer with this context in mind: tests"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_list_changed_after_deploy_for_initialize_clients(bermd, transport):
    changed = anyio.Event()

    async def on_message(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    name = f"legacy{transport}{next(names)}"
    async with client(bermd, transport, "legacy", message_handler=on_message) as c:
        before = {t.name for t in (await c.list_tools()).tools}
        assert f"{name}_echo" not in before
        await anyio.to_thread.run_sync(lambda: bermd.berm("deploy", name, str(WASM / "echo.wasm")))
        with anyio.fail_after(20):
            await changed.wait()
        after = {t.name for t in (await c.list_tools()).tools}
        assert f"{name}_echo" in after
        done = await c.call_tool(f"{name}_echo", {"message": "new"})
        assert done.content[0].text == "new"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_list_changed_through_subscriptions_listen(bermd, transport):
    name = f"modern{transport}{next(names)}"
    async with client(bermd, transport, "auto") as c:
        assert c.protocol_version >= "2026-07-28"
        async with c.listen(tools_list_changed=True) as subscription:
            await anyio.to_thread.run_sync(lambda: bermd.berm("deploy", name, str(WASM / "echo.wasm")))
            with anyio.fail_after(20):
                async for event in subscription:
                    assert type(event).__name__ == "ToolsListChanged"
                    break
        after = {t.name for t in (await c.list_tools()).tools}
        assert f"{name}_echo" in after
        await anyio.to_thread.run_sync(lambda: bermd.berm("rm", name))
        assert f"{name}_echo" not in {t.name for t in (await c.list_tools()).tools}


@pytest.fixture
def anyio_backend():
    return "asyncio"
