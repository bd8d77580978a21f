#!/usr/bin/env bash
# The README's quickstart, run as written: the block between `<!-- quickstart:begin -->` and
# `<!-- quickstart:end -->` runs verbatim with bash in a fresh temporary HOME, with the real
# Claude Code CLI (npm @anthropic-ai/claude-code) on PATH. Then it checks what a user would:
# the three binaries installed and runnable, bermd's unit written, bermd serving, and
# `claude mcp list` connecting to berm through `berm mcp` (its health check is a real MCP
# initialize). So the README cannot rot.
#
#   tests/e2e/quickstart.sh setup   install Claude Code (idempotently, under ~/.cache/berm)
#   tests/e2e/quickstart.sh         run the block and the checks
#
# BERM_INSTALL_PROFILE=dev makes scripts/install copy the debug build the test suite already
# made instead of building a release; everything else is as a user runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${BERM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berm}
CLAUDE_CODE_VERSION=2.1.332
claude_dir=$cache/claude-code
node_bin=$("$root/scripts/setup-node")

if [ "${1:-}" = setup ]; then
  installed=$(PATH="$node_bin:$PATH" node -p "require('$claude_dir/node_modules/@anthropic-ai/claude-code/package.json').version" 2>/dev/null || true)
  if [ "$installed" != "$CLAUDE_CODE_VERSION" ]; then
    echo "quickstart: installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into $claude_dir" >&2
    mkdir -p "$claude_dir"
    PATH="$node_bin:$PATH" npm install --silent --no-audit --no-fund --prefix "$claude_dir" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION"
  fi
  exit 0
fi
[ -z "${1:-}" ] || { echo "usage: $0 [setup]" >&2; exit 2; }
[ -x "$claude_dir/node_modules/.bin/claude" ] || { echo "quickstart: Claude Code is missing: run $0 setup" >&2; exit 2; }

block=$(awk '/^<!-- quickstart:begin -->$/ {on = 1; next} /^<!-- quickstart:end -->$/ {on = 0} on' "$root/README.md" | sed '1{/^```/d}; ${/^```$/d}')
[ -n "$block" ] || { echo "quickstart: README.md has no quickstart block" >&2; exit 1; }

work=$(mktemp -d)
cleanup() {
  [ -x "$work/home/.local/bin/berm" ] && HOME=$work/home "$work/home/.local/bin/berm" vm stop notes >/dev/null 2>&1 || true
  pkill -TERM -f "^$work/home/.local/bin/bermd" 2>/dev/null || true
  sleep 0.2
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
check() { printf 'ok - %s\n' "$1"; passed=$((passed + 1)); }
fail() { printf 'not ok - %s\n' "$1" >&2; printf 'quickstart: %s passed, 1 failed\n' "$passed"; exit 1; }

# A new user's HOME; the toolchain stays where it is installed.
mkdir -p "$work/home"
env -i HOME="$work/home" PATH="$node_bin:$claude_dir/node_modules/.bin:$PATH" TERM=dumb LANG=C.UTF-8 \
  CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
  BERM_CACHE="$cache" BERM_INSTALL_PROFILE=dev CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" \
  DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
  bash -euo pipefail -c "cd '$root'; $block" >"$work/out.log" 2>&1 || { cat "$work/out.log" >&2; fail "the README's quickstart block runs"; }
cat "$work/out.log"
check "the README's quickstart block runs as written"

for binary in berm bermd berm-vmm; do
  "$work/home/.local/bin/$binary" --version >/dev/null || fail "$binary is installed and runs"
done
check "berm, bermd and berm-vmm are installed in ~/.local/bin and run"
unit=$work/home/.config/systemd/user/bermd.service
grep -qx "ExecStart=$work/home/.local/bin/bermd" "$unit" || fail "bermd's unit names the installed bermd"
check "bermd's systemd user unit is written, naming the installed binary"
HOME=$work/home "$work/home/.local/bin/berm" ls | grep -q '^notes ' || fail "bermd serves the deployed program"
HOME=$work/home "$work/home/.local/bin/berm" ls | grep -q '^notes-ts ' || fail "bermd serves the TypeScript program"
grep -q '"title":"hello"' "$work/out.log" || fail "the TypeScript program answered its call"
check "bermd runs and serves what the block deployed, the TypeScript component too"

listed=$(cd "$work" && env -i HOME="$work/home" PATH="$work/home/.local/bin:$node_bin:$claude_dir/node_modules/.bin:/usr/bin:/bin" \
  DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 120 claude mcp list 2>&1) || true
echo "$listed"
grep -q '^berm: berm mcp.*Connected' <<<"$listed" || fail "claude mcp list connects to berm through berm mcp"
check "Claude Code $CLAUDE_CODE_VERSION connects to berm through berm mcp (claude mcp list)"

# The README's one-line client form for the VM: `berm mcp --app` boots the app's VM for
# Claude Code's health check (the artifacts from the store the VM tests use).
cp -r "$root/target/apps/notes" "$work/notes"
# vhost-device-vsock (for QEMU) is found under $BERM_CACHE, as scripts/setup-vm leaves it.
vm_env=(env -i HOME="$work/home" PATH="$work/home/.local/bin:$node_bin:$claude_dir/node_modules/.bin:/usr/sbin:/usr/bin:/sbin:/bin"
  BERM_CACHE="$cache" BERM_VM_ARTIFACTS="${BERM_VM_ARTIFACTS:-$cache/vm}" DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1)
(cd "$work" && "${vm_env[@]}" claude mcp add notes -- berm mcp --app "$work/notes") >/dev/null ||
  fail "claude mcp add notes -- berm mcp --app DIR"
listed=$(cd "$work" && "${vm_env[@]}" MCP_TIMEOUT=120000 timeout 300 claude mcp list 2>&1) || true
echo "$listed"
grep -q "^notes: berm mcp --app $work/notes.*Connected" <<<"$listed" ||
  fail "claude mcp list connects to the app's VM through berm mcp --app"
HOME=$work/home "$work/home/.local/bin/berm" vm ls | grep -q '^notes  *ready' ||
  fail "the VM berm mcp --app booted is listed ready"
check "Claude Code connects to the notes app in its own VM through berm mcp --app (claude mcp list)"
printf 'quickstart: %s passed, 0 failed\n' "$passed"
