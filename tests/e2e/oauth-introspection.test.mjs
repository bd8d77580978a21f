// bermd with opaque access tokens, checked by RFC 7662 introspection at a real authorization
// server: npm's oidc-provider on loopback (tests/e2e/oauth-issuer.mjs), which issues opaque
// tokens for bermd's resource. A machine client gets one by the client-credentials grant;
// bermd (`--oauth-introspection-client-file`) asks the issuer about it and lets the call
// through. A revoked token (RFC 7009) and one the issuer never made are refused with the
// challenge, and run nothing.
//
// Run: node --test tests/e2e/oauth-introspection.test.mjs (scripts/test-service does).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, existsSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./free-port.mjs";
import { startIssuer } from "./oauth-issuer.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = process.env.BERM_BIN_DIR ?? join(ROOT, "target/debug");
const APPS = process.env.BERM_APPS_DIR ?? join(ROOT, "target/apps");

const dir = mkdtempSync(join(tmpdir(), "berm-introspection-"));
const introspector = { client_id: "bermd", client_secret: "bermd-introspection-secret-0123456789" };
const machine = { client_id: "robot", client_secret: "robot-secret-0123456789abcdef" };
let issuer;
let bermd;
let mcpUrl;

before(async () => {
  const [port, issuerPort] = [await freePort(), await freePort()];
  mcpUrl = `http://127.0.0.1:${port}/mcp`;
  issuer = await startIssuer({ port: issuerPort, resources: [mcpUrl], opaqueResources: [mcpUrl], introspector, machine });
  const home = join(dir, "home");
  const credentials = join(dir, "introspection-client");
  writeFileSync(credentials, `${introspector.client_id}:${introspector.client_secret}\n`, { mode: 0o600 });
  bermd = spawn(
    join(BIN, "bermd"),
    ["--http", `127.0.0.1:${port}`, "--oauth-issuer", issuer.url, "--oauth-introspection-client-file", credentials,
      "--receipts", join(dir, "receipts"), "--app", join(APPS, "echo")],
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

const basic = (client) => `Basic ${Buffer.from(`${client.client_id}:${client.client_secret}`).toString("base64")}`;

/** An access token for bermd's resource from the client-credentials grant. */
async function machineToken(scope) {
  const response = await fetch(`${issuer.url}/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic(machine) },
    body: new URLSearchParams({ grant_type: "client_credentials", resource: mcpUrl, scope }),
  });
  const body = await response.json();
  assert.equal(response.status, 200, JSON.stringify(body));
  return body.access_token;
}

/** A stateless tools/call of echo's echo with `token`. */
function call(token, message) {
  return fetch(mcpUrl, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      authorization: `Bearer ${token}`,
      "mcp-protocol-version": "2026-07-28",
      "mcp-method": "tools/call",
      "mcp-name": "echo_echo",
    },
    body: JSON.stringify({
      jsonrpc: "2.0", id: 1, method: "tools/call",
      params: {
        name: "echo_echo", arguments: { message },
        _meta: {
          "io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {},
          "io.modelcontextprotocol/clientInfo": { name: "introspection-e2e", version: "0" },
        },
      },
    }),
  });
}

async function text(response) {
  const body = await response.text();
  const data = body.split("\n").find((l) => l.startsWith("data: {"))?.slice(6) ?? body;
  return JSON.parse(data).result?.content?.[0]?.text;
}

test("an opaque token the issuer vouches for calls; a revoked or unknown one is refused", async () => {
  const token = await machineToken("berm:call");
  assert.ok(!token.includes("."), `the issuer made a JWT, not an opaque token: ${token}`);
  const answered = await call(token, "opaque and introspected");
  assert.equal(answered.status, 200);
  assert.equal(await text(answered), "opaque and introspected");

  // Revoked before bermd ever saw it: the issuer says inactive.
  const revoked = await machineToken("berm:call");
  const revocation = await fetch(`${issuer.url}/token/revocation`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic(machine) },
    body: new URLSearchParams({ token: revoked, token_type_hint: "access_token" }),
  });
  assert.equal(revocation.status, 200);
  // One the issuer never made, shaped like its tokens.
  const unknown = "Zm9yZ2VkLW9wYXF1ZS10b2tlbi1ub2JvZHktbWFkZQ";
  for (const [what, bad] of [["revoked", revoked], ["unknown", unknown]]) {
    const refused = await call(bad, `must not run (${what})`);
    assert.equal(refused.status, 401, what);
    const challenge = refused.headers.get("www-authenticate");
    assert.match(challenge, /error="invalid_token"/, what);
    assert.match(challenge, /not active/, what);
    assert.match(challenge, /resource_metadata="http:\/\/127\.0\.0\.1:\d+\/\.well-known\/oauth-protected-resource\/mcp"/, what);
  }

  // A token without a berm scope is a valid token that may call nothing: a 403 step-up.
  const readOnly = await machineToken("berm:read");
  const stepUp = await call(readOnly, "must not run (read only)");
  assert.equal(stepUp.status, 403);
  assert.match(stepUp.headers.get("www-authenticate"), /error="insufficient_scope"/);
});
