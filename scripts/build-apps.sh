#!/usr/bin/env bash
# Builds every program under apps/ for wasm32-unknown-unknown. Each lands at
# target/wasm32-unknown-unknown/release/<app>.wasm in the repository root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown \
  || rustup target add wasm32-unknown-unknown
cargo build --quiet --locked --release --target wasm32-unknown-unknown \
  --manifest-path "$root/apps/Cargo.toml" --target-dir "$root/target"
ls "$root"/target/wasm32-unknown-unknown/release/*.wasm >/dev/null
