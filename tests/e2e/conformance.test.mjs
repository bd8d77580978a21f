// The official MCP conformance suite (`@modelcontextprotocol/conformance`,
// npm, Node >= 22) against bermd's Streamable HTTP endpoint, serving the
// conformance app (examples/apps/conformance: program `test`, whose tools are
// served as test_simple_text, test_error_handling, test_tool_with_logging).
//
// Every server scenario the suite knows is either run here and must pass, or
// listed in docs/service.md as not applying to bermd, with the reason; a
// scenario a newer suite adds fails the last test until it is sorted.
//
// Run: node --test tests/e2e/conformance.test.mjs (scripts/test-service does).

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, existsSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir, homedir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./free-port.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const BIN = process.env.BERM_BIN_DIR ?? join(ROOT, "target/debug");
const APPS = process.env.BERM_APPS_DIR ?? join(ROOT, "target/apps");
const NPM = process.env.BERM_NPM_DIR ?? join(homedir(), ".cache/berm/npm22");
const CONFORMANCE = join(NPM, "node_modules/.bin/conformance");
const CONFORMANCE_VERSION = "0.1.16";

// The server scenarios that apply to bermd: each must pass.
const APPLICABLE = [
  "server-initialize",
  "ping",
  "logging-set-level",
  "tools-list",
  "tools-call-simple-text",
  "tools-call-error",
  "tools-call-with-logging",
  "server-sse-multiple-streams",
  "server-sse-polling",
  "dns-rebinding-protection",
];

const dir = mkdtempSync(join(tmpdir(), "berm-conformance-"));
let url;
let bermd;

before(async () => {
  const version = JSON.parse(readFileSync(join(NPM, "node_modules/@modelcontextprotocol/conformance/package.json"), "utf8")).version;
  assert.equal(version, CONFORMANCE_VERSION);
  const port = await freePort();
  url = `http://127.0.0.1:${port}/mcp`;
  const home = join(dir, "home");
  // --no-auth: the suite's `server` command (0.1.16) takes only --url, with
  // no way to send a header, and its auth scenarios speak OAuth, not a
  // static bearer token. bermd's token itself is tested in
  // service/tests/http.rs, and with real clients in inspector.test.mjs and
  // test_python_client.py.
  bermd = spawn(join(BIN, "bermd"), ["--http", `127.0.0.1:${port}`, "--no-auth", "--app", join(APPS, "conformance")], {
    env: { ...process.env, BERM_HOME: home, BERM_LOG: "warn,rmcp=error" },
    stdio: ["ignore", "ignore", "inherit"],
  });
  for (let i = 0; i < 600 && !existsSync(join(home, "mcp.sock")); i++) {
    await new Promise((ok) => setTimeout(ok, 50));
  }
});

after(() => {
  bermd.kill("SIGTERM");
});

for (const scenario of APPLICABLE) {
  test(`conformance ${scenario}`, () => {
    const out = join(dir, scenario);
    const run = spawnSync(CONFORMANCE, ["server", "--url", url, "--scenario", scenario, "-o", out], {
      cwd: dir,
      encoding: "utf8",
      timeout: 120_000,
    });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    const [result] = readdirSync(out);
    const checks = JSON.parse(readFileSync(join(out, result, "checks.json"), "utf8"));
    const failed = checks.filter((c) => c.status === "FAILURE");
    assert.deepEqual(failed, [], JSON.stringify(checks, null, 1));
    assert.ok(checks.some((c) => c.status === "SUCCESS"), JSON.stringify(checks, null, 1));
  });
}

test("every server scenario of the suite is run or listed as not applying in docs/service.md", () => {
  const run = spawnSync(CONFORMANCE, ["list", "--server"], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  const scenarios = [...run.stdout.matchAll(/^\s+- ([a-z0-9-]+)/gm)].map((m) => m[1]);
  assert.ok(scenarios.length > APPLICABLE.length, run.stdout);
  const docs = readFileSync(join(ROOT, "docs/service.md"), "utf8");
  const listed = new Set([...docs.matchAll(/^\| `([a-z0-9-]+)` \| does not apply/gm)].map((m) => m[1]));
  const unsorted = scenarios.filter((s) => !APPLICABLE.includes(s) && !listed.has(s));
  assert.deepEqual(unsorted, [], "scenarios neither run nor explained in docs/service.md");
});
