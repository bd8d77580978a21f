"""Lines in bermd's log (`berm:program/log`, grant `log`). `print` reaches the log too, through
WASI stdout, with no grant."""

from __future__ import annotations


def _write(level: str, message: str) -> None:
    from wit_world.imports import log

    log.write(getattr(log.Level, level.upper()), message)


def error(message: str) -> None:
    _write("error", message)


def warn(message: str) -> None:
    _write("warn", message)


def info(message: str) -> None:
    _write("info", message)


def debug(message: str) -> None:
    _write("debug", message)
