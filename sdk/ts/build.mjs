#!/usr/bin/env node
// berm-build: a TypeScript/JavaScript berm program -> one WebAssembly component.
//
//   node sdk/ts/build.mjs ENTRY.ts -o OUT.wasm [--wasi stdio,clocks,random,http]
//
// 1. esbuild bundles ENTRY with the SDK and its npm dependencies (zod) into one ES module;
// 2. the bundle runs once in Node, with the berm imports stubbed, to read the tools it
//    registers: that is berm's manifest (the code is the only source of it);
// 3. componentize-js builds the component against a world holding `berm:program/tools` and
//    only the berm interfaces the bundle imports, with only the WASI features asked for
//    (default: stdio, whose lines go to the program's log);
// 4. the manifest is appended as the `berm.manifest` custom section (docs/components.md).
// Builds are cached under $BERM_CACHE/components/builds by the content of what feeds them.
// The toolchain comes from scripts/setup-components (or $BERM_TS_NODE_MODULES).
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const sdk = path.dirname(fileURLToPath(import.meta.url));
const checkout = path.resolve(sdk, "../..");
const FEATURES = ["stdio", "random", "clocks", "http"];

function usage(message) {
  if (message) console.error(`berm-build: ${message}`);
  console.error("usage: node build.mjs ENTRY.(ts|js) -o OUT.wasm [--wasi stdio,clocks,random,http]");
  process.exit(2);
}

function parseArgs(argv) {
  const args = { entry: undefined, out: undefined, wasi: ["stdio"] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "-o" || a === "--out") args.out = argv[++i];
    else if (a === "--wasi") args.wasi = (argv[++i] ?? "").split(",").filter(Boolean);
    else if (a.startsWith("-")) usage(`unknown option ${a}`);
    else if (args.entry === undefined) args.entry = a;
    else usage(`one entry only (got ${args.entry} and ${a})`);
  }
  if (!args.entry || !args.out) usage();
  for (const f of args.wasi) if (!FEATURES.includes(f)) usage(`--wasi takes ${FEATURES.join(", ")}, not ${f}`);
  return args;
}

