"""The client side of tests/e2e/replicas.sh and scripts/bench-replicas, with the Python MCP
SDK speaking MCP 2026-07-28: every call is a request of its own, carrying its protocol
version and no session, so nginx may send each to any replica.

    python replicas.py run TOKEN LB_URL REPLICA1_URL REPLICA2_URL REPLICA3_URL VICTIM_PID
    python replicas.py bench TOKEN THREE_URL ONE_URL

run:
1. notes_add through replica 1, then notes_list through replicas 2 and 3 (each addressed
   directly): the note is in both lists.
2. For RUN_SECONDS, one writer (notes_add, one at a time: the notes program takes its next
   id by a read and a write, so two adds at once could take the same id whatever the
   backend) and three readers (notes_list) call through nginx; at KILL_AT VICTIM_PID (replica
   2) is killed with SIGKILL. Every call's outcome and times are kept.
3. notes_list through nginx: every note a notes_add answered (its id and its title) must be
   there.
Prints what happened, then one JSON line replicas.sh checks.

bench: calls/s of BENCH_CLIENTS clients calling at once for BENCH_SECONDS, through THREE_URL
(nginx to three replicas) and ONE_URL (the same nginx to one), BENCH_ROUNDS rounds each,
alternating; prints every round, the medians and their ratio.
"""

import json
import os
import signal
import statistics
import sys
import time
import uuid

import anyio
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

RUN_SECONDS = 8.0
KILL_AT = 2.5
# A call sent just after the kill may still go out to the dead replica, on a connection nginx
# has not yet seen closed: it was in flight as far as nginx knew. Calls sent from this long
# after the kill on must all succeed.
SETTLE = 1.0
# The protocol the calls must speak: the first without initialize or sessions.
STATELESS = "2026-07-28"

BENCH_CLIENTS = 8
BENCH_ROUNDS = 6
BENCH_SECONDS = 3.0
BENCH_NOTES = 20


def client(url, token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    server = streamable_http_client(url, http_client=http)
    return Client(server, mode="auto", read_timeout_seconds=30, cache=None)


def failed(calls):
    return sum(1 for o in calls if not o[3])


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "text", None) is not None)


def stateless(c, where):
    """Fails unless the client `c` negotiated 2026-07-28 or later (no session)."""
    if c.protocol_version < STATELESS:
        raise SystemExit(f"{where}: the client negotiated MCP {c.protocol_version}, not {STATELESS} or later")
    return c.protocol_version


async def listed(c, where):
    result = await c.call_tool("notes_list", {})
    if result.is_error:
        raise SystemExit(f"notes_list through {where} failed: {text(result)}")
    return json.loads(text(result))


async def run(token, lb, replicas, victim):
    title = f"written through replica 1: {uuid.uuid4()}"
    async with client(replicas[0], token) as c:
        version = stateless(c, "replica 1")
        added = await c.call_tool("notes_add", {"title": title, "text": "replicas.sh"})
        if added.is_error:
            raise SystemExit(f"notes_add through replica 1 failed: {text(added)}")
        note = json.loads(text(added))
    read_back = {}
    for i, url in enumerate(replicas[1:], start=2):
        async with client(url, token) as c:
            stateless(c, f"replica {i}")
            read_back[i] = {"id": note["id"], "title": title} in await listed(c, f"replica {i}")
    print(f"MCP {version}; note {note['id']} written through replica 1, in notes_list through "
          + ", ".join(f"replica {i}: {found}" for i, found in read_back.items()))

    outcomes = []  # (started, ended, tool, ok), seconds since `start`
    why = []  # each failure, with when it started
    acknowledged = []  # {"id", "title"} of every notes_add answered without error
    versions = set()
    start = time.monotonic()
    killed_at = None

    async def call(c, tool, arguments):
        began = time.monotonic() - start
        try:
            result = await c.call_tool(tool, arguments)
            ok = not result.is_error
            if ok and tool == "notes_add":
                acknowledged.append({"id": json.loads(text(result))["id"], "title": arguments["title"]})
            elif not ok:
                why.append(f"{tool} at {began:.2f} s: {text(result)}")
        except Exception as e:  # a 502 from nginx, a reset: the call failed
            ok = False
            why.append(f"{tool} at {began:.2f} s: {e!r}")
        outcomes.append((began, time.monotonic() - start, tool, ok))

    async def writer():
        async with client(lb, token) as c:
            versions.add(stateless(c, "nginx"))
            n = 0
            while time.monotonic() - start < RUN_SECONDS:
                n += 1
                await call(c, "notes_add", {"title": f"load {n}", "text": "x"})

    async def reader():
        async with client(lb, token) as c:
            versions.add(stateless(c, "nginx"))
            while time.monotonic() - start < RUN_SECONDS:
                await call(c, "notes_list", {})

    async def killer():
        nonlocal killed_at
        await anyio.sleep(KILL_AT)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic() - start
        killed_epoch.append(time.time())

    killed_epoch = []
    async with anyio.create_task_group() as group:
        group.start_soon(writer)
        for _ in range(3):
            group.start_soon(reader)
        group.start_soon(killer)

    async with client(lb, token) as c:
        final = await listed(c, "nginx")
    missing = [n for n in acknowledged if n not in final]
    ids = [n["id"] for n in acknowledged]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})

    before = [o for o in outcomes if o[1] < killed_at]
    # In flight: under way at the kill, or sent within SETTLE of it.
    in_flight = [o for o in outcomes if o[0] <= killed_at + SETTLE and o[1] >= killed_at]
    settled = [o for o in outcomes if o[0] > killed_at + SETTLE]
    print(
        f"{len(outcomes)} calls through nginx in {RUN_SECONDS:g} s, {len(acknowledged)} notes_add answered; "
        f"replica 2 killed at {killed_at:.2f} s: {len(before)} calls ended before it, {failed(before)} failed; "
        f"{len(in_flight)} under way at it or sent within {SETTLE:g} s of it, {failed(in_flight)} failed; "
        f"{len(settled)} sent later, {failed(settled)} failed"
    )
    for line in why:
        print(f"  failed: {line}")
    print(json.dumps({
        "protocol_versions": sorted(versions | {version}),
        "read_through_other_replicas": read_back,
        "calls": len(outcomes),
        "killed_at_epoch": killed_epoch[0],
        "settle_seconds": SETTLE,
        "failed_before_kill": failed(before),
        "in_flight_at_kill": len(in_flight),
        "failed_in_flight_at_kill": failed(in_flight),
        "calls_after_settle": len(settled),
        "failed_after_settle": failed(settled),
        "adds_answered_after_settle": sum(1 for o in settled if o[2] == "notes_add" and o[3]),
        "lists_answered_after_settle": sum(1 for o in settled if o[2] == "notes_list" and o[3]),
        "acknowledged_writes": len(acknowledged),
        "lost_writes": missing,
        "duplicate_ids": duplicates,
    }))


