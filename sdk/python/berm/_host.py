"""What a berm host call's `err(error)` becomes in Python: a BermError with its code."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

T = TypeVar("T")


class BermError(Exception):
    """A host call that did not succeed: `code` is the WIT `error-code` (`denied`, `not-found`, ...)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def host_call(f: Callable[..., T], *args: Any) -> T:
    """Calls a generated import, turning the `Err(error)` it raises into a BermError."""
    from componentize_py_types import Err

    try:
        return f(*args)
    except Err as e:
        error = e.value
        raise BermError(getattr(error.code, "name", str(error.code)).lower().replace("_", "-"), error.message) from None
