"""Drives Codex CLI's app server (`codex app-server`, JSON-RPC over stdio) the way its own UIs
do, to see how far Codex gets with berm without a model: Codex starts `berm mcp` from its
config, lists berm's tools (`mcpServerStatus/list`) and calls them (`mcpServer/tool/call`,
which needs a thread but no model or login).

    python3 codex_app_server.py SERVER TITLE

prints one JSON object: the tool names Codex listed, and the results of `notes_add` (a note
titled TITLE) and `notes_list`. Exits non-zero on a protocol error or a timeout.
"""

import json
import subprocess
import sys
import time

TIMEOUT_S = 60


class AppServer:
    def __init__(self):
        self.proc = subprocess.Popen(
            ["codex", "app-server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
            bufsize=1,
        )
        self.next_id = 0

    def notify(self, method):
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def request(self, method, params):
        """Sends a request and returns its result, skipping the notifications in between."""
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"codex app-server closed its output while {method} was pending")
            reply = json.loads(line)
            if reply.get("id") != self.next_id or "method" in reply:
                continue
            if "error" in reply:
                sys.exit(f"{method}: {reply['error']}")
            return reply["result"]
        sys.exit(f"{method}: no answer within {TIMEOUT_S} s")

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main():
    server, title = sys.argv[1], sys.argv[2]
    codex = AppServer()
    codex.request("initialize", {"clientInfo": {"name": "berm-e2e", "version": "0"}})
    codex.notify("initialized")
    statuses = codex.request("mcpServerStatus/list", {})["data"]
    status = next((s for s in statuses if s["name"] == server), None)
    if status is None:
        sys.exit(f"Codex has no MCP server named {server}: {statuses}")
    if status.get("toolsError"):
        sys.exit(f"Codex could not list {server}'s tools: {status['toolsError']}")
    thread = codex.request("thread/start", {})["thread"]["id"]

    def call(tool, arguments):
        params = {"server": server, "threadId": thread, "tool": tool, "arguments": arguments}
        return codex.request("mcpServer/tool/call", params)

    added = call("notes_add", {"title": title, "text": "written by Codex through berm"})
    listed = call("notes_list", {})
    codex.close()
    print(json.dumps({"tools": sorted(status["tools"]), "add": added, "list": listed}))


if __name__ == "__main__":
    main()
