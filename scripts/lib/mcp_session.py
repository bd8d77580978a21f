"""A small MCP client over a command's stdio (newline-delimited JSON-RPC), for scripts/demo.

It launches the bridge a harness would launch (`berm mcp --socket rpc-0.sock`), initializes,
and runs the steps named on its command line, printing what a person should see:

    python3 mcp_session.py BERM RPC_SOCKET list add:TITLE:TEXT notes

`list` prints the served tools, `add:TITLE:TEXT` adds a note, `notes` prints the notes. Exit
status 1 with the server's words when a step fails. Only the standard library: the demo
must run before any test client is installed.
"""

import json
import subprocess
import sys


class Session:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.next_id = 0

    def request(self, method, params=None):
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"mcp: the server closed the stream during {method}")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    sys.exit(f"mcp: {method} failed: {reply['error'].get('message')}")
                return reply["result"]
            # Notifications (e.g. logging) are not this request's answer.

    def notify(self, method):
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def tool_named(tools, program, tool):
    """The served name of PROGRAM's TOOL, whatever separator bermd serves names with."""
    for name in tools:
        if name.startswith(program) and name.endswith(tool) and len(name) - len(program) - len(tool) <= 2:
            return name
    sys.exit(f"mcp: no tool {tool} of {program} among {', '.join(tools)}")


def text_of(result):
    return "".join(part.get("text", "") for part in result.get("content", []))


def main():
    berm, socket, *steps = sys.argv[1:]
    session = Session([berm, "mcp", "--socket", socket])
    init = session.request("initialize", {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "berm-demo", "version": "1"},
    })
    session.notify("notifications/initialized")
    print(f"  initialized: {init['serverInfo']['name']} {init['serverInfo'].get('version', '')}, "
          f"protocol {init['protocolVersion']}")
    tools = [t["name"] for t in session.request("tools/list")["tools"]]
    for step in steps:
        if step == "list":
            print(f"  tools/list: {', '.join(tools)}")
        elif step.startswith("add:"):
            _, title, text = step.split(":", 2)
            name = tool_named(tools, "notes", "add")
            result = session.request("tools/call", {"name": name, "arguments": {"title": title, "text": text}})
            if result.get("isError"):
                sys.exit(f"mcp: {name} failed: {text_of(result)}")
            print(f"  tools/call {name} -> {text_of(result)}")
        elif step == "notes":
            name = tool_named(tools, "notes", "list")
            result = session.request("tools/call", {"name": name, "arguments": {}})
            if result.get("isError"):
                sys.exit(f"mcp: {name} failed: {text_of(result)}")
            print(f"  tools/call {name} -> {text_of(result)}")
        else:
            sys.exit(f"mcp: unknown step {step}")
    session.close()


if __name__ == "__main__":
    main()