function toolchain() {
  if (process.env.BERM_TS_NODE_MODULES) return process.env.BERM_TS_NODE_MODULES;
  const setup = path.join(checkout, "scripts/setup-components");
  if (fs.existsSync(setup)) {
    const r = spawnSync(setup, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
    if (r.status !== 0) throw new Error(`${setup} failed`);
    const line = r.stdout.split("\n").find((l) => l.startsWith("BERM_TS_NODE_MODULES="));
    if (line) return line.slice("BERM_TS_NODE_MODULES=".length).replace(/^'|'$/g, "");
  }
  return path.join(sdk, "node_modules");
}

function cacheDir() {
  const base = process.env.BERM_CACHE ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"), "berm");
  return path.join(base, "components", "builds");
}

/** The `berm.manifest` custom section: id 0, size, name, JSON (docs/components.md). */
function customSection(name, data) {
  const leb = (n) => {
    const out = [];
    do {
      let byte = n & 0x7f;
      n >>>= 7;
      if (n !== 0) byte |= 0x80;
      out.push(byte);
    } while (n !== 0);
    return Buffer.from(out);
  };
  const nameBytes = Buffer.from(name, "utf8");
  const body = Buffer.concat([leb(nameBytes.length), nameBytes, data]);
  return Buffer.concat([Buffer.from([0]), leb(body.length), body]);
}

const args = parseArgs(process.argv.slice(2));
const entry = path.resolve(args.entry);
const nodeModules = toolchain();
const esbuild = await import(pathToFileURL(path.join(nodeModules, "esbuild/lib/main.js")).href);
const witDir = process.env.BERM_WIT_DIR ?? path.join(checkout, "wit");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "berm-build-"));
try {
  const common = {
    bundle: true,
    format: "esm",
    target: "es2022",
    write: false,
    logLevel: "warning",
    alias: { "@berm/sdk": path.join(sdk, "src") },
    nodePaths: [nodeModules],
    absWorkingDir: path.dirname(entry),
  };
  const entryCode = (exportLine) => ({
    contents: `import ${JSON.stringify(entry)};\n${exportLine}\n`,
    resolveDir: path.dirname(entry),
    loader: "ts",
  });

  // 2. The manifest, from the code: the bundle run in Node with the host imports stubbed.
  const stub = {
    name: "berm-host-stub",
    setup(build) {
      build.onResolve({ filter: /^(berm|wasi):/ }, (a) => ({ path: a.path, namespace: "berm-stub" }));
      build.onLoad({ filter: /.*/, namespace: "berm-stub" }, (a) => ({
        contents: `const refuse = () => { throw new Error(${JSON.stringify("the build ran a host call of ")} + ${JSON.stringify(a.path)} + " at module level: host calls run only in a tool"); };\nexport const get = refuse, put = refuse, list = refuse, write = refuse, fetch = refuse;\nconst del = refuse; export { del as delete };`,
        loader: "js",
      }));
    },
  };
  const probe = await esbuild.build({
    ...common,
    platform: "node",
    stdin: entryCode(`export { theProgram } from ${JSON.stringify(path.join(sdk, "src/index.ts"))};`),
    plugins: [stub],
  });
  const probeFile = path.join(work, "probe.mjs");
  fs.writeFileSync(probeFile, probe.outputFiles[0].contents);
  const { theProgram } = await import(pathToFileURL(probeFile).href);
  const manifest = Buffer.from(JSON.stringify(theProgram().manifest()));

  // 1. The component's source: one ES module; the berm imports stay imports.
  const bundled = await esbuild.build({
    ...common,
    platform: "neutral",
    mainFields: ["module", "main"],
    // Less source for the engine to hold: the snapshot keeps it (about 0.7 MB of 18 with zod).
    minify: true,
    metafile: true,
    external: ["berm:*", "wasi:*"],
    stdin: entryCode(`export { tools } from ${JSON.stringify(path.join(sdk, "src/export.ts"))};`),
  });
  const source = bundled.outputFiles[0].contents;
  const imports = new Set();
  for (const output of Object.values(bundled.metafile.outputs)) {
    for (const i of output.imports) if (i.external && i.path.startsWith("berm:program/")) imports.add(i.path);
  }

  // 3. The world: the tools export and what the code imports.
  const world = [
    "package berm-build:app;",
    "world app {",
    "  include berm:program/tool@1.0.0;",
    ...[...imports].sort().map((i) => `  import ${i};`),
    "}",
    "",
  ].join("\n");
  const programWit = fs.readFileSync(path.join(witDir, "program.wit"));
  const componentizeVersion = JSON.parse(
    fs.readFileSync(path.join(nodeModules, "@bytecodealliance/componentize-js/package.json"), "utf8"),
  ).version;
  const key = createHash("sha256")
    .update(JSON.stringify([componentizeVersion, args.wasi.sort(), world]))
    .update(programWit)
    .update(source)
    .update(manifest)
    .digest("hex");
  const cached = path.join(cacheDir(), `ts-${key}.wasm`);
  if (!fs.existsSync(cached)) {
    fs.mkdirSync(path.join(work, "wit/deps/berm"), { recursive: true });
    fs.writeFileSync(path.join(work, "wit/deps/berm/program.wit"), programWit);
    fs.writeFileSync(path.join(work, "wit/app.wit"), world);
    const sourcePath = path.join(work, "program.js");
    fs.writeFileSync(sourcePath, source);
    const { componentize } = await import(
      pathToFileURL(path.join(nodeModules, "@bytecodealliance/componentize-js/src/componentize.js")).href
    );
    const { component } = await componentize({
      sourcePath,
      witPath: path.join(work, "wit"),
      worldName: "app",
      disableFeatures: FEATURES.filter((f) => !args.wasi.includes(f)),
    });
    fs.mkdirSync(cacheDir(), { recursive: true });
    const tmp = `${cached}.${process.pid}`;
    fs.writeFileSync(tmp, Buffer.concat([Buffer.from(component), customSection("berm.manifest", manifest)]));
    fs.renameSync(tmp, cached);
  }
  fs.mkdirSync(path.dirname(path.resolve(args.out)), { recursive: true });
  fs.copyFileSync(cached, args.out);
  const tools = JSON.parse(manifest).tools.map((t) => t.name);
  console.error(
    `berm-build: ${args.out} (${fs.statSync(args.out).size} bytes; tools: ${tools.join(", ")}; imports: ${[...imports].join(", ") || "none"}; wasi: ${args.wasi.join(",") || "none"})`,
  );
} finally {
  fs.rmSync(work, { recursive: true, force: true });
}