async def calls_per_second(url, token):
    """Calls/s of notes_search (a read of every note) by BENCH_CLIENTS clients at once."""
    done = 0
    connected = 0
    clock = {}
    ready = anyio.Event()

    async def one_client():
        nonlocal done, connected
        async with client(url, token) as c:
            stateless(c, url)
            connected += 1
            # The clock starts once every client is connected, so a round times calls only.
            if connected == BENCH_CLIENTS:
                clock["began"] = time.monotonic()
                clock["end"] = clock["began"] + BENCH_SECONDS
                ready.set()
            await ready.wait()
            while time.monotonic() < clock["end"]:
                result = await c.call_tool("notes_search", {"query": "bench"})
                if result.is_error:
                    raise SystemExit(f"notes_search through {url} failed: {text(result)}")
                done += 1

    async with anyio.create_task_group() as group:
        for _ in range(BENCH_CLIENTS):
            group.start_soon(one_client)
    return done / (time.monotonic() - clock["began"])


async def bench(token, three, one):
    async with client(three, token) as c:
        for n in range(BENCH_NOTES):
            added = await c.call_tool("notes_add", {"title": f"bench {n}", "text": "bench"})
            if added.is_error:
                raise SystemExit(f"notes_add through {three} failed: {text(added)}")
    rates = {"three": [], "one": []}
    # Alternating rounds, so the machine's noise falls on both alike.
    for _ in range(BENCH_ROUNDS):
        rates["three"].append(await calls_per_second(three, token))
        rates["one"].append(await calls_per_second(one, token))
    median = {k: statistics.median(v) for k, v in rates.items()}
    cores = len(os.sched_getaffinity(0))
    print(f"calls/s through nginx: {BENCH_CLIENTS} clients at once, {BENCH_ROUNDS} alternating rounds of "
          f"{BENCH_SECONDS:.0f} s, notes_search over {BENCH_NOTES} notes, MCP {STATELESS} (no session)")
    for k in ("three", "one"):
        print(f"  {k} replica{'s' if k == 'three' else ''}: median {median[k]:.0f} calls/s (rounds: "
              + ", ".join(f"{r:.0f}" for r in rates[k]) + ")")
    print(f"  three / one: {median['three'] / median['one']:.2f}x")
    print(f"  this machine has {cores} cores, shared by the replicas, nginx, PostgreSQL and the clients: "
          f"three replicas cannot beat one by much here; the figure that matters needs a core per replica")


def main():
    if len(sys.argv) == 8 and sys.argv[1] == "run":
        token, lb, one, two, three, victim = sys.argv[2:]
        anyio.run(run, token, lb, [one, two, three], int(victim))
    elif len(sys.argv) == 5 and sys.argv[1] == "bench":
        anyio.run(bench, *sys.argv[2:])
    else:
        raise SystemExit(__doc__)


main()
