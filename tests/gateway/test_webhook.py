"""The webhook platform end to end: real uvicorn on 127.0.0.1, real HTTP requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from lich.events import EVENT_SCHEMA_VERSION
from lich.gateway.registry import GatewayError
from lich.gateway.runner import GatewayRunner
from lich.gateway.webhook import is_loopback
from lich.testing import async_wait_for

from .conftest import NOTES, GatedChat

TOKEN = "s3cret-token-value"


async def _webhook(start_gateway: Callable[..., Any], **kwargs: Any) -> tuple[GatewayRunner, str]:
    gateway = {"webhook": {"port": 0}, **kwargs.pop("gateway", {})}
    runner = await start_gateway(["webhook"], gateway, **kwargs)
    return runner, f"http://127.0.0.1:{runner.adapter('webhook').port}"


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


async def test_message_runs_the_agent_with_a_tool(start_gateway: Any, client: httpx.AsyncClient):
    runner, url = await _webhook(start_gateway)
    response = await client.post(f"{url}/message",
                                 json={"text": "read notes.txt", "chat_id": "c1", "user_id": "u"})
    assert response.status_code == 200
    body = response.json()
    assert body["reply"] == f"the file says: {NOTES.strip()}"
    assert runner.bus is not None
    assert body["session_id"] == runner.bus.session_id_for("webhook", "c1")
    assert body["usage"]["total_tokens"] > 0
    assert set(body) == {"reply", "usage", "session_id"}
    # The read-only gateway toolset: read_file is offered, write_file is not.
    offered = runner.chat.requests[0].tools  # type: ignore[union-attr]
    assert "read_file" in offered
    assert "write_file" not in offered
    assert "terminal" not in offered


async def test_health(start_gateway: Any, client: httpx.AsyncClient):
    _, url = await _webhook(start_gateway)
    response = await client.get(f"{url}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_the_platform_is_not_chosen_by_the_client(start_gateway: Any,
                                                       client: httpx.AsyncClient):
    runner, url = await _webhook(start_gateway)
    response = await client.post(f"{url}/message",
                                 json={"text": "hi", "chat_id": "7", "platform": "telegram"})
    bus = runner.bus
    assert bus is not None
    assert response.json()["session_id"] == bus.session_id_for("webhook", "7")


@pytest.mark.parametrize(
    ("headers", "content", "status", "error"),
    [
        ({"content-type": "application/json"}, b"{not json", 400, "invalid JSON"),
        ({"content-type": "application/json"}, b'["a list"]', 400, "JSON object"),
        ({"content-type": "application/json"}, b'{"chat_id": "x"}', 400, "text is required"),
        ({"content-type": "application/json"}, b'{"text": 5}', 400, "text must be a string"),
        ({"content-type": "application/json"}, b'{"text": "  "}', 400, "must not be empty"),
        ({"content-type": "application/json"}, b'{"text": "x", "chat_id": [1]}', 400, "chat_id"),
        ({"content-type": "text/plain"}, b'{"text": "hi"}', 415, "application/json"),
        ({}, b'{"text": "hi"}', 415, "application/json"),
        ({"content-type": "application/json"}, b'{"text": "' + b"a" * (2 * 1024 * 1024) + b'"}',
         413, "too large"),
    ],
    ids=["malformed", "not-object", "no-text", "text-type", "blank", "chat-id", "text-plain",
         "no-content-type", "2MB"],
)
async def test_bad_inputs_get_4xx_json_and_the_server_keeps_serving(
    start_gateway: Any, client: httpx.AsyncClient, headers: dict[str, str], content: bytes,
    status: int, error: str,
):
    runner, url = await _webhook(start_gateway)
    for path in ("/message", "/message/stream"):
        response = await client.post(f"{url}{path}", content=content, headers=headers)
        assert response.status_code == status, response.text
        assert error in response.json()["error"]
    assert runner.chat.requests == []  # type: ignore[union-attr]
    ok = await client.post(f"{url}/message", json={"text": "still here?"})
    assert ok.status_code == 200
    assert ok.json()["reply"].startswith("you said: still here?")


async def test_a_chunked_body_over_the_cap_is_cut_off(start_gateway: Any,
                                                      client: httpx.AsyncClient):
    _, url = await _webhook(start_gateway)

    async def body() -> AsyncIterator[bytes]:
        yield b'{"text": "'
        for _ in range(40):
            yield b"a" * 65536  # 2.5 MB in all, with no content-length to trust
        yield b'"}'

    response = await client.post(f"{url}/message", content=body(),
                                 headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert (await client.get(f"{url}/health")).status_code == 200


async def test_token_is_required_when_set(start_gateway: Any, client: httpx.AsyncClient):
    _, url = await _webhook(start_gateway, env={"LICH_GATEWAY_TOKEN": TOKEN})
    payload = {"text": "hi"}
    for headers in ({}, {"x-lich-token": "wrong"}, {"x-lich-token": TOKEN[:-1]},
                    {"authorization": f"Basic {TOKEN}"}, {"authorization": "Bearer nope"}):
        response = await client.post(f"{url}/message", json=payload, headers=headers)
        assert response.status_code == 401, headers
        assert response.json() == {"error": "unauthorized"}
    for headers in ({"x-lich-token": TOKEN}, {"authorization": f"Bearer {TOKEN}"}):
        response = await client.post(f"{url}/message", json=payload, headers=headers)
        assert response.status_code == 200, headers
    assert (await client.get(f"{url}/health")).status_code == 200  # health needs no token


async def test_the_token_env_var_name_is_configurable(start_gateway: Any,
                                                      client: httpx.AsyncClient):
    _, url = await _webhook(start_gateway, gateway={"webhook": {"port": 0, "token_env": "MY_TOK"}},
                            env={"MY_TOK": TOKEN})
    assert (await client.post(f"{url}/message", json={"text": "x"})).status_code == 401
    ok = await client.post(f"{url}/message", json={"text": "x"}, headers={"x-lich-token": TOKEN})
    assert ok.status_code == 200


async def test_refuses_a_public_bind_without_a_token(start_gateway: Any):
    with pytest.raises(GatewayError, match=r"no gateway platform could start.*refusing to bind"):
        await start_gateway(["webhook"], {"webhook": {"host": "0.0.0.0", "port": 0}})


def test_loopback_detection():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com", ""))


async def test_unknown_paths_and_methods(start_gateway: Any, client: httpx.AsyncClient):
    _, url = await _webhook(start_gateway)
    response = await client.get(f"{url}/nope")
    assert response.status_code == 404
    assert response.json() == {"error": "not found"}
    response = await client.get(f"{url}/message")
    assert response.status_code == 405
    assert response.json() == {"error": "method not allowed"}


async def test_stream_returns_the_runs_events(start_gateway: Any, client: httpx.AsyncClient):
    _, url = await _webhook(start_gateway)
    async with client.stream("POST", f"{url}/message/stream",
                             json={"text": "read notes.txt", "chat_id": "s"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = (await response.aread()).decode()
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    names = [name for name, _ in events]
    assert names[0] == "run_start"
    assert names[-1] == "reply"
    assert names[-2] == "run_end"
    tool_end = next(data for name, data in events if name == "tool_call_end")
    assert tool_end["call"]["name"] == "read_file"
    assert tool_end["result"]["ok"] is True
    assert all(data["v"] == EVENT_SCHEMA_VERSION and data["session_id"]
               for name, data in events if name != "reply")
    seqs = [data["seq"] for name, data in events if name != "reply"]
    assert seqs == sorted(seqs)
    assert events[-1][1]["reply"] == f"the file says: {NOTES.strip()}"


async def test_busy_conversation_gets_429(start_gateway: Any, client: httpx.AsyncClient):
    chat = GatedChat()
    _, url = await _webhook(start_gateway, chat=chat, gateway={"queue_limit": 1})
    held = asyncio.create_task(client.post(f"{url}/message", json={"text": "hold w"}))
    await async_wait_for(lambda: "hold w" in chat.started)
    busy = await client.post(f"{url}/message", json={"text": "more"})
    assert busy.status_code == 429
    assert busy.json()["error"].startswith("busy")
    chat.gate("w").set()
    assert (await held).status_code == 200


async def test_restart_resumes_the_conversation(start_gateway: Any, client: httpx.AsyncClient):
    first, url = await _webhook(start_gateway)
    await client.post(f"{url}/message", json={"text": "my name is Ada", "chat_id": "r"})
    await first.stop()
    _, url = await _webhook(start_gateway)
    response = await client.post(f"{url}/message", json={"text": "who?", "chat_id": "r"})
    assert response.json()["reply"] == "you said: who? | earlier: my name is Ada"


def test_listening_socket_is_tcp_so_asyncio_disables_nagle() -> None:
    # asyncio sets TCP_NODELAY on accepted connections only for sockets whose proto is TCP;
    # without it every keep-alive request stalled ~40 ms on a delayed ACK.
    import socket

    from lich.gateway.webhook import _bind

    sock = _bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


# --------------------------------------------------------------- Host and Origin


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8089", "192.0.2.7",
                                  "[2001:db8::1]:80", "localhost.evil.example", "127.0.0.1.nip.io"])
async def test_a_foreign_host_is_refused_before_any_run(start_gateway: Any,
                                                        client: httpx.AsyncClient, host: str):
    # DNS rebinding: a web page whose name now resolves to 127.0.0.1 sends its own name.
    runner, url = await _webhook(start_gateway)
    for method, path in (("POST", "/message"), ("POST", "/message/stream"), ("GET", "/health")):
        response = await client.request(method, f"{url}{path}", json={"text": "hi"},
                                         headers={"host": host})
        assert response.status_code == 421, (host, path, response.text)
        assert "allowed_hosts" in response.json()["error"]
    assert runner.chat.requests == []  # type: ignore[union-attr]


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST:8089", "127.0.0.1", "127.3.4.5:1",
                                  "[::1]:8089", "localhost."])
async def test_loopback_hosts_pass(start_gateway: Any, client: httpx.AsyncClient, host: str):
    _, url = await _webhook(start_gateway)
    response = await client.post(f"{url}/message", json={"text": "hi"}, headers={"host": host})
    assert response.status_code == 200, response.text


async def test_allowed_hosts_are_served_too(start_gateway: Any, client: httpx.AsyncClient):
    runner, url = await _webhook(
        start_gateway, gateway={"webhook": {"port": 0, "allowed_hosts": ["lich.internal"]}})
    ok = await client.post(f"{url}/message", json={"text": "hi"},
                           headers={"host": "LICH.internal.:8089", "origin": "http://lich.internal"})
    assert ok.status_code == 200, ok.text
    other = await client.post(f"{url}/message", json={"text": "hi"},
                              headers={"host": "other.internal"})
    assert other.status_code == 421
    assert len(runner.chat.requests) == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("headers", [
    {"origin": "https://evil.example"},
    {"origin": "null"},
    {"origin": "http://127.0.0.1.evil.example:8089"},
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "cross-site", "origin": "http://localhost:8089"},
], ids=["origin", "null-origin", "lookalike-origin", "fetch-site", "fetch-site-wins"])
async def test_cross_site_browser_requests_are_refused(start_gateway: Any,
                                                       client: httpx.AsyncClient,
                                                       headers: dict[str, str]):
    runner, url = await _webhook(start_gateway, env={"LICH_GATEWAY_TOKEN": TOKEN})
    response = await client.post(f"{url}/message", json={"text": "hi"},
                                 headers={**headers, "x-lich-token": TOKEN})
    assert response.status_code == 403, response.text
    assert response.json() == {"error": "cross-site requests are refused"}
    assert runner.chat.requests == []  # type: ignore[union-attr]


async def test_same_origin_browser_requests_pass(start_gateway: Any, client: httpx.AsyncClient):
    _, url = await _webhook(start_gateway)
    for headers in ({"origin": url, "sec-fetch-site": "same-origin"},
                    {"origin": "http://localhost:3000", "sec-fetch-site": "same-site"},
                    {"sec-fetch-site": "none"}):
        response = await client.post(f"{url}/message", json={"text": "hi"}, headers=headers)
        assert response.status_code == 200, (headers, response.text)


def test_a_public_bind_with_a_token_checks_hosts_only_when_listed() -> None:
    from lich.gateway.webhook import HostPolicy

    open_policy = HostPolicy(frozenset(), check_host=False)
    assert open_policy.refusal({"host": "gateway.example.com"}) is None
    # Same-origin from the machine's own name passes; a foreign page does not.
    assert open_policy.refusal({"host": "gw.example", "origin": "https://gw.example"}) is None
    assert open_policy.refusal({"host": "gw.example", "origin": "https://evil.example"}) == (
        403, "cross-site requests are refused")
    listed = HostPolicy(frozenset({"gw.example"}), check_host=True)
    assert listed.refusal({"host": "gw.example:443"}) is None
    assert listed.refusal({"host": "evil.example"})[0] == 421  # type: ignore[index]


def test_connection_guard_drops_the_oldest_unauthenticated_connection() -> None:
    from lich.gateway.webhook import ConnectionGuard

    class Conn:
        def __init__(self, port: int) -> None:
            self.client = ("127.0.0.1", port)
            self.closed = False
            self.transport = self

        def close(self) -> None:
            self.closed = True

    guard = ConnectionGuard(max_connections=3, max_unauthenticated=2)
    a, b, c, d, e = (Conn(p) for p in range(5))
    guard.opened(a)
    guard.authenticated(["127.0.0.1", 0])  # the ASGI scope gives a list or a tuple
    guard.opened(b)
    guard.opened(c)
    assert not any(x.closed for x in (a, b, c))
    guard.opened(d)  # a third unauthenticated one: the oldest (b) goes
    assert b.closed
    assert not c.closed
    assert not d.closed
    guard.authenticated(c.client)
    guard.authenticated(d.client)
    guard.opened(e)  # over max_connections with every other one authenticated: e goes
    assert e.closed
    assert not any(x.closed for x in (a, c, d))
    assert guard.dropped == 2


@pytest.mark.parametrize(("key", "problem"), [
    ("", "Idempotency-Key must not be empty"),
    # A C1 control (latin-1 obs-text to the HTTP parser, so it reaches the route).
    (b"a\x85b", "Idempotency-Key must be printable text"),
    ("k" * 257, "Idempotency-Key is longer than 256 characters"),
])
async def test_a_bad_idempotency_key_is_refused(start_gateway: Any, client: httpx.AsyncClient,
                                                key: str | bytes, problem: str):
    runner, url = await _webhook(start_gateway)
    response = await client.post(f"{url}/message", json={"text": "hi"},
                                 headers={"idempotency-key": key})
    assert response.status_code == 400
    assert response.json() == {"error": problem}
    assert runner.chat.requests == []  # type: ignore[union-attr]


async def test_a_control_character_in_a_header_is_a_json_400(start_gateway: Any,
                                                            client: httpx.AsyncClient):
    # DEL is no field-value character: httptools' parser refuses the request itself (h11
    # lets it through to the route, which refuses the key). Either way: 400, JSON, no run.
    runner, url = await _webhook(start_gateway)
    response = await client.post(f"{url}/message", json={"text": "hi"},
                                 headers={"idempotency-key": "a\x7fb"})
    assert response.status_code == 400
    assert response.json()["error"] in ("invalid HTTP request",
                                        "Idempotency-Key must be printable text")
    assert runner.chat.requests == []  # type: ignore[union-attr]


async def test_a_reply_slower_than_reply_timeout_is_fetched_from_its_status_url(
    start_gateway: Any, client: httpx.AsyncClient,
):
    chat = GatedChat()
    runner, url = await _webhook(start_gateway, chat=chat,
                                 gateway={"webhook": {"port": 0, "reply_timeout_s": 0.1},
                                          "platforms": ["webhook"]},
                                 env={"LICH_GATEWAY_TOKEN": TOKEN})
    auth = {"x-lich-token": TOKEN}
    response = await client.post(f"{url}/message", json={"text": "hold slow", "chat_id": "s"},
                                 headers=auth)
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "accepted"
    assert body["session_id"] == runner.bus.session_id_for("webhook", "s")  # type: ignore[union-attr]
    status_url = f"{url}{body['status_url']}"
    assert response.headers["location"] == body["status_url"]
    assert (await client.get(status_url)).status_code == 401  # a reply is someone's
    pending = await client.get(status_url, headers=auth)
    assert (pending.status_code, pending.json()) == (202, {"status": "pending"})
    chat.gate("slow").set()

    async def answered() -> httpx.Response | None:
        r = await client.get(status_url, headers=auth)
        return r if r.status_code == 200 else None

    done = await async_wait_for(answered, what="the parked reply")
    assert done.json()["reply"].startswith("you said: hold slow")
    assert (await client.get(f"{url}/message/status/nope", headers=auth)).status_code == 404
