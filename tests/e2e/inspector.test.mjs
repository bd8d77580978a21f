// The MCP Inspector CLI (`@modelcontextprotocol/inspector --cli`, npm)
// against bermd, over `berm mcp` (stdio) and Streamable HTTP. The Inspector
// CLI makes one request per run and cannot wait for a notification, so
// list_changed is checked with the TypeScript SDK client the Inspector itself
// is built on (its `@modelcontextprotocol/sdk` dependency).
//
// Run: node --test tests/e2e/inspector.test.mjs (scripts/test-service does).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, existsSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir, homedir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = process.env.BERM_BIN_DIR ?? join(ROOT, "target/debug");
const WASM = process.env.BERM_WASM_DIR ?? join(ROOT, "target/wasm32-unknown-unknown/release");
const NPM = process.env.BERM_NPM_DIR ?? join(homedir(), ".cache/berm/npm");
const INSPECTOR = join(NPM, "node_modules/.bin/mcp-inspector");
const SDK = join(NPM, "node_modules/@modelcontextprotocol/sdk/dist/esm");

const home = join(mkdtempSync(join(tmpdir(), "berm-inspector-")), "home");
const env = { ...process.env, BERM_HOME: home };
let port;
let bermd;

function freePort() {
  return new Promise((ok) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

function berm(...args) {
  const run = spawnSync(join(BIN, "berm"), args, { env, encoding: "utf8" });
  assert.equal(run.status, 0, `berm ${args.join(" ")}: ${run.stderr}`);
  return run.stdout;
}

const targets = () => ({
  stdio: [join(BIN, "berm"), "mcp", "-e", `BERM_HOME=${home}`],
  http: [`http://127.0.0.1:${port}/mcp`, "--transport", "http"],
});

function inspector(target, ...args) {
  const run = spawnSync(INSPECTOR, ["--cli", ...targets()[target], ...args], { env, encoding: "utf8", timeout: 60_000 });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

before(async () => {
  const version = JSON.parse(readFileSync(join(NPM, "node_modules/@modelcontextprotocol/inspector/package.json"), "utf8")).version;
  assert.equal(version, "0.15.0");
  port = await freePort();
  bermd = spawn(join(BIN, "bermd"), ["--http", `127.0.0.1:${port}`], { env: { ...env, BERM_LOG: "warn,rmcp=error" }, stdio: ["ignore", "ignore", "inherit"] });
  for (let i = 0; i < 600 && !existsSync(join(home, "control.sock")); i++) {
    await new Promise((ok) => setTimeout(ok, 50));
  }
  berm("deploy", "echo", join(WASM, "echo.wasm"));
});

after(() => {
  bermd.kill("SIGTERM");
});

for (const target of ["stdio", "http"]) {
  test(`inspector ${target}: tools/list shows names and schemas`, () => {
    const run = inspector(target, "--method", "tools/list");
    assert.equal(run.status, 0, run.stderr);
    const tools = Object.fromEntries(JSON.parse(run.stdout).tools.map((t) => [t.name, t]));
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
    const run = inspector(target, "--method", "tools/call", "--tool-name", "echo_fail", "--tool-arg", "message=on purpose");
    assert.equal(run.status, 0, run.stderr);
    const result = JSON.parse(run.stdout);
    assert.equal(result.isError, true);
    assert.equal(result.content[0].text, "on purpose");
  });

  test(`inspector ${target}: an invalid argument is invalid_params naming the field`, () => {
    // The Inspector coerces values to the schema's types, so the bad
    // argument is one the schema does not allow at all.
    const run = inspector(target, "--method", "tools/call", "--tool-name", "echo_echo", "--tool-arg", "message=hi", "shout=true");
    assert.equal(run.status, 1, run.stdout);
    assert.match(run.stderr + run.stdout, /-32602/);
    assert.match(run.stderr + run.stdout, /invalid arguments for `echo_echo`: .*'shout' was unexpected/);
  });

  test(`inspector's SDK ${target}: tools/list_changed after a deploy`, async () => {
    const { Client } = await import(join(SDK, "client/index.js"));
    const { ToolListChangedNotificationSchema } = await import(join(SDK, "types.js"));
    let transport;
    if (target === "stdio") {
      const { StdioClientTransport } = await import(join(SDK, "client/stdio.js"));
      transport = new StdioClientTransport({ command: join(BIN, "berm"), args: ["mcp"], env });
    } else {
      const { StreamableHTTPClientTransport } = await import(join(SDK, "client/streamableHttp.js"));
      transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`));
    }
    const client = new Client({ name: "berm-e2e", version: "1.0.0" });
    let changed;
    const heard = new Promise((ok) => (changed = ok));
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => changed());
    await client.connect(transport);
    const name = `inspector${target}`;
    assert.ok(!(await client.listTools()).tools.some((t) => t.name === `${name}.echo`));
    if (target === "http") {
      // The standalone GET stream carries server-initiated notifications;
      // give the SDK a moment to open it.
      await new Promise((ok) => setTimeout(ok, 500));
    }
    berm("deploy", name, join(WASM, "echo.wasm"));
    await Promise.race([heard, new Promise((_, no) => setTimeout(() => no(new Error("no list_changed in 20 s")), 20_000))]);
    assert.ok((await client.listTools()).tools.some((t) => t.name === `${name}.echo`));
    await client.close();
  });
}
