"""Fixtures for the real-client tests: a bermd of our own on a temporary
BERM_HOME, serving the Unix socket, `berm mcp` and Streamable HTTP (with the
token bermd makes into $BERM_HOME/http-token, as `berm http` prints it)."""

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("BERM_BIN_DIR", ROOT / "target" / "debug"))
WASM = Path(os.environ.get("BERM_WASM_DIR", ROOT / "target" / "wasm32-unknown-unknown" / "release"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bermd:
    """A running bermd and the CLI pointed at it."""

    def __init__(self, home: Path, port: int):
        self.home = home
        self.port = port
        self.metrics_port = free_port()
        self.env = {**os.environ, "BERM_HOME": str(home)}
        self.log = open(home.parent / "bermd.log", "wb")
        self.proc = subprocess.Popen(
            [str(BIN / "bermd"), "--http", f"127.0.0.1:{port}", "--metrics", f"127.0.0.1:{self.metrics_port}"],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        # http.json comes once HTTP is bound, after control.sock.
        while not (home / "http.json").exists() or not self._http_up():
            assert self.proc.poll() is None, "bermd exited early"
            assert time.monotonic() < deadline, "bermd did not come up"
            time.sleep(0.05)
        http = json.loads(self.berm("http", "--json").stdout)
        self.url = http["url"]
        # {"Authorization": "Bearer …"}: HTTP needs it even on loopback.
        self.headers = http["headers"]

    def _http_up(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
            return True
        except OSError:
            return False

    def berm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "berm"), *args], env=self.env, capture_output=True, text=True, check=check)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def bermd(tmp_path_factory):
    home = tmp_path_factory.mktemp("berm") / "home"
    daemon = Bermd(home, free_port())
    daemon.berm("deploy", "echo", str(WASM / "echo.wasm"))
    yield daemon
    daemon.stop()
