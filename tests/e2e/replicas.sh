#!/usr/bin/env bash
# Three bermd replicas behind one nginx, all on one PostgreSQL (docs/kubernetes.md, "The
# replicas test"), with Debian's nginx and postgresql, started here and stopped on exit:
# - a note written through one replica is in notes_list through the other two (each replica
#   addressed directly);
# - the Python MCP SDK's 2026-07-28 stateless calls through nginx are spread over all three:
#   nginx's access log names the upstream of each, and shows each request carrying its
#   protocol version and no session;
# - one replica is killed (SIGKILL) mid-run while a writer and three readers call through
#   nginx: calls go on through the other two, every notes_add that was answered is in the
#   final list, and the line `replicas: …` says how many calls in flight failed.
# With BERM_REPLICAS_BENCH=1 (scripts/bench-replicas) the same setup runs the bench instead.
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
apt_install_stopped $(apt_missing nginx postgresql)
pg_bin=$(find /usr/lib/postgresql -maxdepth 2 -name bin -type d | sort -V | tail -1)
[ -x "$pg_bin/postgres" ] || { echo "SKIPPED: no PostgreSQL server under /usr/lib/postgresql/*/bin after installing postgresql"; exit 1; }
command -v nginx >/dev/null || { echo "SKIPPED: no nginx on PATH after installing nginx"; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  # SIGINT is PostgreSQL's fast shutdown: clients are disconnected, then it exits.
  [ -z "${pg_pid:-}" ] || kill -INT "$pg_pid" 2>/dev/null || true
  for pid in "${pids[@]}" ${pg_pid:-}; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "replicas: process $pid ($(ps -o comm= -p "$pid" || true)) did not stop within 10 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
check() { printf 'ok - %s\n' "$1"; passed=$((passed + 1)); }
fail() {
  printf 'not ok - %s\n' "$1" >&2
  for log in "$work"/*.log "$work"/nginx/*.log; do [ -f "$log" ] && { echo "--- $log" >&2; tail -20 "$log" >&2; }; done
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
"${as_pg[@]}" "$pg_bin/initdb" --auth=trust --username=postgres --encoding=UTF8 -D "$work/pg/data" \
  >"$work/initdb.log" 2>&1 || fail "initdb makes a cluster in $work/pg/data"
"${as_pg[@]}" "$pg_bin/postgres" -D "$work/pg/data" -c listen_addresses= \
  -c "unix_socket_directories=$work/pg" >"$work/postgres.log" 2>&1 &
pg_pid=$!
psql() { "$pg_bin/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$work/pg" -U postgres "$@"; }
wait_for "PostgreSQL starts and answers on its socket in $work/pg" psql -d postgres -c 'SELECT 1'
# An ordinary role owning its database, as docs/kubernetes.md tells an operator to make.
psql -d postgres -c 'CREATE ROLE berm LOGIN' || fail "CREATE ROLE berm"
psql -d postgres -c 'CREATE DATABASE berm OWNER berm' || fail "CREATE DATABASE berm"
printf 'postgres://berm@/berm?host=%s\n' "$work/pg" >"$work/kv-url"
check "PostgreSQL $("$pg_bin/postgres" --version | awk '{print $3}') from Debian's package, on a Unix socket only, role and database berm"

# Three replicas of one app folder, the same token, the same database, each its own home,
# with bermd's default caps (a 2026-07-28 call opens no session, so --max-session-rate does
# not bound these calls).
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
  # Out of bash's job table, so the SIGKILL below is reported by the client, in order, not
  # by bash as a job's "Killed" line; the cleanup still ends them by pid.
  disown $!
done
for i in 0 1 2; do
  wait_for "replica $((i + 1)) (port ${ports[$i]}) says ready on /readyz" \
    sh -c "[ \"\$(curl -s http://127.0.0.1:${ports[$i]}/readyz)\" = ready ]"
done
[ "$(psql -d berm -c "SELECT count(*) FROM pg_tables WHERE tableowner = 'berm'")" -gt 0 ] \
  || fail "bermd made its tables in the database berm, owned by the role berm"
check "three bermd replicas serve the notes app, each with its own home, all on one database"

# nginx in front: round robin over the three, its access log naming each request's upstream,
# when it was answered, and the MCP headers it carried.
lb=$(free_port)
lb1=$(free_port)
mkdir "$work/nginx"
cat >"$work/nginx.conf" <<EOF
# The workers run as the user running this, not as www-data, who cannot reach \$work.
user $(id -un);
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 512; }
http {
  log_format upstream '\$msec|\$upstream_addr|\$status|\$request_method|\$http_mcp_protocol_version|\$http_mcp_session_id';
  access_log $work/nginx/access.log upstream;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  upstream three {
    server 127.0.0.1:${ports[0]};
    server 127.0.0.1:${ports[1]};
    server 127.0.0.1:${ports[2]};
    keepalive 16;
  }
  # The bench's baseline (scripts/bench-replicas): the same nginx, one replica behind it.
  upstream one {
    server 127.0.0.1:${ports[0]};
    keepalive 16;
  }
  server {
    listen 127.0.0.1:$lb;
    location / {
      proxy_pass http://three;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host localhost;
      proxy_buffering off;
    }
  }
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
}
EOF
nginx -t -q -c "$work/nginx.conf" -p "$work/nginx" >"$work/nginx-t.log" 2>&1 || fail "nginx accepts its configuration $work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work/nginx" -g 'daemon off;' >"$work/nginx.log" 2>&1 &
pids+=($!)
wait_for "nginx listens on 127.0.0.1:$lb and passes /healthz on" curl -sf "http://127.0.0.1:$lb/healthz"
check "nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') in front of the three, round robin"

if [ -n "${BERM_REPLICAS_BENCH:-}" ]; then
  # scripts/bench-replicas: calls/s through nginx to three replicas beside one, then stop.
  "$python" "$root/tests/e2e/replicas.py" bench "$token" "http://localhost:$lb/mcp" \
    "http://localhost:$lb1/mcp" || fail "the bench's client (above)"
  exit 0
fi

client_out=$("$python" "$root/tests/e2e/replicas.py" run "$token" "http://localhost:$lb/mcp" \
  "http://localhost:${ports[0]}/mcp" "http://localhost:${ports[1]}/mcp" "http://localhost:${ports[2]}/mcp" \
  "${pids[1]}") || { printf '%s\n' "$client_out"; fail "the MCP client's run through the replicas (above)"; }
printf '%s\n' "$client_out" | grep -v '^{' || true
printf '%s\n' "$client_out" | grep '^{' >"$work/summary.json" || fail "the client printed its summary line"
field() { # field NAME: one value of the client's summary (a list as "a, b", a number as 1 or 1.5)
  python3 - "$work/summary.json" "$1" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))[sys.argv[2]]
print(", ".join(v) if isinstance(v, list) else f"{v:g}" if isinstance(v, float) else v)
PY
}
# expect WHAT PYTHON: runs PYTHON with `s`, the client's summary.
expect() {
  python3 - "$work/summary.json" <<PY || fail "$1"
import json, sys
s = json.load(open(sys.argv[1]))
$2
PY
}
expect "a note written through replica 1 is in notes_list through replicas 2 and 3" '
assert s["read_through_other_replicas"] == {"2": True, "3": True}, s["read_through_other_replicas"]
'
expect "every client negotiated MCP 2026-07-28 or later" '
assert s["protocol_versions"] and min(s["protocol_versions"]) >= "2026-07-28", s["protocol_versions"]
'
check "a note written through replica 1 is read through replicas 2 and 3; every client speaks MCP $(field protocol_versions)"
kill -0 "${pids[1]}" 2>/dev/null && fail "replica 2 (pid ${pids[1]}) is dead after the client's SIGKILL"
expect "no call failed before the kill" 'assert s["failed_before_kill"] == 0, s'
expect "calls went on through the other replicas after the kill, and none failed from $(field settle_seconds) s after it" '
assert s["adds_answered_after_settle"] >= 5 and s["lists_answered_after_settle"] >= 5, s
assert s["failed_after_settle"] == 0, s
'
expect "every notes_add answered is in the final notes_list, under its id and title, each id once" '
assert s["acknowledged_writes"] >= 20, s["acknowledged_writes"]
assert s["lost_writes"] == [], s["lost_writes"]
assert s["duplicate_ids"] == [], s["duplicate_ids"]
'
check "replica 2 SIGKILLed mid-run: calls went on through the others, no answered notes_add lost"

# nginx's view: before the kill every replica served calls; from the settling time after it
# (an answer replica 2 wrote just before it died may be read and logged just after) replicas
# 1 and 3 did and replica 2 none. Every POST carried the protocol version and no session.
python3 - "$work/nginx/access.log" "$work/summary.json" "${ports[@]}" <<'PY' || fail "nginx's access log shows the calls spread over the replicas, stateless"
import collections, json, sys
log, summary, ports = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3:]
killed, settled = summary["killed_at_epoch"], summary["killed_at_epoch"] + summary["settle_seconds"]
before, after = collections.Counter(), collections.Counter()
posts = versions = sessions = retried = bad_gateway = 0
for line in open(log):
    msec, upstream, status, method, version, session = line.rstrip("\n").split("|")
    if method != "POST":
        continue
    posts += 1
    versions += version >= "2026-07-28" and version != "-"
    sessions += session != "-"
    # A connect refused by the dead replica is passed on: "A:p, B:q" (the last one answered).
    retried += "," in upstream
    bad_gateway += status == "502"
    if status == "200":
        port = upstream.split(",")[-1].strip().rsplit(":", 1)[-1]
        if float(msec) < killed:
            before[port] += 1
        elif float(msec) > settled:
            after[port] += 1
names = {p: f"replica {i}" for i, p in enumerate(ports, start=1)}
show = lambda c: ", ".join(f"{names[p]}: {c[p]}" for p in ports)
print(f"nginx: {posts} POSTs; answered before the kill by {show(before)}; "
      f"from {summary['settle_seconds']:g} s after it by {show(after)}; "
      f"{retried} passed on to the next replica, {bad_gateway} answered 502 by nginx")
assert posts > 0, "nginx logged no POST"
assert versions == posts, f"{posts - versions} of {posts} POSTs carried no MCP-Protocol-Version of 2026-07-28 or later"
assert sessions == 0, f"{sessions} of {posts} POSTs carried an Mcp-Session-Id"
assert all(before[p] > 0 for p in ports), f"not every replica served calls before the kill: {show(before)}"
assert after[ports[0]] > 0 and after[ports[2]] > 0, f"replicas 1 and 3 did not both serve calls after the kill: {show(after)}"
assert after[ports[1]] == 0, f"replica 2 answered after it was killed: {show(after)}"
PY
check "nginx's access log: all three replicas served stateless calls (a protocol version on each, no session), replicas 1 and 3 alone after the kill"
{ kill -0 "${pids[0]}" && kill -0 "${pids[2]}"; } 2>/dev/null || fail "replicas 1 and 3 still run"
printf 'replicas: %s calls, %s in flight when replica 2 was killed failed\n' "$(field calls)" "$(field failed_in_flight_at_kill)"
printf 'replicas: %s passed, 0 failed\n' "$passed"
