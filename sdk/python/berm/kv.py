"""The program's own keyspace (`berm:program/kv`, grant `kv`): text or JSON by key.

Importing this module is what puts the kv import in the component (and in `berm inspect`).
"""

from __future__ import annotations

import json
from typing import Any

from berm._host import BermError, host_call

__all__ = ["BermError", "get", "get_bytes", "get_json", "set", "delete", "keys"]


def _kv() -> Any:
    from wit_world.imports import kv

    return kv


def get_bytes(key: str) -> bytes | None:
    """The bytes under `key`, or None."""
    return host_call(_kv().get, key)


def get(key: str) -> str | None:
    """The text under `key`, or None."""
    value = get_bytes(key)
    return None if value is None else value.decode()


def get_json(key: str) -> Any:
    """The JSON value under `key`, or None."""
    value = get(key)
    return None if value is None else json.loads(value)


def set(key: str, value: Any) -> None:  # noqa: A001 -- kv.set reads as the operation it is
    """Stores text, bytes, or (any other value) its JSON under `key`."""
    if isinstance(value, str):
        value = value.encode()
    elif not isinstance(value, (bytes, bytearray)):
        value = json.dumps(value).encode()
    host_call(_kv().put, key, bytes(value))


def delete(key: str) -> bool:
    """Removes `key`; whether it was there."""
    return host_call(_kv().delete, key)


def keys(prefix: str = "") -> list[str]:
    """The keys that start with `prefix`, sorted."""
    return host_call(_kv().list, prefix)
