"""The gateway under abuse: a real ``lich gateway`` process serving the webhook,
Telegram, Discord and Twitch at once (the platforms are the loopback fakes of
``tests/gateway/fakes.py``, the model a scripted server on 127.0.0.1), with the
whole plugin zoo loaded.

It gets: 1 000 requests with a wrong token; hypothesis-generated webhook bodies and
headers; oversized bodies (declared, streamed, lied about); slow clients that open
connections and trickle or never finish; and malformed Telegram updates, Discord
frames and Twitch lines. Between each wave a well-formed message on every platform
must be answered, the process must stay up without an internal error or a
traceback, and its resident memory must stay within a generous bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway.fakes import BOT_ID, FakeDiscord, FakeTelegram, FakeTwitch, HttpResponse
from gateway_process import gateway_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lich_env import lich_env

from lich.testing import Reply, ScriptedModel, ScriptedServer, ScriptRequest, async_wait_for
from lich.types import ToolCall

from .conftest import TALLY, scaled
from .test_plugin_zoo import ZOO, ZOO_ENTRIES

TOKEN = "gateway-secret-token"
TG_TOKEN = "123456:telegram-test-token"
DC_TOKEN = "discord-test-token"
TW_TOKEN = "oauth:twitchtesttoken"
TG_CHAT = 4242
DC_CHANNEL = "700000000000000001"
TW_CHANNEL = "lichchan"
RSS_GROWTH_BOUND = 150 * 1024 * 1024  # generous: only a leak per request reaches it


def respond(request: ScriptRequest) -> Reply:
    text = request.last_user()
    done = request.tool_results_since_user()
    if text == "zoo" and not done:
        return Reply(tool_calls=(ToolCall("z1", "zoo_echo", {"text": "before_raises"}),
                                 ToolCall("z2", "zoo_raises", {"text": "x"}),
                                 ToolCall("z3", "zoo_echo", {"text": "plain"})))
    if text == "zoo":
        return Reply(" | ".join(m.content for m in done))
    return Reply(f"echo: {text}")


class Gateway:
    """The gateway process, its stderr, and the fakes it talks to."""

    def __init__(self, process: asyncio.subprocess.Process, lines: list[str], port: int,
                 telegram: FakeTelegram, discord: FakeDiscord, twitch: FakeTwitch) -> None:
        self.process = process
        self.lines = lines
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.telegram = telegram
        self.discord = discord
        self.twitch = twitch
        self.probes = 0

    def rss(self) -> int:
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def alive(self) -> None:
        assert self.process.returncode is None, "\n".join(self.lines[-40:])

    async def probe(self, what: str) -> None:
        """A well-formed message on every platform, each answered."""
        self.alive()
        self.probes += 1
        tag = f"probe {self.probes} after {what}"
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(f"{self.url}/message", json={"text": tag, "chat_id": "ok"},
                                         headers={"x-lich-token": TOKEN})
        assert response.status_code == 200, (what, response.status_code, response.text)
        assert response.json()["reply"] == f"echo: {tag}"
        self.telegram.push(TG_CHAT, 1, tag)
        await self.discord.message(DC_CHANNEL, "1234", tag, mention=True)
        await self.twitch.say(TW_CHANNEL, "alice", tag)
        await async_wait_for(lambda: f"echo: {tag}" in self.telegram.texts_to(TG_CHAT), 30,
                             lambda: f"telegram to answer {tag!r}; stderr: {self.lines[-20:]}")
        await async_wait_for(lambda: f"echo: {tag}" in self.discord.contents_to(DC_CHANNEL), 30,
                             lambda: f"discord to answer {tag!r}; stderr: {self.lines[-20:]}")
        await async_wait_for(lambda: f"echo: {tag}" in self.twitch.texts_to(TW_CHANNEL), 30,
                             lambda: f"twitch to answer {tag!r}; stderr: {self.lines[-20:]}")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    model = ScriptedServer(ScriptedModel(responder=respond)).start()
    telegram = await FakeTelegram(TG_TOKEN, max_wait_s=0.2).start()
    discord = await FakeDiscord(DC_TOKEN, heartbeat_ms=500).start()
    twitch = await FakeTwitch().start()
    work = tmp_path / "work"
    (work / ".lich").mkdir(parents=True)
    backoff = "backoff_min_s = 0.01\nbackoff_max_s = 0.1\n"
    (work / ".lich" / "config.toml").write_text(
        # The zoo from the config: there a failing plugin is warned about (a --plugin
        # entry that fails would stop lich, by design).
        f"plugins = {json.dumps(['+' + e for e in ZOO_ENTRIES])}\n"
        "stream = false\nhook_timeout_s = 1\n"
        # The gateway denies every tool no rule allows (deny-unlisted): the zoo's are.
        "[approvals]\nallow = [\"zoo_*\"]\n"
        "[[providers]]\nkind = \"openai_compat\"\nname = \"scripted\"\nmodel = \"m\"\n"
        f"base_url = \"{model.base_url}\"\n"
        "[gateway]\nplatforms = [\"webhook\", \"telegram\", \"discord\", \"twitch\"]\n"
        "tools = \"all\"\nqueue_limit = 50\ngrace_s = 2\n"
        "[gateway.webhook]\nport = 0\nopen = true\n"
        f"[gateway.telegram]\nbase_url = \"{telegram.url}\"\nallowed_users = [\"*\"]\n"
        f"poll_timeout_s = 1\nsend_interval_s = 0\n{backoff}"
        f"[gateway.discord]\ngateway_url = \"{discord.gateway_url}\"\n"
        f"api_base_url = \"{discord.api_url}\"\nallowed_users = [\"*\"]\n"
        f"invalid_session_delay_s = 0.01\n{backoff}"
        f"[gateway.twitch]\nurl = \"{twitch.url}\"\nnick = \"lichbot\"\n"
        f"channels = [\"{TW_CHANNEL}\"]\nallowed_users = [\"*\"]\n"
        f"rate_limit_messages = 1000\n{backoff}",
        encoding="utf-8",
    )
    env = lich_env(tmp_path, LICH_GATEWAY_TOKEN=TOKEN, LICH_TELEGRAM_BOT_TOKEN=TG_TOKEN,
                   LICH_DISCORD_BOT_TOKEN=DC_TOKEN, LICH_TWITCH_OAUTH_TOKEN=TW_TOKEN)
    try:
        async with gateway_process(work, env) as gateway:
            lines = gateway.lines
            await async_wait_for(lambda: any("event=gateway_ready" in ln for ln in lines), 60,
                                 lambda: f"the gateway to be ready; stderr: {lines}")
            await async_wait_for(lambda: discord.ready.is_set(), 30, "discord READY")
            await async_wait_for(lambda: any(ln.startswith("JOIN #") for ln in twitch.lines),
                                 30, "twitch JOIN")
            yield Gateway(gateway.process, lines, gateway.port, telegram, discord, twitch)
    finally:
        await telegram.close()
        await discord.close()
        await twitch.close()
        model.stop()


# ------------------------------------------------------------------------- waves


async def wrong_tokens(gw: Gateway, count: int) -> None:
    variants: list[dict[str, str]] = [
        {}, {"x-lich-token": "wrong"}, {"authorization": "Bearer wrong"},
        {"authorization": f"Basic {TOKEN}"}, {"x-lich-token": TOKEN[:-1]},
        {"x-lich-token": TOKEN + "x"}, {"x-lich-token": "x" * 8000},
        {"authorization": "Bearer"}, {"x-lich-token": ""},
    ]
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client:
        gate = asyncio.Semaphore(20)

        async def one(i: int) -> int:
            async with gate:
                response = await client.post(
                    f"{gw.url}/message", json={"text": f"let me in {i}"},
                    headers=variants[i % len(variants)])
                return response.status_code

        statuses = await asyncio.gather(*(one(i) for i in range(count)))
    assert set(statuses) == {401}, sorted(set(statuses))
    TALLY["gateway wrong-token requests"] += count


HEADER_VALUE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(
    str.strip)  # a client cannot even send surrounding whitespace
CONTENT_TYPES = st.sampled_from([
    "application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/json; charset=latin-1", "", "application/jsonx", "*/*",
])
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)
MESSAGE_FIELDS = st.fixed_dictionaries({}, optional={
    "text": JSONISH | st.text(max_size=60), "chat_id": JSONISH | st.text(max_size=300),
    "user_id": JSONISH, "platform": st.sampled_from(["telegram", "discord", "twitch", 7]),
})
BODIES = (
    st.binary(max_size=300)
    | JSONISH.map(lambda v: json.dumps(v).encode())
    | MESSAGE_FIELDS.map(lambda v: json.dumps(v).encode())
    | MESSAGE_FIELDS.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "replace"))
)


def generated_requests(gw: Gateway) -> int:
    """Hypothesis-generated bodies and headers, sent with the right token (run in a
    thread: hypothesis drives a sync client)."""
    counted = 0
    statuses: dict[int, int] = {}

    client = httpx.Client(timeout=30)

    @settings(max_examples=scaled(80), deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(body=BODIES, content_type=CONTENT_TYPES, path=st.sampled_from(
               ["/message", "/message", "/message/stream", "/health", "/nope", "/message/"]),
           method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "DELETE", "PATCH"]),
           extra=st.dictionaries(st.from_regex(r"\Ax-[a-z]{1,12}\Z"), HEADER_VALUE, max_size=4))
    def send(body: bytes, content_type: str, path: str, method: str,
             extra: dict[str, str]) -> None:
        nonlocal counted
        headers = {**extra, "x-lich-token": TOKEN}
        if content_type:
            headers["content-type"] = content_type
        response = client.request(method, f"{gw.url}{path}", content=body, headers=headers)
        status = response.status_code
        statuses[status] = statuses.get(status, 0) + 1
        # 307: starlette's redirect of "/message/" to "/message".
        assert status in (200, 307, 400, 404, 405, 413, 415, 429), (
            status, method, path, body[:200], response.text[:300])
        if status != 200 or path == "/message/stream":
            return
        answer = response.json()
        assert set(answer) >= {"status"} if path == "/health" else {"reply", "session_id"}
        counted += 1

    with client:
        send()
    TALLY["gateway generated requests"] += scaled(80)
    return counted


async def oversized(gw: Gateway) -> None:
    cap = 1024 * 1024
    big = b'{"text": "' + b"x" * (2 * cap) + b'"}'
    headers = {"x-lich-token": TOKEN, "content-type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as client:
        declared = await client.post(f"{gw.url}/message", content=big, headers=headers)
        assert declared.status_code == 413, declared.text

        async def chunks() -> AsyncIterator[bytes]:
            for i in range(0, len(big), 64 * 1024):
                yield big[i:i + 64 * 1024]

        streamed = await client.post(f"{gw.url}/message", content=chunks(), headers=headers)
        assert streamed.status_code == 413, streamed.text
    # A content-length that lies, and a header block far beyond any sane size.
    for raw in (
        b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"x-lich-token: " + TOKEN.encode() + b"\r\ncontent-length: 999999999999\r\n\r\n{}",
        b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\nx-junk: " + b"j" * 200_000 + b"\r\n\r\n",
        b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: -5\r\n\r\n",
        b"GARBAGE\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello to a plain HTTP port
    ):
        await raw_exchange(gw.port, raw)
    TALLY["gateway oversized or malformed requests"] += 7


async def raw_exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        # The gateway may have refused the request and closed the connection already:
        # then the half-close fails, with ENOTCONN (an OSError, no ConnectionError) when
        # the peer's close came first. Either way the exchange is over.
        with contextlib.suppress(OSError):
            writer.write_eof()
        return await asyncio.wait_for(reader.read(65536), 10)
    except (ConnectionError, TimeoutError):
        return b""
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def slow_clients(gw: Gateway, count: int) -> None:
    """``count`` connections that never finish a request, open while the probes run."""
    sockets: list[socket.socket] = []
    head = (b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"x-lich-token: " + TOKEN.encode() + b"\r\ncontent-length: 100000\r\n\r\n")
    try:
        for i in range(count):
            sock = socket.create_connection(("127.0.0.1", gw.port))
            sock.setblocking(False)
            if i % 3 == 1:
                sock.send(b"POST /mess")  # a request line cut short
            elif i % 3 == 2:
                sock.send(head + b'{"text": "')  # a body that trickles, then stops
            sockets.append(sock)
        for _ in range(3):
            for sock in sockets[2::3]:
                with contextlib.suppress(OSError):
                    sock.send(b"a")
            await asyncio.sleep(0.05)
        await gw.probe("slow clients (still connected)")
    finally:
        for sock in sockets:
            sock.close()
    TALLY["gateway slow clients"] += count


async def malformed_telegram(gw: Gateway) -> int:
    """getUpdates answers with malformed updates in them, then answers that make no
    sense at all (served in place of the fake's own, which keeps well-formed state)."""
    fake = gw.telegram
    ids = fake._ids  # the fake's own counter: the offsets the adapter confirms stay in step
    shapes: list[Any] = [
        {"chat": {"id": TG_CHAT}, "from": {"id": 1}, "text": "/new@lich_bot and more"},
        "not an object", [], {"chat": "x", "from": [], "text": 5},
        {"chat": {"id": {"nested": 1}}, "from": {"id": 1}, "text": "hi"},
        {"chat": {"id": TG_CHAT}, "from": "nobody", "text": "from is a string"},
        {"chat": {"id": TG_CHAT}, "from": {"id": 1}, "text": ["a", "list"]},
        {"chat": {"id": TG_CHAT}, "from": {"id": 1, "is_bot": "yes"}, "text": "bot as str"},
        {"chat": {}, "from": {"id": 1}, "text": "no chat id"},
        {"chat": {"id": TG_CHAT}, "text": "no from"},
        {"chat": {"id": TG_CHAT}, "from": {"id": 1}, "text": "x" * 100_000},
        {"chat": {"id": TG_CHAT}, "from": {"id": 1}, "text": "nul \x00 and \ud800 surrogate"},
        {"chat": {"id": 1.5}, "from": {"id": True}, "text": "float chat"},
    ]
    updates: list[Any] = ["garbage", None, 5, [], {"update_id": "abc", "message": {"text": "x"}},
                          {"message": {"chat": {"id": TG_CHAT}, "from": {"id": 1},
                                       "text": "no update id"}}]
    for shape in shapes:
        updates.append({"update_id": next(ids), "message": shape})
        updates.append({"update_id": next(ids), "edited_message": shape})
    answers = [
        HttpResponse(200, {"ok": True, "result": updates}),
        HttpResponse(200, b"not json at all"), HttpResponse(200, {"ok": True, "result": {"a": 1}}),
        HttpResponse(200, {"ok": True}), HttpResponse(200, [1, 2, 3]),
        HttpResponse(200, {"ok": True, "result": [1, "x", None]}),
        HttpResponse(200, {"ok": False, "description": "nope"}), HttpResponse(200, b""),
        HttpResponse(200, {"ok": True, "result": "x" * 100_000}),
    ]
    count = len(updates) + len(answers) - 1
    original = fake._get_updates

    async def garbled(request: Any) -> Any:
        if answers:
            fake.polls.append(request)
            return answers.pop(0)
        return await original(request)

    fake._get_updates = garbled  # type: ignore[method-assign]
    try:
        await async_wait_for(
            lambda: not answers, 30,
            lambda: f"telegram to poll through the bad answers; stderr: {gw.lines[-20:]}")
    finally:
        fake._get_updates = original  # type: ignore[method-assign]
    return count


async def malformed_discord(gw: Gateway) -> int:
    fake = gw.discord
    ws = fake.ws
    assert ws is not None
    frames: list[Any] = [
        "not json", "[1, 2, 3]", "null", '"a string"', "{}", '{"op": "zero"}',
        '{"op": 0}', '{"op": 0, "t": "MESSAGE_CREATE", "s": "x", "d": null}',
        '{"op": 0, "t": "MESSAGE_CREATE", "s": 99999, "d": []}',
        '{"op": 12345, "d": {}}', '{"op": 11}', '{"op": 1, "d": "beat?"}',
        b"\x00\x01binary frame",
    ]
    data_shapes: list[Any] = [
        {}, {"channel_id": DC_CHANNEL}, {"channel_id": 5, "author": "me", "content": 7},
        {"channel_id": DC_CHANNEL, "author": {"id": None}, "content": "no author id"},
        {"channel_id": DC_CHANNEL, "author": {"id": "1", "bot": "no"}, "content": None,
         "mentions": "everyone"},
        {"channel_id": DC_CHANNEL, "author": {"id": "1"}, "content": f"<@{BOT_ID}> " + "y" * 50_000,
         "mentions": [{"id": BOT_ID}], "guild_id": "g1"},
        {"channel_id": DC_CHANNEL, "author": {"id": "1"}, "mentions": [None, 5, {"id": BOT_ID}],
         "content": f"<@{BOT_ID}> odd mentions", "guild_id": "g1"},
    ]
    for frame in frames:
        with contextlib.suppress(Exception):
            await ws.send(frame)
    for shape in data_shapes:
        await fake.dispatch("MESSAGE_CREATE", shape)
    await fake.dispatch("GUILD_CREATE", {"id": "g1", "channels": "lots"})
    await fake.dispatch("SOMETHING_NEW", None)
    return len(frames) + len(data_shapes) + 2


async def malformed_twitch(gw: Gateway) -> int:
    fake = gw.twitch
    lines = [
        "", ":", "PRIVMSG", "@@@", f":x PRIVMSG #{TW_CHANNEL}", "@bad;tags; :a!a@a PRIVMSG",
        f":mallory!mallory@x PRIVMSG #{TW_CHANNEL}", f"PRIVMSG #{TW_CHANNEL} :no prefix",
        f":a!a@a NOTPRIVMSG #{TW_CHANNEL} :x", ":a!a@a PRIVMSG #other :not our channel",
        f"@id=1 :a!a@a PRIVMSG #{TW_CHANNEL} :" + "z" * 20_000, "PING", "PING :",
        f":a!a@a PRIVMSG #{TW_CHANNEL} :nul\x00byte", "\t \t",
        f"@user-id=;display-name= :!@ PRIVMSG #{TW_CHANNEL} :empty sender",
        ":tmi.twitch.tv 421 lichbot WHO :Unknown command", ":tmi.twitch.tv USERNOTICE",
    ]
    for line in lines:
        await fake.send_line(line)
    ws = fake.ws
    if ws is not None:
        with contextlib.suppress(Exception):
            await ws.send(b"\xff\xfe binary")
        with contextlib.suppress(Exception):
            await ws.send("no line ending at all")
    return len(lines) + 2


# ------------------------------------------------------------------------- the test


@pytest.mark.slow
async def test_the_gateway_keeps_serving_under_abuse(gateway: Gateway) -> None:
    gw = gateway
    await gw.probe("start")
    async with httpx.AsyncClient(timeout=30) as client:
        zoo = await client.post(f"{gw.url}/message", json={"text": "zoo", "chat_id": "zoo"},
                                headers={"x-lich-token": TOKEN})
    assert zoo.status_code == 200, zoo.text
    assert "hook_error (before_raises)" in zoo.json()["reply"]
    assert "ValueError: zoo_raises cannot handle" in zoo.json()["reply"]
    assert "echo: plain" in zoo.json()["reply"]
    for name in ("import_error.py", "syntax_error.py", "half_registers.py"):
        assert any(str(ZOO / name) in line or name[:-3] in line for line in gw.lines), name
    rss_start = gw.rss()

    await wrong_tokens(gw, 1000)
    await gw.probe("1000 wrong tokens")

    answered = await asyncio.to_thread(generated_requests, gw)
    await gw.probe("generated bodies and headers")

    await oversized(gw)
    await gw.probe("oversized bodies")

    await slow_clients(gw, scaled(30))
    await gw.probe("slow clients (gone)")

    sent = await malformed_telegram(gw)
    sent += await malformed_discord(gw)
    sent += await malformed_twitch(gw)
    await gw.probe("malformed platform traffic")
    TALLY["gateway malformed updates and frames"] += sent

    # A second round: memory must not keep growing with traffic.
    await wrong_tokens(gw, 300)
    await asyncio.to_thread(generated_requests, gw)
    await gw.probe("second round")
    growth = gw.rss() - rss_start
    TALLY["gateway RSS growth (MiB)"] = max(TALLY["gateway RSS growth (MiB)"],
                                            growth // (1024 * 1024))
    assert growth < RSS_GROWTH_BOUND, f"RSS grew by {growth / 2**20:.1f} MiB"

    gw.alive()
    text = "\n".join(gw.lines)
    assert "event=webhook_internal_error" not in text
    # The scripted model never fails: a failed run is the gateway's (or a provider's) doing.
    assert "event=run_failed" not in text, [ln for ln in gw.lines if "run_failed" in ln][:3]
    # The only tracebacks are the zoo's event_raises failing (logged with its traceback).
    for error in unexpected_tracebacks(gw.lines):
        raise AssertionError(f"traceback in the gateway's log: {error}\n{text[-4000:]}")
    TALLY["gateway probes answered on all four platforms"] += gw.probes
    assert answered >= 0


def unexpected_tracebacks(lines: list[str]) -> list[str]:
    """The exception lines of tracebacks in ``lines`` that are not the zoo's own."""
    found = []
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = next((ln for ln in lines[i + 1:] if ln and not ln.startswith(" ")), "")
            if not end.startswith("RuntimeError: event_raises:"):
                found.append(end)
    return found
