"""The Python MCP SDK's OAuth client (`mcp.client.auth.OAuthClientProvider`) against bermd
as a resource server, with the real authorization server of the TypeScript test (npm
oidc-provider on loopback, tests/e2e/oauth-issuer.mjs, run by oauth-issuer-serve.mjs). From
nothing (no static token anywhere) the SDK meets bermd's 401, discovers the protected
resource's metadata and the issuer's, registers itself, authorizes with PKCE (the test plays
the user's browser), gets a JWT for bermd's resource, lists the tools and calls one."""

import base64
import json
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import BIN, ROOT, free_port

APPS = ROOT / "target" / "apps"
REDIRECT = "http://127.0.0.1:1/callback"


class MemoryStorage:
    """The SDK's token storage, in memory: a client that has never met bermd."""

    def __init__(self):
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


class Browser:
    """What a browser does with an authorization URL: follows the issuer's redirects through
    login and consent (the issuer script finishes both as the user), carrying its cookies,
    until one goes to the redirect URI; the code, state and issuer it carries."""

    def __init__(self):
        self.asked: list[str] = []
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        self.asked.append(url)
        async with httpx2.AsyncClient(follow_redirects=False) as http:
            for _ in range(20):
                answer = await http.get(url)
                location = answer.headers.get("location")
                assert location, f"the issuer answered {answer.status_code} without a redirect: {answer.text}"
                url = urljoin(url, location)
                if url.startswith(REDIRECT):
                    query = parse_qs(urlparse(url).query)
                    assert "error" not in query, query
                    self.result = AuthorizationCodeResult(
                        code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
                    )
                    return
        raise AssertionError("too many redirects")

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None, "the SDK asked for the code before sending the user to authorize"
        return self.result


@pytest.fixture
def oauth_bermd(tmp_path: Path):
    """An issuer and a bermd that takes its tokens for `http://127.0.0.1:PORT/mcp`."""
    port, issuer_port = free_port(), free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    issuer = subprocess.Popen(
        ["node", str(Path(__file__).parent / "oauth-issuer-serve.mjs"), str(issuer_port), resource],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = issuer.stdout.readline()
    assert line.startswith("ready "), f"the issuer did not start: {line!r}"
    issuer_url = line.split()[1]
    home = tmp_path / "home"
    bermd = subprocess.Popen(
        [str(BIN / "bermd"), "--http", f"127.0.0.1:{port}", "--oauth-issuer", issuer_url, "--app", str(APPS / "echo")],
        env={"PATH": "/usr/bin:/bin", "BERM_HOME": str(home), "BERM_LOG": "warn,rmcp=error"},
    )
    deadline = time.monotonic() + 60
    while not (home / "mcp.sock").exists():
        assert bermd.poll() is None, "bermd exited early"
        assert time.monotonic() < deadline, "bermd did not come up"
        time.sleep(0.05)
    yield resource, issuer_url
    bermd.terminate()
    bermd.wait(timeout=30)
    issuer.stdin.close()
    issuer.wait(timeout=30)


def claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


@pytest.mark.anyio
async def test_the_python_sdks_oauth_client_goes_from_nothing_to_a_call(oauth_bermd):
    resource, issuer_url = oauth_bermd
    storage, browser = MemoryStorage(), Browser()
    auth = OAuthClientProvider(
        server_url=resource,
        client_metadata=OAuthClientMetadata(
            client_name="berm python e2e",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    transport = streamable_http_client(resource, http_client=create_mcp_http_client(auth=auth))
    async with Client(transport, mode="legacy", read_timeout_seconds=30, cache=None) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "echo_echo" in tools, tools
        done = await client.call_tool("echo_echo", {"message": "python over oauth"})
        assert not done.is_error
        assert done.content[0].text == "python over oauth"

    # It registered, asked for bermd's resource with PKCE and the challenge's scope, and holds a
    # JWT for bermd from the issuer.
    assert storage.client is not None and storage.client.client_id
    asked = parse_qs(urlparse(browser.asked[0]).query)
    assert asked["resource"] == [resource]
    assert asked["code_challenge_method"] == ["S256"]
    # The challenge's scope (the SDK adds offline_access, for a refresh token, when the issuer
    # offers it).
    assert set(asked["scope"][0].split()) - {"offline_access"} == {"berm:read", "berm:call"}
    token = claims(storage.tokens.access_token)
    assert token["aud"] == resource
    assert token["iss"] == issuer_url
    assert set(token["scope"].split()) == {"berm:read", "berm:call"}


@pytest.fixture
def anyio_backend():
    return "asyncio"
