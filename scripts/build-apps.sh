#!/usr/bin/env bash
# Builds every program under apps/ for wasm32-unknown-unknown. Each lands at
# target/wasm32-unknown-unknown/release/<app>.wasm in the repository root.
# Then assembles the ready-made app folders of examples/apps/<name>/ at
# target/apps/<name>/ (berm.toml + <name>.wasm), for `bermd --app` and
# `berm deploy --app`, and likewise the folders of test programs that are no
# example (apps/<name>/berm.toml, such as impostor). The programs that are WebAssembly
# components (TypeScript, Python, and the Rust ones of apps/components for wasm32-wasip2)
# come from scripts/build-components.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown
cargo build --quiet --locked --release --target wasm32-unknown-unknown \
  --manifest-path "$root/apps/Cargo.toml" --target-dir "$root/target"
ls "$root"/target/wasm32-unknown-unknown/release/*.wasm >/dev/null
"$root/scripts/build-components.sh"

for folder in "$root"/examples/apps/*/ "$root"/apps/*/; do
  [ -f "$folder/berm.toml" ] || continue
  name=$(basename "$folder")
  out="$root/target/apps/$name"
  rm -rf "$out"
  mkdir -p "$out"
  cp "$folder/berm.toml" "$out/berm.toml"
  wasm=$root/target/wasm32-unknown-unknown/release/$name.wasm
  [ -f "$root/target/components/$name.wasm" ] && wasm=$root/target/components/$name.wasm
  cp "$wasm" "$out/$name.wasm"
done
