// The MCP Inspector CLI (`@modelcontextprotocol/inspector --cli`, npm, 2.x) against programs
// built as WebAssembly components: notes-ts (TypeScript, sdk/ts) and fetch-py (Python,
// sdk/python), from the app folders scripts/build-apps.sh assembles, over `berm mcp` (stdio)
// and Streamable HTTP. One bermd; each component is compiled once, at deploy.
//
// Run: node --test tests/e2e/components.test.mjs (scripts/test-service does).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, existsSync } from "node:fs";
import { tmpdir, homedir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./free-port.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = process.env.BERM_BIN_DIR ?? join(ROOT, "target/debug");
const APPS = process.env.BERM_APPS_DIR ?? join(ROOT, "target/apps");
const NPM = process.env.BERM_NPM_DIR ?? join(homedir(), ".cache/berm/npm22");
const INSPECTOR = join(NPM, "node_modules/.bin/mcp-inspector");

const home = join(mkdtempSync(join(tmpdir(), "berm-components-")), "home");
const env = { ...process.env, BERM_HOME: home, MCP_CATALOG_PATH: join(dirname(home), "inspector-catalog.json") };
let http;
let bermd;

function berm(...args) {
  const run = spawnSync(join(BIN, "berm"), args, { env, encoding: "utf8" });
  assert.equal(run.status, 0, `berm ${args.join(" ")}: ${run.stderr}`);
  return run.stdout;
}

function inspector(target, ...args) {
  const targets = {
    stdio: [join(BIN, "berm"), "mcp", "-e", `BERM_HOME=${home}`],
    http: [http.url, "--transport", "http", "--header", `Authorization: ${http.headers.Authorization}`],
  };
  const run = spawnSync(INSPECTOR, ["--cli", ...targets[target], ...args], { env, encoding: "utf8", timeout: 120_000 });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

const call = (target, tool, ...args) => inspector(target, "--method", "tools/call", "--tool-name", tool, ...(args.length ? ["--tool-arg", ...args] : []));

before(async () => {
  const port = await freePort();
  bermd = spawn(join(BIN, "bermd"), ["--http", `127.0.0.1:${port}`], { env: { ...env, BERM_LOG: "warn,rmcp=error" }, stdio: ["ignore", "ignore", "inherit"] });
  for (let i = 0; i < 600 && !existsSync(join(home, "http.json")); i++) {
    await new Promise((ok) => setTimeout(ok, 50));
  }
  http = JSON.parse(berm("http", "--json"));
  berm("deploy", "--app", join(APPS, "notes-ts"));
  // No net= grant: every host is refused. `random`: CPython reseeds itself at every call.
  berm("deploy", "fetch-py", join(APPS, "fetch-py/fetch-py.wasm"), "--grant", "random");
});

after(() => {
  bermd.kill("SIGTERM");
});

for (const target of ["stdio", "http"]) {
  test(`inspector ${target}: the TypeScript and Python tools are listed with portable schemas`, () => {
    const run = inspector(target, "--method", "tools/list", "--strict");
    assert.equal(run.status, 0, run.stderr);
    const tools = Object.fromEntries(JSON.parse(run.stdout).tools.map((t) => [t.name, t]));
    assert.deepEqual(tools["notes-ts_add"].inputSchema.required.sort(), ["text", "title"]);
    assert.equal(tools["notes-ts_search"].annotations.readOnlyHint, true);
    assert.equal(tools["fetch-py_get"].inputSchema.properties.url.type, "string");
    assert.deepEqual(tools["fetch-py_get"].outputSchema.required, ["status", "body"]);
  });

  test(`inspector ${target}: notes-ts adds and finds a note`, () => {
    const added = call(target, "notes-ts_add", `title=inspector ${target}`, "text=from the Inspector");
    assert.equal(added.status, 0, added.stderr);
    const note = JSON.parse(JSON.parse(added.stdout).content[0].text);
    const found = call(target, "notes-ts_search", "query=the inspector");
    assert.equal(found.status, 0, found.stderr);
    const ids = JSON.parse(JSON.parse(found.stdout).content[0].text).map((n) => n.id);
    assert.ok(ids.includes(note.id), found.stdout);
  });

  test(`inspector ${target}: a module-level counter reads 1 on every call, in TypeScript and Python`, () => {
    for (const tool of ["notes-ts_calls", "fetch-py_calls"]) {
      for (let i = 0; i < 2; i++) {
        const run = call(target, tool);
        assert.equal(run.status, 0, run.stderr);
        assert.deepEqual(JSON.parse(JSON.parse(run.stdout).content[0].text), { calls: 1 }, tool);
      }
    }
  });

  test(`inspector ${target}: fetch-py is denied a host it holds no net= grant for`, () => {
    // The Inspector exits 5 on a result with isError.
    const run = call(target, "fetch-py_get", "url=http://127.0.0.1:9/");
    assert.equal(run.status, 5, run.stderr);
    const result = JSON.parse(run.stdout);
    assert.equal(result.isError, true);
    // Deployed without any net= grant, the http import itself is not linked: the call
    // stops where it reaches for it, and the message names the grant that would allow it.
    assert.match(result.content[0].text, /is not granted to `fetch-py` \(grant `net=HOST\[:PORT\]` to allow it\)/);
  });
}
