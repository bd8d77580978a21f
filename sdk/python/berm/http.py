"""HTTP through bermd's egress (`berm:program/http`, grant `net=HOST`): only granted hosts, never
private addresses. `secret(NAME)` puts `{{secret:NAME}}` in a header or the body; bermd fills it
in only toward the host the secret is bound to (`berm secret`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from berm._host import BermError, host_call

__all__ = ["BermError", "Response", "secret", "request", "get", "post"]


def secret(name: str) -> str:
    """The placeholder bermd replaces with secret `name` toward its bound host only."""
    return "{{secret:" + name + "}}"


@dataclasses.dataclass
class Response:
    """The whole answer."""

    status: int
    headers: list[tuple[str, str]]
    content: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


def request(method: str, url: str, headers: dict[str, str] | None = None, body: bytes | str = b"") -> Response:
    """Sends a request and waits for the whole answer; a refused host raises BermError (`denied`)."""
    from wit_world.imports import http

    if isinstance(body, str):
        body = body.encode()
    r = host_call(http.fetch, http.Request(method=method, url=url, headers=list((headers or {}).items()), body=body))
    return Response(status=r.status, headers=list(r.headers), content=bytes(r.body))


def get(url: str, headers: dict[str, str] | None = None) -> Response:
    """GET `url`."""
    return request("GET", url, headers)


def post(url: str, json_body: Any = None, headers: dict[str, str] | None = None) -> Response:
    """POST `json_body` as JSON to `url`."""
    headers = {"content-type": "application/json", **(headers or {})}
    return request("POST", url, headers, json.dumps(json_body))
