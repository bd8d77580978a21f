#!/usr/bin/env bash
# The distribution round trip through the real binaries: a real registry
# (Debian's docker-registry on a free 127.0.0.1 port), a real bermd, the
# berm CLI. build → push by tag → pull by tag and by digest → the layer
# digest is the digest `berm ls` prints → deploy NAME REF → call; then a
# blob corrupted in the registry's storage is refused and nothing is written.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/target/debug
wasm=$root/target/wasm32-unknown-unknown/release/echo.wasm
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
passed=0
check() { printf 'ok - %s\n' "$1"; passed=$((passed + 1)); }
fail() { printf 'not ok - %s\n' "$1" >&2; printf 'dist round trip: %s passed, 1 failed\n' "$passed"; exit 1; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/registry.yml" <<YAML
version: 0.1
storage:
  filesystem:
    rootdirectory: $work/registry
http:
  addr: 127.0.0.1:$port
YAML
docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

export BERM_HOME=$work/home
"$bin/bermd" 2>"$work/bermd.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$BERM_HOME/control.sock" ] && break; sleep 0.05; done

hex=$(sha256sum "$wasm" | cut -d' ' -f1)
tag=127.0.0.1:$port/berm/echo:v1

# `@sha256:` in a reference pins the OCI manifest; push prints it.
pushed=$("$bin/berm" push "$tag" "$wasm") || fail "push by tag"
pinned=$(sed -n 's/^pinned *//p' <<<"$pushed")
[ -n "$pinned" ] || fail "push did not print the pinned reference: $pushed"
check "push $tag (pinned as $pinned)"
"$bin/berm" pull "$tag" -o "$work/by-tag.wasm" >/dev/null && cmp -s "$wasm" "$work/by-tag.wasm" || fail "pull by tag"
check "pull by tag gives the same bytes"
"$bin/berm" pull "$pinned" -o "$work/by-digest.wasm" >/dev/null && cmp -s "$wasm" "$work/by-digest.wasm" || fail "pull by digest"
check "pull by digest gives the same bytes"
[ -f "$work/registry/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data" ] || fail "the registry stores the layer under the program's digest"
check "the registry's layer digest is the program's sha256"

"$bin/berm" deploy echo "$tag" >/dev/null 2>&1 || fail "deploy NAME REF"
listed=$("$bin/berm" ls --json | python3 -c 'import json, sys; print(next(p["digest"] for p in json.load(sys.stdin) if p["name"] == "echo"))')
[ "$listed" = "sha256:$hex" ] || fail "berm ls prints $listed, expected sha256:$hex"
check "berm ls prints the registry's digest"
out=$("$bin/berm" call echo_echo '{"message":"through a registry"}')
[ "$out" = "through a registry" ] || fail "call after deploy by reference: $out"
check "the deployed program answers"
"$bin/berm" deploy echo-pinned "$pinned" >/dev/null 2>&1 || fail "deploy by digest"
check "deploy by digest"

# --json: one object a script can read, with the same facts as the text.
field() { python3 -c 'import json, sys; v = json.load(sys.stdin)
for k in sys.argv[1:]: v = v[int(k)] if isinstance(v, list) else v[k]
print(v)' "$@"; }
got=$("$bin/berm" push --json "$tag" "$wasm" | field digest) || fail "push --json"
[ "$got" = "sha256:$hex" ] || fail "push --json digest: $got"
got=$("$bin/berm" pull --json "$pinned" -o "$work/json.wasm" | field pulled pinned) || fail "pull --json"
[ "$got" = "$pinned" ] && cmp -s "$wasm" "$work/json.wasm" || fail "pull --json: $got"
got=$("$bin/berm" deploy --json echo-json "$pinned" | field tools 0) || fail "deploy --json"
[ "$got" = "echo-json_echo" ] || fail "deploy --json tools: $got"
check "push, pull and deploy --json print the digest, the pinned reference and the served tools"

blob=$work/registry/docker/registry/v2/blobs/sha256/${hex:0:2}/$hex/data
printf 'X' | dd of="$blob" bs=1 seek=200 conv=notrunc status=none
if "$bin/berm" pull "$tag" -o "$work/tampered.wasm" 2>"$work/tampered.err"; then fail "a tampered layer was accepted"; fi
[ ! -e "$work/tampered.wasm" ] || fail "a refused pull left a file behind"
grep -qi "digest" "$work/tampered.err" || fail "the refusal does not mention the digest: $(cat "$work/tampered.err")"
check "a tampered layer is refused, nothing written ($(head -c 160 "$work/tampered.err"))"
if "$bin/berm" deploy echo "$tag" 2>/dev/null; then fail "deploy of a tampered layer"; fi
[ "$("$bin/berm" call echo_echo '{"message":"still the old one"}')" = "still the old one" ] || fail "a refused deploy changed the deployment"
check "a tampered deploy is refused and the deployment is unchanged"

printf 'dist round trip: %s passed, 0 failed\n' "$passed"
