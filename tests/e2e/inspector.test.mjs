// The MCP Inspector CLI (`@modelcontextprotocol/inspector --cli`, npm, 2.x:
// Node >= 22) against bermd, over `berm mcp` (stdio) and Streamable HTTP.
// The Inspector CLI makes one request per run and cannot wait for a
// notification, so list_changed and program logs are checked with the
// TypeScript client the Inspector itself is built on (its
// `@modelcontextprotocol/client` dependency).
//
// Run: node --test tests/e2e/inspector.test.mjs (scripts/test-service does).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, existsSync, readFileSync } from "node:fs";
import { tmpdir, homedir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./free-port.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = process.env.BERM_BIN_DIR ?? join(ROOT, "target/debug");
const WASM = process.env.BERM_WASM_DIR ?? join(ROOT, "target/wasm32-unknown-unknown/release");
const NPM = process.env.BERM_NPM_DIR ?? join(homedir(), ".cache/berm/npm22");
const INSPECTOR = join(NPM, "node_modules/.bin/mcp-inspector");
const CLIENT = join(NPM, "node_modules/@modelcontextprotocol/client/dist");
const INSPECTOR_VERSION = "2.12.0";
// What Claude Desktop and claude.ai accept (the strictest of the clients).
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

const home = join(mkdtempSync(join(tmpdir(), "berm-inspector-")), "home");
// The Inspector keeps a catalog of servers; keep it out of $HOME.
const env = { ...process.env, BERM_HOME: home, MCP_CATALOG_PATH: join(dirname(home), "inspector-catalog.json") };
let port;
// What `berm http --json` prints: {url, token_file, headers}.
let http;
let bermd;

function berm(...args) {
  const run = spawnSync(join(BIN, "berm"), args, { env, encoding: "utf8" });
  assert.equal(run.status, 0, `berm ${args.join(" ")}: ${run.stderr}`);
  return run.stdout;
}

const targets = () => ({
  stdio: [join(BIN, "berm"), "mcp", "-e", `BERM_HOME=${home}`],
  // bermd's token, as `berm http` prints it: HTTP needs it even on loopback.
  http: [http.url, "--transport", "http", "--header", `Authorization: ${http.headers.Authorization}`],
});

function inspector(target, ...args) {
  const run = spawnSync(INSPECTOR, ["--cli", ...targets()[target], ...args], { env, encoding: "utf8", timeout: 60_000 });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

before(async () => {
  const version = JSON.parse(readFileSync(join(NPM, "node_modules/@modelcontextprotocol/inspector/package.json"), "utf8")).version;
  assert.equal(version, INSPECTOR_VERSION);
  port = await freePort();
  bermd = spawn(join(BIN, "bermd"), ["--http", `127.0.0.1:${port}`], { env: { ...env, BERM_LOG: "warn,rmcp=error" }, stdio: ["ignore", "ignore", "inherit"] });
  // http.json comes after control.sock: once it is there, bermd serves both.
  for (let i = 0; i < 600 && !existsSync(join(home, "http.json")); i++) {
    await new Promise((ok) => setTimeout(ok, 50));
  }
  http = JSON.parse(berm("http", "--json"));
  berm("deploy", "echo", join(WASM, "echo.wasm"));
  berm("deploy", "test", join(WASM, "conformance.wasm"), "--grant", "log");
});

after(() => {
  bermd.kill("SIGTERM");
});

for (const target of ["stdio", "http"]) {
  test(`inspector ${target}: tools/list shows portable names and schemas`, () => {
    // --strict checks every tool's schema for portability across clients
    // and exits 6 on an error (and says nothing when all is well).
    const run = inspector(target, "--method", "tools/list", "--strict");
    assert.equal(run.status, 0, run.stderr);
    assert.doesNotMatch(run.stderr, /Warning|Error/, run.stderr);
    const listed = JSON.parse(run.stdout).tools;
    for (const tool of listed) assert.match(tool.name, TOOL_NAME);
    const tools = Object.fromEntries(listed.map((t) => [t.name, t]));
    assert.ok(tools["echo_echo"] && tools["echo_reverse"] && tools["echo_fail"]);
    assert.equal(tools["echo_echo"].inputSchema.properties.message.type, "string");
    assert.deepEqual(tools["echo_echo"].inputSchema.required, ["message"]);
    assert.equal(tools["echo_echo"].annotations.readOnlyHint, true);
  });

  test(`inspector ${target}: a successful tools/call`, () => {
    const run = inspector(target, "--method", "tools/call", "--tool-name", "echo_reverse", "--tool-arg", "message=berm");
    assert.equal(run.status, 0, run.stderr);
    const result = JSON.parse(run.stdout);
    assert.equal(result.content[0].text, "mreb");
    assert.notEqual(result.isError, true);
  });

  test(`inspector ${target}: a program failure is isError`, () => {
    // The Inspector exits 5 on a result with isError.
    const run = inspector(target, "--method", "tools/call", "--tool-name", "echo_fail", "--tool-arg", "message=on purpose");
    assert.equal(run.status, 5, run.stderr);
    const result = JSON.parse(run.stdout);
    assert.equal(result.isError, true);
    assert.equal(result.content[0].text, "on purpose");
  });

  test(`inspector ${target}: an invalid argument is an isError result naming the field`, () => {
    // The Inspector coerces values to the schema's types, so the bad
    // argument is one the schema does not allow at all. It exits 5 on a
    // result with isError.
    const run = inspector(target, "--method", "tools/call", "--tool-name", "echo_echo", "--tool-arg", "message=hi", "shout=true");
    assert.equal(run.status, 5, run.stderr);
    const result = JSON.parse(run.stdout);
    assert.equal(result.isError, true);
    assert.equal(result.content[0].text, "invalid arguments for `echo_echo`: Additional properties are not allowed ('shout' was unexpected)");
  });

  test(`inspector ${target}: a struct result is structuredContent matching the output schema`, () => {
    const list = JSON.parse(inspector(target, "--method", "tools/list").stdout);
    const stats = list.tools.find((t) => t.name === "test_text_stats");
    assert.deepEqual(stats.outputSchema.required, ["chars", "words", "lines"]);
    const run = inspector(target, "--method", "tools/call", "--tool-name", "test_text_stats", "--tool-arg", "text=hello big world");
    assert.equal(run.status, 0, run.stderr);
    const result = JSON.parse(run.stdout);
    assert.deepEqual(result.structuredContent, { chars: 15, words: 3, lines: 1, longest: "world" });
    assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent);
  });

  test(`inspector ${target}: logging/setLevel is accepted`, () => {
    const run = inspector(target, "--method", "logging/setLevel", "--log-level", "debug");
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout), {});
  });

  test(`inspector's client ${target}: tools/list_changed after a deploy, program logs during a call`, async () => {
    const { Client, StreamableHTTPClientTransport } = await import(join(CLIENT, "index.mjs"));
    let transport;
    if (target === "stdio") {
      const { StdioClientTransport } = await import(join(CLIENT, "stdio.mjs"));
      transport = new StdioClientTransport({ command: join(BIN, "berm"), args: ["mcp"], env });
    } else {
      transport = new StreamableHTTPClientTransport(new URL(http.url), { requestInit: { headers: http.headers } });
    }
    const client = new Client({ name: "berm-e2e", version: "1.0.0" });
    let changed;
    const heard = new Promise((ok) => (changed = ok));
    client.setNotificationHandler("notifications/tools/list_changed", () => changed());
    const logs = [];
    client.setNotificationHandler("notifications/message", (n) => logs.push(n.params));
    await client.connect(transport);
    const name = `inspector${target}`;
    assert.ok(!(await client.listTools()).tools.some((t) => t.name === `${name}_echo`));
    if (target === "http") {
      // The standalone GET stream carries server-initiated notifications;
      // give the client a moment to open it.
      await new Promise((ok) => setTimeout(ok, 500));
    }
    berm("deploy", name, join(WASM, "echo.wasm"));
    await Promise.race([heard, new Promise((_, no) => setTimeout(() => no(new Error("no list_changed in 20 s")), 20_000))]);
    assert.ok((await client.listTools()).tools.some((t) => t.name === `${name}_echo`));

    // A program's log.write lines reach the session that made the call: before its result on
    // stdio, where there is one stream. Over HTTP they ride the session's standalone GET stream
    // (rmcp routes only progress onto the request's own stream), another connection, so they
    // may arrive just after the result: wait for them there.
    await client.setLoggingLevel("info");
    const result = await client.callTool({ name: "test_tool_with_logging", arguments: {} });
    assert.equal(result.content[0].text, "Logged three messages.");
    if (target === "http") {
      const until = Date.now() + 10_000;
      while (logs.length < 3 && Date.now() < until) await new Promise((ok) => setTimeout(ok, 20));
    }
    assert.deepEqual(logs.map((l) => [l.level, l.logger, l.data]), [
      ["info", "test", "Tool execution started"],
      ["info", "test", "Tool processing data"],
      ["info", "test", "Tool execution completed"],
    ]);
    await client.close();
  });
}
