"""The client side of tests/e2e/replicas.sh, with the Python MCP SDK in its 2026-07-28
(stateless) mode: every call is a request of its own, so nginx may send each to any replica.

    python replicas.py TOKEN LB_URL REPLICA1_URL REPLICA2_URL VICTIM_PID

1. notes_add through replica 1, notes_search for it through replica 2.
2. For about 6 s, one writer (notes_add, one at a time: the notes program takes its next
   id by a read and a write, so two adds at once could take the same id whatever the
   backend) and three readers (notes_list) call through nginx; after 2 s VICTIM_PID is
   killed with SIGKILL. Every call's outcome and time are kept.
3. notes_list through nginx: every id a notes_add answered with must be there.

Prints what happened, then one JSON line the script checks.
"""

import json
import os
import signal
import sys
import time
import uuid

import anyio
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

RUN_SECONDS = 6.0
KILL_AT = 2.0
# Calls still under way at the kill, or sent before nginx saw the replica gone, may fail (on
# a loaded 2-core machine that takes a while);
# after this long every call must succeed.
SETTLE = 2.0


def client(url, token):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    server = streamable_http_client(url, http_client=http)
    return Client(server, mode="auto", read_timeout_seconds=30, cache=None)


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "text", None) is not None)


BENCH_CLIENTS = 8
BENCH_ROUNDS = 6
BENCH_SECONDS = 3.0


async def calls_per_second(url, token):
    """Calls/s of notes_search (a read of every note) by BENCH_CLIENTS clients at once."""
    done = 0
    end = time.monotonic() + BENCH_SECONDS

    async def one_client():
        nonlocal done
        async with client(url, token) as c:
            while time.monotonic() < end:
                result = await c.call_tool("notes_search", {"query": "bench"})
                assert not result.is_error, text(result)
                done += 1

    async with anyio.create_task_group() as group:
        for _ in range(BENCH_CLIENTS):
            group.start_soon(one_client)
    return done / BENCH_SECONDS


async def bench(token, three, one):
    async with client(three, token) as c:
        for n in range(20):
            await c.call_tool("notes_add", {"title": f"bench {n}", "text": "bench"})
    rates = {"three": [], "one": []}
    # Alternating rounds, so the machine's noise falls on both alike.
    for _ in range(BENCH_ROUNDS):
        rates["three"].append(await calls_per_second(three, token))
        rates["one"].append(await calls_per_second(one, token))
    median = {k: sorted(v)[len(v) // 2] for k, v in rates.items()}
    cores = os.cpu_count()
    print(f"calls/s through nginx, {BENCH_CLIENTS} clients, {BENCH_ROUNDS} alternating rounds of "
          f"{BENCH_SECONDS:.0f} s, 2026-07-28 stateless notes_search, {cores} cores")
    for k in ("three", "one"):
        print(f"  {k} replica(s): median {median[k]:.0f} calls/s (rounds: "
              + ", ".join(f"{r:.0f}" for r in rates[k]) + ")")
    print(f"  three / one: {median['three'] / median['one']:.2f}x "
          f"(every replica, nginx, PostgreSQL and the clients share these {cores} cores)")


async def main():
    if "--bench" in sys.argv:
        token, three, one = sys.argv[1:4]
        await bench(token, three, one)
        return
    token, lb, one, two, victim = sys.argv[1:6]
    victim = int(victim)
    marker = f"written through replica 1 {uuid.uuid4()}"
    async with client(one, token) as c:
        protocol_version = c.protocol_version
        added = await c.call_tool("notes_add", {"title": "replicas", "text": marker})
        assert not added.is_error, text(added)
    async with client(two, token) as c:
        found = await c.call_tool("notes_search", {"query": marker})
        read_back = not found.is_error and marker in text(found)
    print(f"protocol {protocol_version}; written through replica 1, read through replica 2: {read_back}")

    outcomes = []  # (started, ended, tool, ok)
    why = []  # each failure, with when it started
    acknowledged = []
    start = time.monotonic()
    killed_at = None

    async def writer():
        async with client(lb, token) as c:
            n = 0
            while time.monotonic() - start < RUN_SECONDS:
                n += 1
                began = time.monotonic() - start
                try:
                    result = await c.call_tool("notes_add", {"title": f"load {n}", "text": "x"})
                    ok = not result.is_error
                    if ok:
                        acknowledged.append(json.loads(text(result))["id"])
                    else:
                        why.append(f"notes_add at {began:.2f} s: {text(result)}")
                except Exception as e:  # a 502 from nginx, a reset: the call failed
                    ok = False
                    why.append(f"notes_add at {began:.2f} s: {e!r}")
                outcomes.append((began, time.monotonic() - start, "notes_add", ok))

    async def reader():
        async with client(lb, token) as c:
            while time.monotonic() - start < RUN_SECONDS:
                began = time.monotonic() - start
                try:
                    result = await c.call_tool("notes_list", {})
                    ok = not result.is_error
                    if not ok:
                        why.append(f"notes_list at {began:.2f} s: {text(result)}")
                except Exception as e:
                    ok = False
                    why.append(f"notes_list at {began:.2f} s: {e!r}")
                outcomes.append((began, time.monotonic() - start, "notes_list", ok))

    async def killer():
        nonlocal killed_at
        await anyio.sleep(KILL_AT)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic() - start

    async with anyio.create_task_group() as group:
        group.start_soon(writer)
        for _ in range(3):
            group.start_soon(reader)
        group.start_soon(killer)

    async with client(lb, token) as c:
        listed = await c.call_tool("notes_list", {})
        assert not listed.is_error, text(listed)
        ids = [note["id"] for note in json.loads(text(listed))]
    lost = sorted(set(acknowledged) - set(ids))
    duplicates = sorted({i for i in acknowledged if acknowledged.count(i) > 1})
    in_flight = [o for o in outcomes if o[0] <= killed_at + SETTLE and o[1] >= killed_at]
    failed_at_kill = sum(1 for o in in_flight if not o[3])
    after = [o for o in outcomes if o[0] > killed_at + SETTLE]
    failed_before = sum(1 for o in outcomes if o[1] < killed_at and not o[3])
    print(
        f"{len(outcomes)} calls in {RUN_SECONDS} s ({len(acknowledged)} notes_add answered); "
        f"replica killed at {killed_at:.2f} s; {len(in_flight)} calls under way within "
        f"{SETTLE} s of it, {failed_at_kill} failed; {len(after)} calls after, "
        f"{sum(1 for o in after if not o[3])} failed; {failed_before} failed before"
    )
    for line in why:
        print(f"  failed: {line}")
    print(json.dumps({
        "protocol_version": protocol_version,
        "read_through_other_replica": read_back,
        "calls": len(outcomes),
        "failed_before_kill": failed_before,
        "failed_at_kill": failed_at_kill,
        "failed_after_kill_settled": sum(1 for o in after if not o[3]),
        "acknowledged_writes": len(acknowledged),
        "lost_writes": lost,
        "duplicate_ids": duplicates,
    }))


anyio.run(main)
