#!/usr/bin/env bash
# Three bermd replicas behind one nginx, all on one PostgreSQL (docs/kubernetes.md), with
# Debian's nginx and postgresql, started here and stopped on exit:
# - a note written through one replica is read through another (each replica addressed
#   directly);
# - the Python MCP SDK's 2026-07-28 stateless calls through nginx are spread over all three
#   (nginx's access log names the upstream of each);
# - one replica is killed (SIGKILL) mid-run while a writer and three readers call through
#   nginx: calls go on through the other two, every notes_add that was answered is in the
#   final list, and the line `replicas: …` says how many calls in flight failed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/scripts/lib-pins.sh"
. "$root/scripts/lib/apt.sh"
python=$BERM_CACHE/venv/bin/python
app=$root/target/apps/notes
bermd=${BERM_BERMD:-$root/target/debug/bermd}
[ -f "$app/berm.toml" ] || { echo "replicas: $app is missing: run scripts/build-apps.sh" >&2; exit 2; }
[ -x "$python" ] || { echo "replicas: $python is missing: run scripts/setup-python-client" >&2; exit 2; }
[ -x "$bermd" ] || { echo "replicas: $bermd is missing: cargo build -p berm-service --bin bermd" >&2; exit 2; }
# shellcheck disable=SC2046 # a list of package names
apt_install $(apt_missing nginx postgresql)
pg_bin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d | sort -V | tail -1)
[ -x "$pg_bin/postgres" ] || { echo "SKIPPED: no PostgreSQL server under /usr/lib/postgresql"; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -z "${pg_pid:-}" ] || kill -INT "$pg_pid" 2>/dev/null || true
  for pid in "${pids[@]}" ${pg_pid:-}; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
