"""A VM booted once per guest architecture for this module through the real `berm-vmm run`
(QEMU/TCG here, libkrun on hardware KVM; the aarch64 guest, the one a Mac boots, under
QEMU's emulation), with the notes app on vsock 5000 → rpc-0.sock."""

import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("BERM_BIN_DIR", ROOT / "target" / "debug"))
WASM = Path(os.environ.get("BERM_WASM_DIR", ROOT / "target" / "wasm32-unknown-unknown" / "release"))


class Vm:
    def __init__(self, tmp: Path, arch: str):
        self.app = tmp / "notes"
        self.app.mkdir()
        shutil.copy(WASM / "notes.wasm", self.app / "notes.wasm")
        (self.app / "berm.toml").write_text(
            'name = "notes"\n[[program]]\nname = "notes"\nwasm = "notes.wasm"\ngrants = ["kv"]\n'
        )
        self.run_dir = tmp / "run"
        self.lines = []
        self.proc = subprocess.Popen(
            [str(BIN / "berm-vmm"), "run", "--run-dir", str(self.run_dir), "--app", str(self.app),
             "--state", str(tmp / "state.img"), "--arch", arch],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, event, timeout=240):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for line in list(self.lines):
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if value.get("event") == event:
                    return value
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {event} line; berm-vmm said:\n{''.join(self.lines)}")

    @property
    def rpc(self) -> Path:
        return self.run_dir / "rpc-0.sock"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module", params=["x86_64", "aarch64"])
def vm(request, tmp_path_factory):
    machine = Vm(tmp_path_factory.mktemp(f"vm-{request.param}"), request.param)
    machine.wait_for("app_ready")
    yield machine
    machine.stop()
