#!/usr/bin/env python3
"""berm-build for Python: a berm program -> one WebAssembly component.

    python3 sdk/python/build.py APP.py -o OUT.wasm [--stub-wasi]

1. APP.py is imported once in this CPython, with the SDK on the path, to read the tools it
   registers: that is berm's manifest (the code is its only source);
2. componentize-py builds the component against a world holding `berm:program/tools` and only
   the berm interfaces the program imports (`berm.kv`, `berm.http`, `berm.log`), with
   CPython's usual WASI imports (stdout and stderr reach the program's log; clocks, random
   and files need their grants) or, with --stub-wasi, none;
3. the manifest is appended as the `berm.manifest` custom section (docs/components.md).
Builds are cached under $BERM_CACHE/components/builds by the content of what feeds them. The
toolchain (componentize-py in a venv) comes from scripts/setup-components or $BERM_PY_VENV.
Only the standard library is used here, so any python3 runs it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SDK = Path(__file__).resolve().parent
CHECKOUT = SDK.parent.parent
# A berm.* module the program imports -> the WIT interface it needs.
INTERFACES = {"berm.kv": "kv", "berm.http": "http", "berm.log": "log"}


def toolchain() -> Path:
    if os.environ.get("BERM_PY_VENV"):
        return Path(os.environ["BERM_PY_VENV"])
    setup = CHECKOUT / "scripts" / "setup-components"
    out = subprocess.run([str(setup)], check=True, stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        if line.startswith("BERM_PY_VENV="):
            return Path(line.split("=", 1)[1].strip("'"))
    raise SystemExit(f"berm-build: {setup} did not name the Python toolchain")


def cache_dir() -> Path:
    base = os.environ.get("BERM_CACHE") or str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "berm")
    return Path(base) / "components" / "builds"


def custom_section(name: str, data: bytes) -> bytes:
    """A custom section (id 0): size, name, data (docs/components.md)."""

    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    name_bytes = name.encode()
    body = leb(len(name_bytes)) + name_bytes + data
    return b"\x00" + leb(len(body)) + body


def read_program(app: Path) -> tuple[bytes, list[str]]:
    """Imports the app to read its manifest and the berm interfaces it uses."""
    sys.path[:0] = [str(SDK), str(app.parent)]
    spec = importlib.util.spec_from_file_location(app.stem, app)
    assert spec is not None and spec.loader is not None  # a .py path always has a loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[app.stem] = module
    spec.loader.exec_module(module)
    import berm

    manifest = json.dumps(berm.the_program().manifest(), separators=(",", ":")).encode()
    imports = sorted(iface for mod, iface in INTERFACES.items() if mod in sys.modules)
    return manifest, imports


def sources_digest(*dirs: Path) -> hashlib._Hash:
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(d.rglob("*.py")):
            if "__pycache__" in f.parts or ".venv" in f.parts:
                continue
            h.update(str(f.relative_to(d)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h


def main() -> None:
    parser = argparse.ArgumentParser(description="Build a Python berm program into a WebAssembly component.")
    parser.add_argument("app", type=Path, help="the program's module (APP.py)")
    parser.add_argument("-o", "--out", type=Path, required=True, help="the component to write")
    parser.add_argument("--stub-wasi", action="store_true", help="no WASI imports at all (print goes nowhere)")
    args = parser.parse_args()
    app = args.app.resolve()
    if app.suffix != ".py" or not app.is_file():
        raise SystemExit(f"berm-build: {args.app} is not a Python file")
    if app.stem in ("berm", "wit_world", "berm_entry"):
        raise SystemExit(f"berm-build: name the program's module something other than {app.stem}.py")
    manifest, imports = read_program(app)

    wit = Path(os.environ.get("BERM_WIT_DIR") or CHECKOUT / "wit") / "program.wit"
    world = "\n".join(
        ["package berm-build:app;", "world app {", "  include berm:program/tool@1.0.0;"]
        + [f"  import berm:program/{i}@1.0.0;" for i in imports]
        + ["}", ""]
    )
    venv = toolchain()
    h = sources_digest(SDK / "berm", app.parent)
    h.update(json.dumps([str(venv), args.stub_wasi, world, app.stem]).encode())
    h.update(wit.read_bytes() + manifest)
    cached = cache_dir() / f"py-{h.hexdigest()}.wasm"
    if not cached.exists():
        with tempfile.TemporaryDirectory(prefix="berm-build-") as tmp:
            work = Path(tmp)
            (work / "wit" / "deps" / "berm").mkdir(parents=True)
            shutil.copy(wit, work / "wit" / "deps" / "berm" / "program.wit")
            (work / "wit" / "app.wit").write_text(world)
            (work / "entry").mkdir()
            (work / "entry" / "berm_entry.py").write_text(
                f"import {app.stem}  # noqa: F401 -- registers the tools\nfrom berm._export import Tools, WitWorld  # noqa: F401\n"
            )
            out = work / "program.wasm"
            cmd = [str(venv / "bin" / "componentize-py"), "-q", "-d", str(work / "wit"), "-w", "app", "componentize"]
            cmd += ["-p", str(work / "entry"), "-p", str(app.parent), "-p", str(SDK)]
            if args.stub_wasi:
                cmd.append("--stub-wasi")
            cmd += ["-o", str(out), "berm_entry"]
            # No site-packages of any venv in the component: only the app, the SDK and the stdlib.
            env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
            subprocess.run(cmd, check=True, env=env, cwd=work)
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp_out = cached.with_suffix(f".{os.getpid()}")
            tmp_out.write_bytes(out.read_bytes() + custom_section("berm.manifest", manifest))
            tmp_out.replace(cached)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached, args.out)
    tools = ", ".join(t["name"] for t in json.loads(manifest)["tools"])
    print(
        f"berm-build: {args.out} ({args.out.stat().st_size} bytes; tools: {tools}; "
        f"imports: {', '.join(f'berm:program/{i}@1.0.0' for i in imports) or 'none'}; wasi: {'none' if args.stub_wasi else 'cpython'})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