check() { printf 'ok - %s\n' "$1"; passed=$((passed + 1)); }
fail() {
  printf 'not ok - %s\n' "$1" >&2
  for log in "$work"/*.log; do [ -f "$log" ] && { echo "--- $log" >&2; tail -20 "$log" >&2; }; done
  printf 'replicas: %s passed, 1 failed\n' "$passed"
  exit 1
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for WHAT COMMAND...: up to 30 s
  local what=$1
  shift
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "$what"
}

# PostgreSQL: its data and socket in $work/pg, no TCP port. It refuses to run as root, so as
# root it runs as the package's `postgres` user (setpriv execs in place: $! is the server).
as_pg=()
mkdir -m 0700 "$work/pg"
if [ "$(id -u)" = 0 ]; then
  chmod 0711 "$work" # the server's user passes through to its own directory, lists nothing
  chown postgres:postgres "$work/pg"
  as_pg=(setpriv --reuid=postgres --regid=postgres --clear-groups --)
fi
"${as_pg[@]}" "$pg_bin/initdb" --auth=trust --username=postgres -D "$work/pg/data" >"$work/initdb.log" 2>&1 \
  || fail "initdb"
"${as_pg[@]}" "$pg_bin/postgres" -D "$work/pg/data" -c listen_addresses= \
  -c "unix_socket_directories=$work/pg" >"$work/postgres.log" 2>&1 &
pg_pid=$!
psql() { "$pg_bin/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$work/pg" -U postgres "$@"; }
wait_for "PostgreSQL starts" psql -d postgres -c 'SELECT 1'
psql -d postgres -c 'CREATE ROLE berm LOGIN'
psql -d postgres -c 'CREATE DATABASE berm OWNER berm'
printf 'postgres://berm@/berm?host=%s\n' "$work/pg" >"$work/kv-url"
check "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') from Debian's package, on a Unix socket, role and database berm"

# Three replicas of one app folder, the same token, the same database.
head -c 32 /dev/urandom | base64 | tr -d '\n' >"$work/token"
chmod 0600 "$work/token"
token=$(cat "$work/token")
ports=()
for i in 1 2 3; do
  port=$(free_port)
  ports+=("$port")
  BERM_HOME=$work/home$i "$bermd" --http "127.0.0.1:$port" --http-token-file "$work/token" \
    --app "$app" --kv-url-file "$work/kv-url" >"$work/bermd$i.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do
  wait_for "replica $((i + 1)) is ready" sh -c "[ \"\$(curl -s http://127.0.0.1:${ports[$i]}/readyz)\" = ready ]"
done
check "three bermd replicas serve the notes app, each with its own home, all on one database"

# nginx in front: round robin over the three, its access log naming each request's upstream.
lb=$(free_port)
lb1=$(free_port)
mkdir "$work/nginx"
cat >"$work/nginx.conf" <<EOF
user root;
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 512; }
http {
  log_format upstream '\$upstream_addr \$status \$request_method';
  access_log $work/nginx/access.log upstream;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  upstream bermd {
    server 127.0.0.1:${ports[0]};
    server 127.0.0.1:${ports[1]};
    server 127.0.0.1:${ports[2]};
    keepalive 16;
  }
  upstream one {
    server 127.0.0.1:${ports[0]};
    keepalive 16;
  }
  # The bench's baseline (scripts/bench-replicas): the same nginx, one replica behind it.
  server {
    listen 127.0.0.1:$lb1;
    location / {
      proxy_pass http://one;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host localhost;
      proxy_buffering off;
    }
  }
  server {
    listen 127.0.0.1:$lb;
    location / {
      proxy_pass http://bermd;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host localhost;
      proxy_buffering off;
      proxy_read_timeout 60s;
    }
  }
}
EOF
nginx -t -c "$work/nginx.conf" -p "$work/nginx" >"$work/nginx-t.log" 2>&1 || fail "nginx accepts its configuration"
nginx -c "$work/nginx.conf" -p "$work/nginx" -g 'daemon off;' >"$work/nginx.log" 2>&1 &
pids+=($!)
wait_for "nginx listens" curl -sf "http://127.0.0.1:$lb/healthz"
check "nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') in front of the three, round robin"

if [ -n "${BERM_REPLICAS_BENCH:-}" ]; then
  # scripts/bench-replicas: calls/s through nginx to three replicas beside one, then stop.
  "$python" "$root/tests/e2e/replicas.py" "$token" "http://localhost:$lb/mcp" \
    "http://localhost:$lb1/mcp" --bench || fail "the bench"
  exit 0
fi
out=$("$python" "$root/tests/e2e/replicas.py" "$token" "http://localhost:$lb/mcp" \
  "http://localhost:${ports[0]}/mcp" "http://localhost:${ports[1]}/mcp" "${pids[1]}") \
  || fail "the MCP client's run through the replicas (above)"
printf '%s\n' "$out" | grep -v '^{' || true
summary=$(printf '%s\n' "$out" | grep '^{')
python3 - "$summary" <<'PY' || fail "what the client saw"
import json, sys
s = json.loads(sys.argv[1])
assert s["protocol_version"] >= "2026-07-28", s
assert s["read_through_other_replica"], s
assert s["calls"] > 100, s
assert s["failed_after_kill_settled"] == 0 and s["failed_before_kill"] == 0, s
assert s["acknowledged_writes"] > 10 and s["lost_writes"] == [], s
assert s["duplicate_ids"] == [], s
PY
check "a note written through replica 1 is read through replica 2; every answered notes_add is in the final list"
printf 'replicas: %s calls, %s in flight when replica 2 was killed failed\n' \
  "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["calls"])' "$summary")" \
  "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["failed_at_kill"])' "$summary")"

# Every replica served calls through nginx before the kill, and the other two after it.
python3 - "$work/nginx/access.log" "${ports[@]}" <<'PY' || fail "nginx spread the calls"
import collections, sys
log, ports = sys.argv[1], sys.argv[2:]
served = collections.Counter()
for line in open(log):
    upstream, status, method = line.split()
    if status == "200" and method == "POST":
        served[upstream.split(",")[-1].strip().rsplit(":", 1)[-1]] += 1
missing = [p for p in ports if served[p] == 0]
assert not missing, f"replicas on ports {missing} served no call: {dict(served)}"
print("served per replica port:", dict(served))
PY
check "nginx's access log: all three replicas served 2026-07-28 calls"
{ kill -0 "${pids[0]}" && kill -0 "${pids[2]}"; } || fail "replicas 1 and 3 still run"
printf 'replicas: %s passed, 0 failed\n' "$passed"
