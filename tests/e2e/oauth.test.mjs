// bermd as an OAuth resource server with a real authorization server: npm's oidc-provider
// on loopback (tests/e2e/oauth-issuer.mjs), and the official TypeScript SDK's OAuth client
// (@modelcontextprotocol/sdk 1.32.2). From nothing — no static token anywhere — the client
// meets a 401, discovers bermd's protected-resource metadata and the issuer's, registers
// itself, authorizes with PKCE (the test plays the user), gets a JWT for bermd's resource and
// lists what it may call. The user granted no tool, so a call is refused with a 403 step-up;
// the SDK asks for the scope the challenge names, and the call goes through with the new
// token.
//
// Run: node --test tests/e2e/oauth.test.mjs (scripts/test-service does).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, existsSync } from "node:fs";
import { tmpdir, homedir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { freePort } from "./free-port.mjs";
import { startIssuer, authorize } from "./oauth-issuer.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = process.env.BERM_BIN_DIR ?? join(ROOT, "target/debug");
const APPS = process.env.BERM_APPS_DIR ?? join(ROOT, "target/apps");
const NPM = process.env.BERM_NPM_DIR ?? join(homedir(), ".cache/berm/npm22");
const SDK = join(NPM, "node_modules/@modelcontextprotocol/sdk/dist/esm");
const sdk = (path) => import(pathToFileURL(join(SDK, path)).href);

const dir = mkdtempSync(join(tmpdir(), "berm-oauth-"));
let issuer;
let bermd;
let mcpUrl;

before(async () => {
  const [port, issuerPort] = [await freePort(), await freePort()];
  mcpUrl = `http://127.0.0.1:${port}/mcp`;
  issuer = await startIssuer({ port: issuerPort, resources: [mcpUrl] });
  const home = join(dir, "home");
  bermd = spawn(
    join(BIN, "bermd"),
    ["--http", `127.0.0.1:${port}`, "--oauth-issuer", issuer.url, "--app", join(APPS, "echo"), "--app", join(APPS, "notes")],
    { env: { ...process.env, BERM_HOME: home, BERM_LOG: "warn,rmcp=error" }, stdio: ["ignore", "ignore", "inherit"] },
  );
  for (let i = 0; i < 600 && !existsSync(join(home, "mcp.sock")); i++) {
    await new Promise((ok) => setTimeout(ok, 50));
  }
});

after(async () => {
  bermd?.kill("SIGTERM");
  await issuer?.close();
});

/** The SDK's OAuthClientProvider, held in memory: a client that has never met bermd. */
class MemoryProvider {
  constructor(redirectUrl) {
    this.redirectUrl = redirectUrl;
    this.authorizationUrl = null;
  }
  get clientMetadata() {
    return {
      client_name: "berm e2e",
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() { return this.info; }
  saveClientInformation(info) { this.info = info; }
  tokens() { return this.saved; }
  saveTokens(tokens) { this.saved = tokens; }
  redirectToAuthorization(url) { this.authorizationUrl = url; }
  saveCodeVerifier(verifier) { this.verifier = verifier; }
  codeVerifier() { return this.verifier; }
}

test("the SDK's OAuth client goes from nothing to a call, stepping up for the scope it lacks", async () => {
  const { Client } = await sdk("client/index.js");
  const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
  const { UnauthorizedError } = await sdk("client/auth.js");
  const redirect = "http://127.0.0.1:1/callback";
  const provider = new MemoryProvider(redirect);

  // No token: the SDK discovers, registers and sends the user to authorize.
  const first = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider });
  await assert.rejects(new Client({ name: "berm-e2e", version: "0" }).connect(first), UnauthorizedError);
  assert.ok(provider.info?.client_id, "the SDK registered no client");
  const asked = new URL(provider.authorizationUrl);
  assert.equal(asked.searchParams.get("resource"), mcpUrl);
  assert.equal(asked.searchParams.get("code_challenge_method"), "S256");
  assert.equal(asked.searchParams.get("scope"), "berm:read berm:call");
  // The user grants less than asked: reading, and no tool.
  issuer.state.grantOnly = ["berm:read"];
  await first.finishAuth(await authorize(provider.authorizationUrl, redirect));
  const claims = (token) => JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString());
  assert.equal(claims(provider.saved.access_token).aud, mcpUrl);
  assert.equal(claims(provider.saved.access_token).iss, issuer.url);
  assert.equal(claims(provider.saved.access_token).scope, "berm:read");

  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider: provider });
  const client = new Client({ name: "berm-e2e", version: "0" });
  await client.connect(transport);
  assert.deepEqual((await client.listTools()).tools, []);

  // A tool the token does not reach: 403 insufficient_scope, and the SDK asks for the scope
  // the challenge names, keeping what it had.
  provider.authorizationUrl = null;
  issuer.state.grantOnly = null;
  await assert.rejects(client.callTool({ name: "echo_echo", arguments: { message: "over oauth" } }), UnauthorizedError);
  const stepUp = new URL(provider.authorizationUrl);
  assert.equal(stepUp.searchParams.get("scope"), "berm:call:echo_echo berm:read");
  assert.equal(stepUp.searchParams.get("resource"), mcpUrl);
  await transport.finishAuth(await authorize(provider.authorizationUrl, redirect));
  assert.deepEqual(claims(provider.saved.access_token).scope.split(" ").sort(), ["berm:call:echo_echo", "berm:read"]);
  const echoed = await client.callTool({ name: "echo_echo", arguments: { message: "over oauth" } });
  assert.equal(echoed.content[0].text, "over oauth");
  // The list shows what the new token may call: that one tool.
  assert.deepEqual((await client.listTools()).tools.map((t) => t.name), ["echo_echo"]);
  await client.close();
});

test("a token that is not one of the issuer's is refused with the challenge", async () => {
  const response = await fetch(mcpUrl, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: "Bearer not-a-jwt" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }),
  });
  assert.equal(response.status, 401);
  const challenge = response.headers.get("www-authenticate");
  assert.match(challenge, /error="invalid_token"/);
  assert.match(challenge, new RegExp(`resource_metadata="http://127\\.0\\.0\\.1:\\d+/\\.well-known/oauth-protected-resource/mcp"`));
});
