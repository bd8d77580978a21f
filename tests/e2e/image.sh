#!/usr/bin/env bash
# bermd's container image as a user runs it, under Debian's podman:
# - scripts/build-image twice into two directories gives the same digest (the packaging is
#   reproducible; the binaries are the rootfs's reproducible build);
# - the image runs as 65532, has no shell, and serves under `--read-only` with every
#   capability dropped: an app folder mounted read-only, BERM_HOME on a named volume, the
#   token from a file;
# - /healthz and /readyz answer without a token, and the Python MCP SDK lists and calls a
#   tool over HTTP with it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${BERM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/berm}
python=$cache/venv/bin/python
app=$root/target/apps/notes
[ -f "$app/berm.toml" ] || { echo "image: $app is missing: run scripts/build-apps.sh" >&2; exit 2; }
command -v podman >/dev/null || { echo "image: podman is missing (apt-get install podman)" >&2; exit 2; }
# This machine kind mounts cgroups hybrid (v1 controllers beside a cgroup2 with controllers
# of its own), which crun, podman's default runtime, refuses; runc runs there. And podman
# raises RLIMIT_NPROC and RLIMIT_NOFILE past limits a sandboxed root may not raise, so the
# container gets the shell's own open-files limits and a modest process cap.
runtime=()
if [ -n "$(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null)" ]; then
  command -v runc >/dev/null || { echo "image: runc is missing (apt-get install runc), and crun cannot run on hybrid cgroups" >&2; exit 2; }
  runtime=(--runtime runc)
fi
run=(podman run "${runtime[@]}" --ulimit "nofile=$(ulimit -Sn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
work=$(mktemp -d)
name=berm-image-e2e-$$
cleanup() {
  podman rm -f "$name" >/dev/null 2>&1 || true
  podman volume rm -f "$name" >/dev/null 2>&1 || true
  [ -z "${image:-}" ] || podman rmi -f "$image" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
check() { printf 'ok - %s\n' "$1"; passed=$((passed + 1)); }
fail() { printf 'not ok - %s\n' "$1" >&2; printf 'image: %s passed, 1 failed\n' "$passed"; exit 1; }

first=$("$root/scripts/build-image" --out "$work/a" 2>"$work/build.log") || { cat "$work/build.log" >&2; fail "scripts/build-image"; }
second=$("$root/scripts/build-image" --out "$work/b" 2>>"$work/build.log") || { cat "$work/build.log" >&2; fail "scripts/build-image again"; }
[ "$first" = "$second" ] || fail "the same tree gives the same image digest ($first, then $second)"
diff -r "$work/a" "$work/b" >/dev/null || fail "the two image layouts are byte for byte the same"
check "scripts/build-image is reproducible: $first twice"

command -v skopeo >/dev/null || { echo "image: skopeo is missing (apt-get install skopeo)" >&2; exit 2; }
image=localhost/$name:test
skopeo copy -q "oci:$work/a" "containers-storage:$image" 2>"$work/pull.log" || { cat "$work/pull.log" >&2; fail "skopeo copies the layout into podman's storage"; }
[ "$(podman image inspect --format '{{.Digest}}' "$image")" = "$first" ] || fail "podman stores the image under its digest $first"
user=$(podman image inspect --format '{{.Config.User}}' "$image")
[ "$user" = 65532:65532 ] || fail "the image runs as 65532:65532, not $user"
if "${run[@]}" --rm --entrypoint /bin/sh "$image" -c true >"$work/sh.log" 2>&1; then fail "the image has no shell"; fi
grep -qi 'no such file\|not found' "$work/sh.log" || { cat "$work/sh.log" >&2; fail "a shell is refused as missing"; }
check "podman runs it by digest: user 65532:65532, no /bin/sh"

token=$(head -c 32 /dev/urandom | base64 | tr -d '\n')
printf '%s\n' "$token" >"$work/token"
chown 65532:65532 "$work/token"
chmod 0400 "$work/token"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
podman volume create "$name" >/dev/null
"${run[@]}" -d --name "$name" --read-only --cap-drop=all --security-opt no-new-privileges \
  -p "127.0.0.1:$port:8080" \
  -v "$work/token:/run/berm/token:ro" -v "$app:/etc/berm/app:ro" -v "$name:/var/lib/berm" \
  "$image" --http 0.0.0.0:8080 --http-allow-remote --http-token-file /run/berm/token \
  --allowed-host localhost --app /etc/berm/app >/dev/null || fail "podman runs bermd"
ready=
for _ in $(seq 300); do
  ready=$(curl -s "http://127.0.0.1:$port/readyz" || true)
  [ "$ready" = ready ] && break
  sleep 0.1
done
[ "$ready" = ready ] || { podman logs "$name" >&2; fail "/readyz says ready"; }
[ "$(curl -s "http://127.0.0.1:$port/healthz")" = ok ] || fail "/healthz says ok"
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://localhost:$port/mcp")
[ "$status" = 401 ] || fail "/mcp without the token is 401, not $status"
check "read-only root, no capabilities: /healthz and /readyz answer without a token, /mcp needs it"

uid=$(podman top "$name" huser | sed -n 2p | tr -d ' ')
[ "$uid" = 65532 ] || fail "bermd runs as uid 65532 on the host's side of the container, not $uid"
out=$("$python" "$root/tests/e2e/mcp_http_call.py" "http://localhost:$port/mcp" "$token" notes_add \
  '{"title": "from the image", "text": "through podman"}') || { podman logs "$name" >&2; fail "an MCP client calls through the image"; }
python3 - "$out" <<'PY' || fail "notes_add through the image"
import json, sys
got = json.loads(sys.argv[1])
assert got["server"] == "bermd", got
assert "notes_add" in got["tools"], got
assert not got["is_error"], got
assert json.loads(got["text"][0])["title"] == "from the image", got
PY
podman volume inspect --format '{{.Mountpoint}}' "$name" >"$work/mountpoint"
[ -n "$(find "$(cat "$work/mountpoint")" -user 65532 -type f | head -1)" ] || fail "bermd's state is on the volume, owned by 65532"
check "the Python MCP SDK calls notes_add over HTTP with the token; the state is on the volume, owned by 65532"
printf 'image: %s passed, 0 failed\n' "$passed"
