#!/usr/bin/env bash
# Codex CLI and OpenCode against `berm mcp`, each as far as it goes without a model (Claude
# Code's `claude mcp list` is checked by quickstart.sh):
# - Codex: `codex mcp add` writes its config; its app server (`codex app-server`, what its own
#   UIs drive) starts `berm mcp`, lists berm's tools and calls two of them, a write and a
#   read. Only choosing a tool needs a model.
# - OpenCode: `opencode mcp list` starts `berm mcp` from opencode.json and reports it
#   connected. OpenCode offers no way to list an MCP server's tools or call one without a
#   model (its `debug agent --tool` and the server's `/experimental/tool` know only built-in
#   tools), so that is as far as it goes.
#
#   tests/e2e/harnesses.sh setup   install both, pinned, under ~/.cache/berm (idempotently)
#   tests/e2e/harnesses.sh         run the checks against the debug build
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${BERM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berm}
CODEX_VERSION=0.171.0
OPENCODE_VERSION=1.18.33
dir=$cache/harnesses
node_bin=$("$root/scripts/setup-node")

installed() { PATH="$node_bin:$PATH" node -p "require('$dir/node_modules/$1/package.json').version" 2>/dev/null || true; }
if [ "${1:-}" = setup ]; then
  if [ "$(installed @openai/codex)" != "$CODEX_VERSION" ] || [ "$(installed opencode-ai)" != "$OPENCODE_VERSION" ]; then
    echo "harnesses: installing @openai/codex@$CODEX_VERSION and opencode-ai@$OPENCODE_VERSION into $dir" >&2
    mkdir -p "$dir"
    PATH="$node_bin:$PATH" npm install --silent --no-audit --no-fund --prefix "$dir" \
      "@openai/codex@$CODEX_VERSION" "opencode-ai@$OPENCODE_VERSION"
  fi
  exit 0
fi
[ -z "${1:-}" ] || { echo "usage: $0 [setup]" >&2; exit 2; }
for tool in codex opencode; do
  [ -x "$dir/node_modules/.bin/$tool" ] || { echo "harnesses: $tool is missing: run $0 setup" >&2; exit 2; }
done

bin=$root/target/debug
notes=$root/target/wasm32-unknown-unknown/release/notes.wasm
work=$(mktemp -d)
bermd_pid=
cleanup() {
  [ -z "$bermd_pid" ] || kill "$bermd_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
check() { printf 'ok - %s\n' "$1"; passed=$((passed + 1)); }
fail() { printf 'not ok - %s\n' "$1" >&2; printf 'harnesses: %s passed, 1 failed\n' "$passed"; exit 1; }

# A new user's HOME, with berm's debug build and both harnesses on PATH.
export HOME=$work/home BERM_HOME=$work/berm
export PATH="$bin:$dir/node_modules/.bin:$node_bin:/usr/bin:/bin"
mkdir -p "$HOME" "$work/project"
"$bin/bermd" 2>"$work/bermd.log" &
bermd_pid=$!
for _ in $(seq 100); do [ -S "$BERM_HOME/control.sock" ] && break; sleep 0.05; done
berm deploy notes "$notes" --grant kv >/dev/null || { cat "$work/bermd.log" >&2; fail "bermd serves notes"; }

# Codex hands an MCP server only the variables it names (BERM_HOME is not among the ones it
# passes on), so a data directory other than ~/.berm goes in with --env, as docs/clients.md says.
codex mcp add berm --env "BERM_HOME=$BERM_HOME" -- berm mcp >/dev/null 2>"$work/codex.log" ||
  { cat "$work/codex.log" >&2; fail "codex mcp add"; }
codex mcp list 2>/dev/null | grep -Eq '^berm +berm +mcp .*enabled' || fail "codex mcp list shows berm enabled"
check "Codex $CODEX_VERSION: codex mcp add writes berm into its config and codex mcp list shows it"

out=$(cd "$work/project" && timeout 180 python3 "$root/tests/e2e/codex_app_server.py" berm "from codex" 2>>"$work/codex.log") ||
  { tail -20 "$work/codex.log" >&2; fail "Codex's app server reaches berm"; }
python3 - "$out" <<'PY' || fail "Codex lists berm's tools"
import json, sys
tools = json.loads(sys.argv[1])["tools"]
assert tools == ["notes_add", "notes_delete", "notes_list", "notes_search"], tools
PY
check "Codex starts berm mcp and lists berm's tools (notes_add, notes_delete, notes_list, notes_search)"
python3 - "$out" <<'PY' || fail "Codex calls berm's tools"
import json, sys
got = json.loads(sys.argv[1])
for name in ("add", "list"):
    assert not got[name].get("isError"), (name, got[name])
listed = json.loads(got["list"]["content"][0]["text"])
assert [n["title"] for n in listed] == ["from codex"], listed
PY
berm call notes_list '{}' | grep -q '"from codex"' || fail "the note Codex wrote is in bermd"
check "Codex calls notes_add then notes_list through berm, and the note is in bermd's keyspace"

cat >"$work/project/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "mcp": {"berm": {"type": "local", "command": ["berm", "mcp"], "environment": {"BERM_HOME": "$BERM_HOME"}}}
}
JSON
listed=$(cd "$work/project" && timeout 120 opencode mcp list 2>&1 | sed 's/\x1b\[[0-9;]*m//g') || true
grep -Eq 'berm +connected' <<<"$listed" || { echo "$listed" >&2; fail "opencode mcp list connects to berm"; }
check "OpenCode $OPENCODE_VERSION: opencode mcp list starts berm mcp from opencode.json and reports it connected"
printf 'harnesses: %s passed, 0 failed\n' "$passed"
