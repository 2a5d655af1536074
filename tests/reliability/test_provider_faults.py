"""Provider faults: every dialect, streamed and not, against a server that misbehaves
on purpose (see ``_faults.py``).

Each scenario runs a real :class:`lich.Agent` (provider plugin + failover router,
small ``timeout_s`` and fast backoff) twice: with the faulty provider alone — the
run must end with a clear :class:`ProviderError` of the expected kind — and with a
healthy backup after it — the run must end ``final`` through failover (or through
an in-place retry when the fault was intermittent). Never a hang (every run is
bounded), never another exception, never an event-loop error, and the transcript
reads back clean either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from attrs import frozen

from lich.agent import Agent
from lich.config import ProviderConfig
from lich.events import Envelope, Failover, Retry, StreamReset
from lich.testing import Reply, make_test_config
from lich.types import AssistantMessage, ProviderError, SystemMessage, UserMessage
from lich_providers._http import MAX_RESPONSE_BYTES, HttpClient
from lich_providers.failover import compute_backoff

from . import _faults as f
from .conftest import TALLY, read_session, recorded_events, run_ends, scaled

DIALECTS = ("openai", "anthropic", "ollama")
# The provider timeout of the scenarios that are about timeouts (never answers, stalls);
# the others use a roomy one so that a loaded machine cannot turn them into timeouts.
TIMEOUT_S = 0.3
ROOMY_S = 15.0
CONCURRENCY = 12
FAILOVER = {"max_attempts": 2, "base_delay_s": 0.01, "max_delay_s": 0.05,
            "retry_after_cap_s": 0.2}
BOUND_S = 30.0  # a generous bound per run: only a hang can reach it
BACKUP_TEXT = "answer from the backup"
PRIMARY_TEXT = "answer from the primary"


@frozen
class Scenario:
    """One fault. ``kind(dialect, stream)`` is the error kind when the faulty provider is
    alone (``None``: the run succeeds anyway); ``recovers`` says the primary answers after
    an in-place retry (no failover)."""

    name: str
    default: f.Behaviour
    plan: tuple[f.Behaviour, ...] = ()
    kind: Callable[[str, bool], str | None] = lambda _d, _s: "network"
    recovers: bool = False
    retry_delay: float | None = None  # the delay the router must announce before attempt 2
    resets_stream: bool = False  # text went out before the failure (stream_reset expected)
    timeout_s: float = ROOMY_S
    primary_text: str = PRIMARY_TEXT  # what the primary says when it does answer


def always(kind: str | None) -> Callable[[str, bool], str | None]:
    return lambda _d, _s: kind


OK_PRIMARY = f.Ok(Reply(PRIMARY_TEXT))
BACKOFF_1 = compute_backoff(1, FAILOVER["base_delay_s"], FAILOVER["max_delay_s"])

SCENARIOS = [
    Scenario("429-sustained-retry-after", f.Status(429, {"retry-after": "0.1"}),
             kind=always("rate_limit"), retry_delay=0.1),
    Scenario("429-sustained-retry-after-over-cap", f.Status(429, {"retry-after": "3600"}),
             kind=always("rate_limit"), retry_delay=FAILOVER["retry_after_cap_s"]),
    Scenario("429-sustained-retry-after-http-date",
             f.Status(429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}),
             kind=always("rate_limit"), retry_delay=BACKOFF_1),
    Scenario("429-sustained-no-retry-after", f.Status(429), kind=always("rate_limit"),
             retry_delay=BACKOFF_1),
    Scenario("500-intermittent", OK_PRIMARY, (f.Status(500),), kind=always(None),
             recovers=True, retry_delay=BACKOFF_1),
    Scenario("503-intermittent", OK_PRIMARY, (f.Status(503),), kind=always(None),
             recovers=True, retry_delay=BACKOFF_1),
    Scenario("529-intermittent", OK_PRIMARY, (f.Status(529),), kind=always(None),
             recovers=True, retry_delay=BACKOFF_1),
    Scenario("503-sustained", f.Status(503), kind=always("server_error")),
    Scenario("529-sustained", f.Status(529), kind=always("server_error")),
    Scenario("reset-before-headers", f.ResetBeforeHeaders()),
    Scenario("reset-then-ok", OK_PRIMARY, (f.ResetBeforeHeaders(),), kind=always(None),
             recovers=True),
    Scenario("reset-mid-stream", f.ResetMidStream(6), resets_stream=True),
    Scenario("never-answers", f.NeverAnswer(), timeout_s=TIMEOUT_S),
    Scenario("stalls-after-tokens", f.StallAfter(6), resets_stream=True, timeout_s=TIMEOUT_S),
    Scenario("garbage-body", f.Garbage(), kind=always("bad_request")),
    Scenario("truncated-json", f.Truncated(honest_length=True), kind=always("bad_request")),
    Scenario("truncated-body", f.Truncated(honest_length=False)),
    Scenario("html-page", f.WrongContentType(), kind=always("bad_request")),
    # The right JSON under a wrong label: content types are not checked for whole
    # answers, so the answer is used, streamed call or not (a body with no stream
    # events in it that is one JSON document is the whole answer).
    Scenario("json-labelled-text-plain", f.WrongContentType("text/plain", None),
             kind=always(None), primary_text=f.LONG_TEXT),
    # Neither a stream nor JSON, under a label that is no error page either.
    Scenario("garbage-text-plain", f.Garbage(content_type="text/plain"),
             kind=always("bad_request")),
]


def provider(kind: str, name: str, server: f.FaultServer, timeout_s: float) -> ProviderConfig:
    return ProviderConfig(kind=kind, name=name, model="m-fault", base_url=server.base_url,
                          api_key_env="LICH_FAULT_KEY", timeout_s=timeout_s)


async def run_case(
    tmp: Path, dialect: str, stream: bool, scenario: Scenario, *, backup: bool
) -> dict[str, Any]:
    """One agent run against the scenario; returns what happened (never raises
    except for assertion failures of the harness itself)."""
    kind = f.KIND_OF[dialect]
    servers = [f.FaultServer(dialect, scenario.plan, scenario.default)]
    if backup:
        servers.append(f.FaultServer(dialect, default=f.Ok(Reply(BACKUP_TEXT))))
    # Starting and stopping block on the server thread: keep that off this event loop,
    # where the other runs' deadlines are ticking.
    for server in servers:
        await asyncio.to_thread(server.start)
    config = make_test_config(
        tmp, plugins=(kind, "failover"), stream=stream,
        providers=tuple(provider(kind, n, s, t) for n, s, t in zip(
            ("primary", "backup"), servers, (scenario.timeout_s, ROOMY_S), strict=False)),
        plugin_settings={"failover": FAILOVER},
    )
    agent = Agent(config)
    events: list[Envelope] = []
    outcome: dict[str, Any] = {"session_dir": config.session_dir, "events": events}
    try:
        result = await asyncio.wait_for(
            agent.run("hello", session_id="faulty", on_event=events.append), BOUND_S
        )
        outcome.update(ok=True, text=result.text, reason=result.stopped_reason)
    except ProviderError as exc:
        outcome.update(ok=False, error=exc)
    except TimeoutError:
        outcome.update(ok=False, error="HANG")
    except Exception as exc:  # recorded, asserted against below with its type
        outcome.update(ok=False, error=exc)
    finally:
        await agent.aclose()
        for server in servers:
            await asyncio.to_thread(server.stop)
    outcome["faults"] = servers[0].faults
    outcome["primary_url"] = servers[0].base_url
    outcome["requests"] = [len(s.requests) for s in servers]
    return outcome


def check(outcome: dict[str, Any], dialect: str, stream: bool, scenario: Scenario,
          backup: bool) -> None:
    label = f"{scenario.name} ({dialect}, stream={stream}, backup={backup})"
    error = outcome.get("error")
    assert error != "HANG", f"{label}: the run did not end within {BOUND_S}s"
    assert error is None or isinstance(error, ProviderError), f"{label}: raised {error!r}"
    expected_kind = scenario.kind(dialect, stream)
    events = [e.event for e in outcome["events"]]
    retries = [e for e in events if isinstance(e, Retry)]
    failovers = [e for e in events if isinstance(e, Failover)]

    if expected_kind is None or scenario.recovers or backup:
        assert outcome["ok"], f"{label}: expected a final answer, got {error}"
        assert outcome["reason"] == "final"
        served_by_primary = expected_kind is None
        expected_text = scenario.primary_text if served_by_primary else BACKUP_TEXT
        assert outcome["text"] == expected_text, label
        if not served_by_primary:
            assert [(e.from_provider, e.to_provider, e.kind) for e in failovers] == [
                ("primary", "backup", expected_kind)
            ], label
        else:
            assert failovers == [], label
    else:
        assert isinstance(error, ProviderError), f"{label}: expected a ProviderError"
        assert error.kind == expected_kind, f"{label}: {error}"
        # One provider: its own error (naming where it was sent), not a failover wrapper.
        assert error.provider_name == "primary", label
        assert error.url is not None, label
        assert error.url.startswith(outcome["primary_url"]), label
        assert error.message, label
        assert error.attempts, label
        assert all(a[0] == "primary" for a in error.attempts)

    if scenario.retry_delay is not None:
        assert retries, f"{label}: no retry announced"
        assert retries[0].delay_s == pytest.approx(scenario.retry_delay), label
    # Counted on the client side: under load a request cut off by a 0.3 s timeout may
    # not have reached the server's handler yet.
    primary_attempts = 1 + sum(1 for r in retries if r.provider == "primary")
    if expected_kind in ("rate_limit", "server_error", "network"):
        # Bounded in-place retries: exactly max_attempts attempts at the primary.
        assert primary_attempts == FAILOVER["max_attempts"], label
    elif expected_kind is not None:
        assert primary_attempts == 1, f"{label}: a {expected_kind} was retried"
    if isinstance(error, ProviderError):
        assert len(error.attempts) == primary_attempts, label
    if scenario.resets_stream and stream:
        assert any(isinstance(e, StreamReset) for e in events), f"{label}: no stream_reset"

    # The transcript reads back clean and says how the run ended.
    contents = read_session(outcome["session_dir"], "faulty")
    ends = run_ends(contents)
    assert len(ends) == 1, label
    roles = [type(m) for m in contents.messages]
    if outcome["ok"]:
        assert roles == [SystemMessage, UserMessage, AssistantMessage], label
        assert ends[0]["stopped_reason"] == "final"
    else:
        assert roles == [SystemMessage, UserMessage], label
        assert ends[0]["stopped_reason"] == "error"
        assert "ProviderError" in ends[0]["error"]
        assert "error" in recorded_events(contents)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LICH_FAULT_KEY", "sk-loopback-only")


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_every_fault_ends_cleanly(
    dialect: str, stream: bool, tmp_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    """All scenarios, alone and with a backup, run concurrently (each with its own
    servers and work dir); ``LICH_RELIABILITY_SCALE`` repeats the whole matrix."""
    cases = [(s, backup, i) for i in range(scaled(1)) for s in SCENARIOS
             for backup in (False, True)]

    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(index: int, scenario: Scenario, backup: bool) -> dict[str, Any]:
        work = tmp_path / f"case{index}"
        work.mkdir()
        async with gate:
            return await run_case(work, dialect, stream, scenario, backup=backup)

    outcomes = await asyncio.gather(
        *(one(n, s, b) for n, (s, b, _) in enumerate(cases))
    )
    for (scenario, backup, _), outcome in zip(cases, outcomes, strict=True):
        check(outcome, dialect, stream, scenario, backup)
        TALLY["provider faults injected"] += outcome["faults"]
    TALLY["provider fault runs"] += len(cases)
    assert loop_errors == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_50_mb_answer_is_refused_while_it_is_read(
    dialect: str, stream: bool, tmp_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    """A 50 MB body (one JSON document, or one endless stream line) is cut off at the
    provider's byte cap with a ``bad_request`` — the router fails over at once — instead
    of being buffered whole and put into the transcript."""
    scenario = Scenario("50-mb-body", f.Huge(50 * 1024 * 1024), kind=always("bad_request"))
    for backup in (False, True):
        work = tmp_path / f"backup{backup}"
        work.mkdir()
        outcome = await run_case(work, dialect, stream, scenario, backup=backup)
        check(outcome, dialect, stream, scenario, backup)
        if not backup:
            assert "response too large" in str(outcome["error"])
            assert str(MAX_RESPONSE_BYTES) in str(outcome["error"])
        TALLY["provider faults injected"] += outcome["faults"]
        TALLY["provider fault runs"] += 1
    assert loop_errors == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_flaky_server_through_a_multi_turn_run(
    dialect: str, stream: bool, tmp_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    """Every other request fails (500, 503, 529, a reset, in turn) through a run of
    several tool turns: each model call is retried in place and the run ends ``final``
    with every tool call answered in the transcript."""
    from lich.hooks import hookimpl
    from lich.tools import tool
    from lich.types import ToolCall

    turns = 3 * scaled(1)
    faults: list[f.Behaviour] = [
        f.Status(500), f.Status(503), f.Status(529), f.ResetBeforeHeaders()
    ]
    plan: list[f.Behaviour] = []
    for i in range(turns):
        plan += [faults[i % len(faults)],
                 f.Ok(Reply(tool_calls=(ToolCall(f"c{i}", "echo", {"text": str(i)}),)))]
    plan += [faults[0], f.Ok(Reply("finished"))]
    server = f.FaultServer(dialect, plan).start()

    class Echo:
        @hookimpl
        def lich_register_tools(self, registry: Any) -> None:
            @tool
            def echo(text: str) -> str:
                """Say it back."""
                return text

            registry.register(echo)

    kind = f.KIND_OF[dialect]
    config = make_test_config(
        tmp_path, plugins=(kind, "failover"), stream=stream, max_turns=turns + 2,
        providers=(provider(kind, "primary", server, ROOMY_S),),
        plugin_settings={"failover": FAILOVER},
    )
    agent = Agent(config, plugins=[("echo", Echo())])
    try:
        result = await asyncio.wait_for(agent.run("go", session_id="flaky"), BOUND_S)
    finally:
        await agent.aclose()
        server.stop()
    assert (result.stopped_reason, result.text) == ("final", "finished")
    assert server.faults == turns + 1
    contents = read_session(config.session_dir, "flaky")
    assert contents.messages == result.messages
    assert recorded_events(contents).count("retry") == turns + 1
    assert [m.content for m in contents.messages if m.role == "tool"] == [
        str(i) for i in range(turns)
    ]
    TALLY["provider faults injected"] += server.faults
    TALLY["provider fault runs"] += 1
    assert loop_errors == []


async def test_stream_lines_are_split_as_they_arrive() -> None:
    """The provider client splits stream lines itself (so it can count bytes): CRLF
    torn between two chunks, a lone CR, a UTF-8 character torn between chunks, and a
    last line without a newline all come out as whole lines."""
    pieces = [b"data: a\r", b"\ndata: \xc3", b"\xa9\r\rdata: b\n", b"\n", b"tail"]

    async def stream() -> Any:
        for piece in pieces:
            yield piece

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=stream())

    import re

    client = HttpClient(provider="p", base_url="http://127.0.0.1:9", overflow=re.compile("x"),
                        timeout_s=5, transport=httpx.MockTransport(handler))
    lines = [line async for line in client.stream_lines("/x", {})]
    await client.aclose()
    assert lines == ["data: a", "data: é", "", "data: b", "", "tail"]


async def test_a_small_cap_refuses_a_long_stream_of_small_lines() -> None:
    """The cap counts every byte of a stream, not only the longest line."""
    import re

    async def stream() -> Any:
        for i in range(1000):
            yield f"data: {i}\n\n".encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=stream())

    client = HttpClient(provider="p", base_url="http://127.0.0.1:9", overflow=re.compile("x"),
                        timeout_s=5, transport=httpx.MockTransport(handler),
                        max_response_bytes=1000)
    seen: list[str] = []

    async def read_all() -> None:
        async for line in client.stream_lines("/x", {}):
            seen.append(line)

    with pytest.raises(ProviderError) as info:
        await read_all()
    await client.aclose()
    assert info.value.kind == "bad_request"
    assert "over the 1000-byte limit" in info.value.message
    assert 0 < len(seen) < 400


async def test_a_whole_answer_without_a_length_is_cut_off_at_the_cap() -> None:
    """No ``content-length`` to refuse up front: the body is counted as it is read."""
    import re

    sent: list[int] = []

    async def body() -> Any:
        for i in range(1000):
            sent.append(i)
            yield b"x" * 100

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/json"},
                              content=body())

    client = HttpClient(provider="p", base_url="http://127.0.0.1:9", overflow=re.compile("x"),
                        timeout_s=5, transport=httpx.MockTransport(handler),
                        max_response_bytes=5000)
    with pytest.raises(ProviderError) as info:
        await client.post_json("/x", {})
    await client.aclose()
    assert (info.value.kind, info.value.status) == ("bad_request", 200)
    assert "over the 5000-byte limit" in info.value.message
    assert len(sent) < 100  # it stopped reading, it did not drain the rest


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_lone_surrogate_does_not_poison_the_conversation(
    dialect: str, tmp_path: Path
) -> None:
    """A chat platform may send ``"\\ud800"`` (valid JSON, not encodable as UTF-8). The
    provider sends U+FFFD in its place: the run and every later run of the session
    succeed (before, each failed with a UnicodeEncodeError as an ``unknown`` error)."""
    server = f.FaultServer(dialect, default=f.Ok(Reply("fine")))
    await asyncio.to_thread(server.start)
    kind = f.KIND_OF[dialect]
    config = make_test_config(
        tmp_path, plugins=(kind, "failover"),
        providers=(provider(kind, "primary", server, ROOMY_S),),
        plugin_settings={"failover": FAILOVER},
    )
    agent = Agent(config)
    try:
        first = await agent.run("odd \ud800 character", session_id="odd")
        second = await agent.run("and then", session_id="odd")
    finally:
        await agent.aclose()
        await asyncio.to_thread(server.stop)
    assert (first.text, second.text) == ("fine", "fine")
    sent = [m.content for m in server.requests[-1].messages if m.role == "user"]
    assert sent == ["odd \ufffd character", "and then"]
    read_session(config.session_dir, "odd")
