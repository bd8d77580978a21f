// The official MCP conformance suite (`@modelcontextprotocol/conformance`,
// npm, Node >= 22) against bermd's Streamable HTTP endpoint, serving the
// conformance app (examples/apps/conformance: program `test`).
//
// The suite runs whole, as its authors scope it: `--requirements 2025-11-25`
// and `--requirements 2026-07-28` (which also runs the tasks extension's
// scenarios, unscored), and each server scenario outside both sets on its
// own. Every scenario either passes — a check of its own succeeds and none
// fails — or is listed in docs/service.md's conformance table with the
// suite's own words and the reason. The test fails both ways: a failure not
// listed, and a listed scenario that now passes (remove its row).
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
const CONFORMANCE_VERSION = "0.2.0-alpha.12";
const REQUIREMENTS = ["2025-11-25", "2026-07-28"];

const dir = mkdtempSync(join(tmpdir(), "berm-conformance-"));
let url;
let bermd;

before(async () => {
  const version = JSON.parse(readFileSync(join(NPM, "node_modules/@modelcontextprotocol/conformance/package.json"), "utf8")).version;
  assert.equal(version, CONFORMANCE_VERSION);
  const port = await freePort();
  url = `http://127.0.0.1:${port}/mcp`;
  const home = join(dir, "home");
  // --no-auth: the suite's `server` command (0.2.0-alpha.12) takes only --url, with
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

/** Each scenario's outcome in `out`: "passes", "fails" or "not exercised", with the suite's words. */
function outcomes(out) {
  const found = new Map();
  for (const name of readdirSync(out)) {
    const scenario = name.match(/^server-(.*)-\d{4}-\d\d-\d\dT/)?.[1];
    assert.ok(scenario, `unexpected result directory ${name}`);
    const checks = JSON.parse(readFileSync(join(out, name, "checks.json"), "utf8"));
    const failed = checks.filter((c) => c.status === "FAILURE");
    // wire-schema-valid holds for any server that answers; it says nothing of the scenario.
    const passed = checks.filter((c) => c.status === "SUCCESS" && c.id !== "wire-schema-valid");
    const first = failed[0] ?? checks.find((c) => c.status === "SKIPPED") ?? checks[0];
    const words = (first?.errorMessage ?? first?.description ?? "").replace(/\s+/g, " ");
    const outcome = failed.length > 0 ? "fails" : passed.length > 0 ? "passes" : "not exercised";
    found.set(scenario, { outcome, words, checks });
  }
  return found;
}

/** docs/service.md's rows for `group`: scenario -> the suite's words as written there. */
function listed(group) {
  const docs = readFileSync(join(ROOT, "docs/service.md"), "utf8");
  const rows = new Map();
  for (const m of docs.matchAll(/^\| ([a-z0-9-]+) \| `([a-z0-9-]+)` \| [^|]+ \| ((?:[^|]|\\\|)*) \| [^|]+ \|$/gm)) {
    if (m[1] === group) rows.set(m[2], m[3].replace(/\\\|/g, "|"));
  }
  return rows;
}

/** The outcomes must match the table: unlisted failures and listed passes both fail. */
function compare(group, found) {
  const rows = listed(group);
  const problems = [];
  for (const [scenario, { outcome, words, checks }] of found) {
    const row = rows.get(scenario);
    if (outcome === "passes") {
      if (row !== undefined) problems.push(`${scenario} now passes: remove its row from docs/service.md`);
      continue;
    }
    if (row === undefined) {
      problems.push(`${scenario} ${outcome} and is not listed in docs/service.md: ${JSON.stringify(checks, null, 1)}`);
      continue;
    }
    // The row quotes the suite: its first words must still be what the suite says.
    const quoted = row.replace(/…$/, "").slice(0, 40);
    if (!words.startsWith(quoted)) problems.push(`${scenario}: docs/service.md quotes "${quoted}", the suite now says "${words}"`);
  }
  for (const scenario of rows.keys()) {
    if (!found.has(scenario)) problems.push(`${scenario} is listed for ${group} but the suite did not run it`);
  }
  assert.deepEqual(problems, []);
  const passing = [...found.values()].filter((f) => f.outcome === "passes").length;
  console.log(`conformance ${CONFORMANCE_VERSION} ${group}: ${passing} of ${found.size} scenarios pass`);
}

for (const requirements of REQUIREMENTS) {
  test(`conformance --requirements ${requirements}: every scenario passes or is listed`, () => {
    const out = join(dir, requirements);
    const run = spawnSync(CONFORMANCE, ["server", "--url", url, "--requirements", requirements, "-o", out], {
      cwd: dir,
      encoding: "utf8",
      timeout: 900_000,
    });
    // The suite exits 1 when any scenario fails; anything else is the suite itself failing.
    assert.ok(run.status === 0 || run.status === 1, `${run.status}\n${run.stdout}\n${run.stderr}`);
    const found = outcomes(out);
    assert.ok(found.size >= 30, `only ${found.size} scenarios ran:\n${run.stdout}`);
    compare(requirements, found);
  });
}

test("every server scenario outside both requirement sets runs, and passes or is listed", () => {
  const list = spawnSync(CONFORMANCE, ["list", "--server"], { encoding: "utf8" });
  assert.equal(list.status, 0, list.stderr);
  const all = [...list.stdout.matchAll(/^\s+- ([a-z0-9-]+)/gm)].map((m) => m[1]);
  const inSets = new Set();
  for (const requirements of REQUIREMENTS) {
    const run = spawnSync(CONFORMANCE, ["list", "--server", "--requirements", requirements], { encoding: "utf8" });
    assert.equal(run.status, 0, run.stderr);
    for (const m of run.stdout.matchAll(/^\s+- ([a-z0-9-]+)/gm)) inSets.add(m[1]);
  }
  const outside = all.filter((s) => !inSets.has(s));
  const out = join(dir, "outside");
  for (const scenario of outside) {
    const run = spawnSync(CONFORMANCE, ["server", "--url", url, "--scenario", scenario, "-o", out], {
      cwd: dir,
      encoding: "utf8",
      timeout: 120_000,
    });
    assert.ok(run.status === 0 || run.status === 1, `${scenario}: ${run.status}\n${run.stdout}\n${run.stderr}`);
  }
  compare("outside", outside.length ? outcomes(out) : new Map());
});
