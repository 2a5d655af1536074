"""Loopback fakes of the platforms the gateway talks to.

* :class:`FakeHttpServer` — a tiny HTTP/1.1 server on 127.0.0.1 whose handler
  can answer, stall (long polling) or drop the connection without a word.
* :class:`FakeTelegram` — the Bot API's ``getUpdates`` / ``sendMessage``.
* :class:`FakeDiscord` — the gateway websocket (hello, identify, resume,
  heartbeats, dispatches) and the REST ``create message`` endpoint.
* :class:`FakeTwitch` — Twitch IRC over a websocket.

Each records what the adapter sent, with timestamps, and can be told to
misbehave (429s, dropped connections, missing heartbeat ACKs).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

DROP = object()
"""Handler answer: close the connection without a response."""


class HttpRequest:
    """One request as the fake saw it."""

    def __init__(self, method: str, target: str, headers: dict[str, str], body: bytes) -> None:
        parts = urlsplit(target)
        self.method = method
        self.path = parts.path
        self.query = dict(parse_qsl(parts.query))
        self.headers = headers
        self.body = body
        self.at = time.monotonic()
        self.failed_with: int | None = None  # the status of a scripted failure it got

    def json(self) -> Any:
        return json.loads(self.body or b"null")


class HttpResponse:
    def __init__(self, status: int, body: Any = None, headers: dict[str, str] | None = None):
        self.status = status
        self.body = body
        self.headers = headers or {}


Handler = Callable[[HttpRequest], Awaitable[Any]]


class FakeHttpServer:
    """HTTP/1.1 on 127.0.0.1 with keep-alive; ``handler`` returns an
    :class:`HttpResponse` or :data:`DROP`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[HttpRequest] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> FakeHttpServer:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:
            _, late = await asyncio.wait(set(self._tasks), timeout=5)
            for task in late:
                task.cancel()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    raw = await reader.readline()
                    if raw in (b"\r\n", b"\n", b""):
                        break
                    key, _, value = raw.decode("latin-1").partition(":")
                    headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = HttpRequest(method, target, headers, body)
                self.requests.append(request)
                response = await self.handler(request)
                if response is DROP:
                    writer.transport.abort()
                    return
                assert isinstance(response, HttpResponse)
                payload = response.body
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                head = [f"HTTP/1.1 {response.status} X", f"content-length: {len(data)}",
                        "content-type: application/json"]
                head += [f"{k}: {v}" for k, v in response.headers.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            # Only close() cancels us; ending quietly keeps asyncio's stream callback from
            # logging the cancellation as an error.
            return
        finally:
            self._writers.discard(writer)
            self._tasks.discard(task)
            writer.close()


# ---------------------------------------------------------------------------
# Telegram
# ---------------------------------------------------------------------------


class FakeTelegram:
    """The Bot API at ``<url>/bot<token>/<method>``: getUpdates (long polling) and sendMessage."""

    def __init__(self, token: str, *, max_wait_s: float = 0.5) -> None:
        self.token = token
        self.max_wait_s = max_wait_s
        self.http = FakeHttpServer(self._handle)
        self.updates: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []  # {"chat_id", "text", "at"}
        self.send_attempts: list[HttpRequest] = []
        self.polls: list[HttpRequest] = []
        self.webhooks: list[dict[str, Any]] = []  # the setWebhook calls' bodies
        self.send_failures: list[HttpResponse] = []  # answered, in order, before succeeding
        self.poll_failures: list[HttpResponse] = []  # the same, for getUpdates
        self.too_long: list[str] = []  # texts refused as over the 4096-unit limit
        self.drop_polls = 0
        self.fail_polls = 0
        self._ids = itertools.count(1000)
        self._new = asyncio.Event()

    async def start(self) -> FakeTelegram:
        await self.http.start()
        return self

    async def close(self) -> None:
        self._new.set()  # release pending long polls
        await self.http.close()

    @property
    def url(self) -> str:
        return self.http.url

    def push(self, chat_id: int, user_id: int, text: str | None, *, is_bot: bool = False,
             kind: str = "message") -> int:
        update_id = next(self._ids)
        message: dict[str, Any] = {
            "message_id": update_id,
            "from": {"id": user_id, "is_bot": is_bot, "first_name": "U"},
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
            "date": int(time.time()),
        }
        if text is not None:
            message["text"] = text
        else:
            message["photo"] = [{"file_id": "x"}]
        self.updates.append({"update_id": update_id, kind: message})
        self._new.set()
        return update_id

    def texts_to(self, chat_id: int) -> list[str]:
        return [m["text"] for m in self.sent if m["chat_id"] == chat_id]

    async def _handle(self, request: HttpRequest) -> Any:
        prefix = f"/bot{self.token}/"
        if not request.path.startswith(prefix):
            return HttpResponse(401, {"ok": False, "error_code": 401,
                                      "description": "Unauthorized"})
        method = request.path[len(prefix):]
        if method == "getUpdates":
            return await self._get_updates(request)
        if method == "setWebhook":
            self.webhooks.append(request.json())
            return HttpResponse(200, {"ok": True, "result": True})
        if method == "sendMessage":
            self.send_attempts.append(request)
            if self.send_failures:
                return self.send_failures.pop(0)
            body = request.json()
            # Like the real Bot API: at most 4096 UTF-16 code units (an emoji counts two).
            if len(body["text"].encode("utf-16-le", "surrogatepass")) // 2 > 4096:
                self.too_long.append(body["text"])
                return HttpResponse(400, {"ok": False, "error_code": 400,
                                          "description": "Bad Request: message is too long"})
            self.sent.append({"chat_id": body["chat_id"], "text": body["text"], "at": request.at})
            return HttpResponse(200, {"ok": True, "result": {"message_id": len(self.sent)}})
        return HttpResponse(404, {"ok": False, "error_code": 404, "description": "Not Found"})

    async def _get_updates(self, request: HttpRequest) -> Any:
        self.polls.append(request)
        if self.poll_failures:
            failure = self.poll_failures.pop(0)
            request.failed_with = failure.status
            return failure
        if self.drop_polls > 0:
            self.drop_polls -= 1
            return DROP
        if self.fail_polls > 0:
            self.fail_polls -= 1
            return HttpResponse(502, {"ok": False, "error_code": 502, "description": "Bad Gateway"})
        offset = int(request.query.get("offset", "0"))
        # An offset confirms (and forgets) every earlier update, as the real API does.
        self.updates = [u for u in self.updates if u["update_id"] >= offset]
        timeout = min(float(request.query.get("timeout", "0")), self.max_wait_s)
        if not self.updates and timeout > 0:
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._new.wait()
        return HttpResponse(200, {"ok": True, "result": list(self.updates)})


# ---------------------------------------------------------------------------
# Discord
# ---------------------------------------------------------------------------

BOT_ID = "900000000000000001"


class FakeDiscord:
    """The Discord gateway (websocket) and REST API, on loopback."""

    def __init__(self, token: str, *, heartbeat_ms: int = 30_000) -> None:
        # A short interval makes a loaded machine miss ACKs and reconnect on its own
        # (a "zombie"), so only the heartbeat tests ask for one.
        self.token = token
        self.heartbeat_ms = heartbeat_ms
        self.ack_heartbeats = True
        self.allow_resume = True
        self.rest = FakeHttpServer(self._rest)
        self.ws: ServerConnection | None = None
        self.connections = 0
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats: list[Any] = []
        self.posted: list[dict[str, Any]] = []  # {"channel", "content", "headers", "body", "at"}
        self.post_attempts: list[HttpRequest] = []
        self.post_failures: list[HttpResponse] = []
        self.session_id: str | None = None
        self.seq = 0
        self.events: list[dict[str, Any]] = []
        self._server: Any = None
        self._sessions = itertools.count(1)
        self._message_ids = itertools.count(5000)
        self.ready = asyncio.Event()

    async def start(self) -> FakeDiscord:
        await self.rest.start()
        # No keepalive pings: websockets draws their payloads from the global `random`,
        # and a hypothesis test drawing examples in another thread meanwhile (the
        # gateway abuse test) is told its strategies used `random`.
        self._server = await serve(self._gateway, "127.0.0.1", 0, ping_interval=None)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.rest.close()

    @property
    def gateway_url(self) -> str:
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}/?v=10&encoding=json"

    @property
    def api_url(self) -> str:
        return f"{self.rest.url}/api/v10"

    def contents_to(self, channel: str) -> list[str]:
        return [p["content"] for p in self.posted if p["channel"] == channel]

    async def _send(self, payload: dict[str, Any]) -> None:
        if self.ws is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(json.dumps(payload))

    async def dispatch(self, event: str, data: dict[str, Any]) -> int:
        self.seq += 1
        payload = {"op": 0, "t": event, "s": self.seq, "d": data}
        self.events.append(payload)
        await self._send(payload)
        return self.seq

    async def message(self, channel: str, author: str, content: str, *, guild: str | None = "g1",
                      mention: bool = False, bot: bool = False) -> int:
        data: dict[str, Any] = {
            "id": str(next(self._message_ids)),
            "channel_id": channel,
            "author": {"id": author, "username": f"user{author}", "bot": bot},
            "content": (f"<@{BOT_ID}> " if mention else "") + content,
            "mentions": [{"id": BOT_ID, "username": "lich"}] if mention else [],
        }
        if guild is not None:
            data["guild_id"] = guild
        return await self.dispatch("MESSAGE_CREATE", data)

    async def send_op(self, op: int, d: Any = None) -> None:
        await self._send({"op": op, "d": d})

    def drop(self) -> None:
        """Cut the TCP connection without a close frame (the client sees 1006)."""
        if self.ws is not None:
            self.ws.transport.abort()

    async def close_with(self, code: int, reason: str = "") -> None:
        if self.ws is not None:
            await self.ws.close(code, reason)

    async def _gateway(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.connections += 1
        self.ready.clear()
        await ws.send(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_ms}}))
        try:
            async for raw in ws:
                payload = json.loads(raw)
                op = payload.get("op")
                if op == 1:
                    self.heartbeats.append(payload.get("d"))
                    if self.ack_heartbeats:
                        await ws.send(json.dumps({"op": 11}))
                elif op == 2:
                    self.identifies.append(payload["d"])
                    self.session_id = f"session-{next(self._sessions)}"
                    port = self._server.sockets[0].getsockname()[1]
                    await self.dispatch("READY", {
                        "v": 10, "session_id": self.session_id,
                        "resume_gateway_url": f"ws://127.0.0.1:{port}",
                        "user": {"id": BOT_ID, "username": "lich", "bot": True},
                    })
                    self.ready.set()
                elif op == 6:
                    self.resumes.append(payload["d"])
                    d = payload["d"]
                    if self.allow_resume and d.get("session_id") == self.session_id:
                        # Replay what the client missed (a snapshot: dispatches made
                        # meanwhile go out live and must not be sent twice).
                        for event in list(self.events):
                            if event["s"] > d.get("seq", 0) and event["t"] != "READY":
                                await ws.send(json.dumps(event))
                        await self.dispatch("RESUMED", {})
                        self.ready.set()
                    else:
                        await ws.send(json.dumps({"op": 9, "d": False}))
        except ConnectionClosed:
            pass
        finally:
            if self.ws is ws:
                self.ws = None

    async def _rest(self, request: HttpRequest) -> Any:
        parts = request.path.split("/")
        # /api/v10/channels/<id>/messages
        if request.method != "POST" or len(parts) != 6 or parts[3] != "channels":
            return HttpResponse(404, {"message": "404: Not Found", "code": 0})
        if request.headers.get("authorization") != f"Bot {self.token}":
            return HttpResponse(401, {"message": "401: Unauthorized", "code": 0})
        self.post_attempts.append(request)
        if self.post_failures:
            return self.post_failures.pop(0)
        body = request.json()
        self.posted.append({"channel": parts[4], "content": body["content"], "body": body,
                            "headers": request.headers, "at": request.at})
        return HttpResponse(200, {"id": str(len(self.posted)), "channel_id": parts[4],
                                  "content": body["content"]})


