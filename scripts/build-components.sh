#!/usr/bin/env bash
# Builds the programs that are WebAssembly components, once each:
#   - the Rust ones of apps/components (wit-bindgen, wasm32-wasip2), the test components and
#     shapes (Wassette-style plain WIT exports, no berm manifest), at
#     target/wasm32-wasip2/release/<name>.wasm;
#   - the examples, at target/components/<name>.wasm (scripts/build-apps.sh puts them into
#     their app folders): notes-ts in TypeScript (apps/notes-ts, sdk/ts: componentize-js),
#     fetch-py in Python (apps/fetch-py, sdk/python: componentize-py), and shapes;
#   - web-ts, a test program for sdk/ts's http module, at target/components/web-ts.wasm.
# The JS and Python builds take 10-25 s each: the SDKs' build scripts cache them under
# $BERM_CACHE/components/builds by the content of what feeds them, so a second run (or a
# second caller in one test run) copies them. The toolchains come from scripts/setup-components.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
eval "$("$root/scripts/setup-components")"
export BERM_TS_NODE_MODULES BERM_PY_VENV
node=$("$root/scripts/setup-node")/node
out=$root/target/components
mkdir -p "$out"
"$node" "$root/sdk/ts/build.mjs" "$root/apps/notes-ts/notes.ts" -o "$out/notes-ts.wasm"
python3 "$root/sdk/python/build.py" "$root/apps/fetch-py/fetch_py.py" -o "$out/fetch-py.wasm"
# A test program: @berm/sdk/http from TypeScript (tests/e2e/test_components.py).
"$node" "$root/sdk/ts/build.mjs" "$root/apps/web-ts/web.ts" -o "$out/web-ts.wasm"
cargo build --quiet --locked --release --target wasm32-wasip2 \
  --manifest-path "$root/apps/components/Cargo.toml" --target-dir "$root/target"
cp "$root/target/wasm32-wasip2/release/shapes.wasm" "$out/shapes.wasm"
