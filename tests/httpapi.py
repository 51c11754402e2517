"""Requests to a test broker's management HTTP API (started with `start_broker(..., http=True)`),
with urllib: nothing between the test and the wire but the standard library."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

from tests.brokerproc import RunningBroker

GUEST = ("guest", "guest")


def call(
    broker: RunningBroker,
    method: str,
    path: str,
    body: object = None,
    *,
    auth: tuple[str, str] | None = GUEST,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, object]:
    """(status, decoded JSON body or None) of one request to the broker's API."""
    assert broker.http_port is not None
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{broker.http_port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, payload = error.code, error.read()
    return status, json.loads(payload) if payload else None