# ---------------------------------------------------------------------------
# Twitch
# ---------------------------------------------------------------------------


class FakeTwitch:
    """Twitch IRC over a websocket: welcomes, joins, pings, and records PRIVMSGs."""

    def __init__(self) -> None:
        self.ws: ServerConnection | None = None
        self.connections = 0
        self.lines: list[str] = []  # every line the client sent, in order
        self.connection_lines: list[list[str]] = []
        self.privmsgs: list[dict[str, Any]] = []  # {"channel", "text", "at"}
        self.pongs: list[str] = []
        self.nick = ""
        self._server: Any = None
        self._ids = itertools.count(1)

    async def start(self) -> FakeTwitch:
        self._server = await serve(self._handler, "127.0.0.1", 0, ping_interval=None)  # as above
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def texts_to(self, channel: str) -> list[str]:
        return [p["text"] for p in self.privmsgs if p["channel"] == channel]

    async def send_line(self, line: str) -> None:
        if self.ws is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(line + "\r\n")

    async def say(self, channel: str, nick: str, text: str, *, user_id: str = "") -> None:
        tags = (f"@badge-info=;color=#FF0000;display-name={nick.capitalize()};"
                f"id=msg-{next(self._ids)};user-id={user_id or abs(hash(nick)) % 10**6}")
        prefix = f"{nick}!{nick}@{nick}.tmi.twitch.tv"
        await self.send_line(f"{tags} :{prefix} PRIVMSG #{channel} :{text}")

    async def ping(self) -> None:
        await self.send_line("PING :tmi.twitch.tv")

    def drop(self) -> None:
        if self.ws is not None:
            self.ws.transport.abort()

    async def _handler(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.connections += 1
        mine: list[str] = []
        self.connection_lines.append(mine)
        try:
            async for frame in ws:
                text = frame if isinstance(frame, str) else frame.decode()
                for line in text.split("\r\n"):
                    if not line:
                        continue
                    self.lines.append(line)
                    mine.append(line)
                    await self._on_line(ws, line)
        except ConnectionClosed:
            pass
        finally:
            if self.ws is ws:
                self.ws = None

    async def _on_line(self, ws: ServerConnection, line: str) -> None:
        if line.startswith("CAP REQ"):
            await ws.send(":tmi.twitch.tv CAP * ACK :twitch.tv/tags twitch.tv/commands\r\n")
        elif line.startswith("NICK "):
            self.nick = line[5:].strip()
            await ws.send(f":tmi.twitch.tv 001 {self.nick} :Welcome, GLHF!\r\n"
                          f":tmi.twitch.tv 376 {self.nick} :>\r\n")
        elif line.startswith("JOIN #"):
            channel = line[6:].strip()
            nick = self.nick
            await ws.send(f":{nick}!{nick}@{nick}.tmi.twitch.tv JOIN #{channel}\r\n")
        elif line.startswith("PONG"):
            self.pongs.append(line)
        elif line.startswith("PRIVMSG #"):
            target, _, text = line[len("PRIVMSG #"):].partition(" :")
            self.privmsgs.append({"channel": target, "text": text, "at": time.monotonic()})
