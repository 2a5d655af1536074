"""The failover router: the reference's router tests, plus cancellation, the
Retry-After cap, mid-stream failover and the all-failed error."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import attrs
import httpx
import pytest

from lich.config import ConfigError, LichConfig, ProviderConfig
from lich.events import Failover, Retry, StreamReset, TextDelta
from lich.plugins import PluginHost
from lich.testing import Fail, Reply
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    ProviderError,
    UserMessage,
)
from lich_providers.failover import (
    FailoverRouter,
    classify_error,
    compute_backoff,
    lich_make_router,
    router_settings,
)

from .conftest import Wire, make_provider


def err(kind: Any, name: str = "p", *, retry_after: float | None = None,
        status: int | None = None) -> ProviderError:
    return ProviderError(kind, name, f"{kind} happened", status=status, retry_after=retry_after)


class FakeProvider:
    """A provider answering from a script: ChatResult, exception, or async function."""

    def __init__(self, name: str, *script: Any) -> None:
        self.name = name
        self.model = f"{name}-model"
        self.script = list(script)
        self.calls = 0

    async def chat(self, messages: Any, tools: Any, options: ChatOptions) -> ChatResult:
        self.calls += 1
        item = self.script.pop(0) if self.script else ok(self.name)
        if callable(item):
            item = await item(options)
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        pass


def ok(name: str, text: str = "fine") -> ChatResult:
    return ChatResult(AssistantMessage(text), provider_name=name, finish_reason="stop")


class Sleeps:
    """A recording, instant backoff sleep."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def router(*providers: Any, **kw: Any) -> tuple[FailoverRouter, Sleeps]:
    sleeps = Sleeps()
    return FailoverRouter(list(providers), sleep=sleeps, **kw), sleeps


async def call(r: Callable[..., Any], events: list[Any] | None = None,
               stream: bool = False) -> ChatResult:
    on_event = events.append if events is not None else None
    result: ChatResult = await r([UserMessage("hi")], [], ChatOptions(stream=stream,
                                                                     on_event=on_event))
    return result


# ---------------------------------------------------------------------------
# backoff and classification (reference values)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("attempt", "seconds"),
                         [(0, 0.5), (1, 1.25), (2, 2.5), (3, 4.75), (10, 8.0)])
def test_backoff_values(attempt: int, seconds: float) -> None:
    assert compute_backoff(attempt) == seconds


def test_backoff_custom_base_and_cap() -> None:
    assert compute_backoff(10, 0.1, 0.4) == 0.4


def test_backoff_saturates_at_the_cap_for_any_attempt_number() -> None:
    # 2**1100 does not fit a float: this used to raise OverflowError.
    assert compute_backoff(1100) == 8.0
    assert compute_backoff(10**6, 0.5, 60.0) == 60.0
    assert compute_backoff(1100, 0.0, 8.0) == 0.0


def test_classify_error() -> None:
    kept = err("overflow")
    assert classify_error(kept, "x") is kept
    assert classify_error(httpx.ConnectError("refused"), "x").kind == "network"
    assert classify_error(httpx.ReadTimeout("slow"), "x").kind == "network"
    assert classify_error(ConnectionResetError("reset"), "x").kind == "network"
    assert classify_error(TimeoutError(), "x").kind == "network"
    unknown = classify_error(ValueError("odd"), "x")
    assert (unknown.kind, unknown.provider_name, unknown.message) == ("unknown", "x",
                                                                      "ValueError: odd")


# ---------------------------------------------------------------------------
# retries in place
# ---------------------------------------------------------------------------


async def test_network_then_rate_limit_then_success() -> None:
    p = FakeProvider("p", err("network"), err("rate_limit"), ok("p", "third time"))
    r, sleeps = router(p)
    events: list[Any] = []
    result = await call(r, events)
    assert result.message.content == "third time"
    assert p.calls == 3
    assert sleeps.delays == [1.25, 2.5]
    assert events == [
        Retry("p", 2, "network", 1.25, "network happened"),
        Retry("p", 3, "rate_limit", 2.5, "rate_limit happened"),
    ]


@pytest.mark.parametrize("kind", ["bad_request", "auth", "overflow", "unknown"])
async def test_other_kinds_are_not_retried(kind: str) -> None:
    p = FakeProvider("p", err(kind))
    r, sleeps = router(p)
    with pytest.raises(ProviderError) as info:
        await call(r)
    assert p.calls == 1
    assert sleeps.delays == []
    assert info.value.kind == kind


async def test_rate_limit_retries_are_exhausted_after_max_attempts() -> None:
    p = FakeProvider("p", *(err("rate_limit") for _ in range(5)))
    r, sleeps = router(p)
    with pytest.raises(ProviderError) as info:
        await call(r)
    assert p.calls == 3
    assert sleeps.delays == [1.25, 2.5]
    assert [a[1] for a in info.value.attempts] == [1, 2, 3]


async def test_max_attempts_is_configurable() -> None:
    p = FakeProvider("p", *(err("network") for _ in range(5)))
    r, sleeps = router(p, max_attempts=1)
    with pytest.raises(ProviderError):
        await call(r)
    assert p.calls == 1
    assert sleeps.delays == []


def test_empty_provider_list_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one provider is required"):
        FailoverRouter([])


# ---------------------------------------------------------------------------
# Retry-After
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(0.01, 1.25),   # shorter than the backoff: the backoff wins
     (5.0, 5.0),     # longer: the server's value is the floor
     (30.0, 30.0),
     (120.0, 30.0),  # capped
     (None, 1.25)],
)
async def test_retry_after_is_a_capped_floor(retry_after: float | None, expected: float) -> None:
    p = FakeProvider("p", err("rate_limit", retry_after=retry_after), ok("p"))
    r, sleeps = router(p)
    events: list[Any] = []
    await call(r, events)
    assert sleeps.delays == [expected]
    assert events[0].delay_s == expected


async def test_retry_after_cap_is_configurable() -> None:
    p = FakeProvider("p", err("rate_limit", retry_after=120), ok("p"))
    r, sleeps = router(p, retry_after_cap_s=3)
    await call(r)
    assert sleeps.delays == [3]


# ---------------------------------------------------------------------------
# failover
# ---------------------------------------------------------------------------


async def test_auth_fails_over_to_the_next_provider() -> None:
    one, two = FakeProvider("one", err("auth", "one", status=401)), FakeProvider("two")
    r, sleeps = router(one, two)
    events: list[Any] = []
    result = await call(r, events)
    assert result.provider_name == "two"
    assert (one.calls, two.calls) == (1, 1)
    assert sleeps.delays == []
    assert events == [Failover("one", "two", "auth", "auth happened")]


async def test_rate_limited_provider_is_retried_before_moving_on() -> None:
    one = FakeProvider("one", *(err("rate_limit", "one", retry_after=0.01) for _ in range(3)))
    two = FakeProvider("two")
    r, sleeps = router(one, two)
    events: list[Any] = []
    result = await call(r, events)
    assert result.provider_name == "two"
    assert one.calls == 3
    assert sleeps.delays == [1.25, 2.5]
    assert [type(e) for e in events] == [Retry, Retry, Failover]


async def test_overflow_moves_on_immediately() -> None:
    one, two = FakeProvider("one", err("overflow", "one")), FakeProvider("two")
    r, sleeps = router(one, two)
    assert (await call(r)).provider_name == "two"
    assert one.calls == 1
    assert sleeps.delays == []


async def test_first_success_is_returned_and_later_providers_untouched() -> None:
    one, two = FakeProvider("one"), FakeProvider("two")
    r, _ = router(one, two)
    assert (await call(r)).provider_name == "one"
    assert two.calls == 0


async def test_non_provider_errors_are_classified() -> None:
    one = FakeProvider("one", RuntimeError("bug in a third-party provider"))
    two = FakeProvider("two", *(ConnectionResetError("reset") for _ in range(3)))
    r, sleeps = router(one, two)
    with pytest.raises(ProviderError) as info:
        await call(r)
    assert [(a[0], a[1], a[2]) for a in info.value.attempts] == [
        ("one", 1, "unknown"), ("two", 1, "network"), ("two", 2, "network"),
        ("two", 3, "network"),
    ]
    assert len(sleeps.delays) == 2


async def test_all_failed_error_lists_every_attempt() -> None:
    one = FakeProvider("one", err("auth", "one", status=401))
    two = FakeProvider("two", err("rate_limit", "two", status=429, retry_after=1),
                       err("rate_limit", "two", status=429), err("network", "two"))
    three = FakeProvider("three", err("bad_request", "three", status=400))
    r, _ = router(one, two, three)
    events: list[Any] = []
    with pytest.raises(ProviderError) as info:
        await call(r, events)
    error = info.value
    assert error.attempts == (
        ("one", 1, "auth", "auth happened"),
        ("two", 1, "rate_limit", "rate_limit happened"),
        ("two", 2, "rate_limit", "rate_limit happened"),
        ("two", 3, "network", "network happened"),
        ("three", 1, "bad_request", "bad_request happened"),
    )
    # The last failure decides the kind (the loop reports it); the message names them all.
    assert (error.kind, error.status, error.provider_name) == ("bad_request", 400, "failover")
    # Each provider once, with its last cause, its attempt count and any earlier cause.
    assert error.message == (
        "all 3 providers failed (5 attempts): one: auth 401: auth happened (1 attempt); "
        "two: network: network happened (3 attempts; before that: rate_limit 429: "
        "rate_limit happened); three: bad_request 400: bad_request happened (1 attempt)"
    )
    assert [type(e).__name__ for e in events] == ["Failover", "Retry", "Retry", "Failover"]


async def test_one_provider_failing_is_its_own_error_not_a_failover_wrapper() -> None:
    where = "http://127.0.0.1:9/v1/chat/completions"
    refused = ProviderError("network", "solo", "connection refused", url=where)
    busy = ProviderError("rate_limit", "solo", "HTTP 503: busy", status=503, url=where)
    solo = FakeProvider("solo", busy, refused, refused)
    r, _ = router(solo)
    with pytest.raises(ProviderError) as info:
        await call(r)
    error = info.value
    assert (error.provider_name, error.kind, error.url) == ("solo", "network", where)
    # The last cause, the attempt count, and an earlier different cause: each once.
    assert str(error) == (
        f"provider 'solo' ({where}): network: connection refused "
        "(3 attempts; before that: rate_limit 503: HTTP 503: busy)"
    )
    assert [a[2] for a in error.attempts] == ["rate_limit", "network", "network"]


async def test_events_without_a_listener_do_not_break_the_router() -> None:
    one, two = FakeProvider("one", err("network", "one"), err("auth", "one")), FakeProvider("two")
    r, _ = router(one, two)
    result = await r([UserMessage("hi")], [], ChatOptions())
    assert result.provider_name == "two"


# ---------------------------------------------------------------------------
# mid-stream failover
# ---------------------------------------------------------------------------


def streams(text: str, then: BaseException | ChatResult) -> Callable[[ChatOptions], Any]:
    async def run(options: ChatOptions) -> Any:
        for word in text.split(" "):
            options.emit(TextDelta(word + " ", "x"))
        return then

    return run


async def test_failover_after_streamed_text_resets_the_stream() -> None:
    one = FakeProvider("one", streams("half an", err("auth", "one")))
    two = FakeProvider("two", streams("whole answer", ok("two", "whole answer")))
    r, _ = router(one, two)
    events: list[Any] = []
    result = await call(r, events, stream=True)
    assert result.message.content == "whole answer"
    assert [type(e).__name__ for e in events] == [
        "TextDelta", "TextDelta", "StreamReset", "Failover", "TextDelta", "TextDelta"
    ]
    assert events[2] == StreamReset("one", "auth: auth happened")
    # What a UI shows after honouring the reset:
    shown = ""
    for e in events:
        shown = "" if isinstance(e, StreamReset) else shown + getattr(e, "text", "")
    assert shown == "whole answer "


async def test_retry_after_streamed_text_resets_first() -> None:
    p = FakeProvider("p", streams("par", err("network")), ok("p"))
    r, _ = router(p)
    events: list[Any] = []
    await call(r, events, stream=True)
    assert [type(e).__name__ for e in events] == ["TextDelta", "StreamReset", "Retry"]


async def test_no_reset_when_nothing_was_streamed() -> None:
    one, two = FakeProvider("one", err("auth", "one")), FakeProvider("two")
    r, _ = router(one, two)
    events: list[Any] = []
    await call(r, events, stream=True)
    assert not any(isinstance(e, StreamReset) for e in events)


async def test_mid_stream_failover_with_real_providers() -> None:
    """openai_compat breaks after some text (network, retried), anthropic answers."""
    broken_head = (
        b'data: {"choices":[{"index":0,"delta":{"content":"I think "}}]}\n\n'
    )

    def broken(_: httpx.Request) -> httpx.Response:
        async def body() -> Any:
            yield broken_head
            raise httpx.RemoteProtocolError("peer closed connection")

        return httpx.Response(200, content=body())

    openai = make_provider("openai_compat", Wire("openai_compat", [broken, broken, broken]))
    anthropic = make_provider("anthropic", Wire("anthropic", [Reply("From Claude.")]))
    r, sleeps = router(openai, anthropic)
    events: list[Any] = []
    result = await call(r, events, stream=True)
    assert result.message.content == "From Claude."
    assert result.provider_name == "anthropic"
    names = [type(e).__name__ for e in events]
    assert names == [
        "TextDelta", "StreamReset", "Retry",
        "TextDelta", "StreamReset", "Retry",
        "TextDelta", "StreamReset", "Failover",
        "TextDelta", "TextDelta",
    ]
    assert len(sleeps.delays) == 2
    failover = events[8]
    assert (failover.from_provider, failover.to_provider, failover.kind) == (
        "openai_compat", "anthropic", "network")
    await openai.aclose()
    await anthropic.aclose()


# ---------------------------------------------------------------------------
# cancellation
# ---------------------------------------------------------------------------


async def test_cancel_during_backoff_sleep() -> None:
    """A real (long) backoff sleep is cancelled: no retry, no failover."""
    one = FakeProvider("one", err("rate_limit", "one", retry_after=20))
    two = FakeProvider("two")
    r = FailoverRouter([one, two])  # real asyncio.sleep
    events: list[Any] = []
    retrying = asyncio.Event()

    def on_event(event: Any) -> None:
        events.append(event)
        if isinstance(event, Retry):
            retrying.set()

    task = asyncio.create_task(r([UserMessage("hi")], [], ChatOptions(on_event=on_event)))
    await asyncio.wait_for(retrying.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert (one.calls, two.calls) == (1, 0)
    assert [type(e) for e in events] == [Retry]
    assert events[0].delay_s == 20


async def test_cancel_during_a_provider_call() -> None:
    started = asyncio.Event()

    async def hang(options: ChatOptions) -> Any:
        started.set()
        await asyncio.sleep(60)

    one, two = FakeProvider("one", hang), FakeProvider("two")
    r, sleeps = router(one, two)
    events: list[Any] = []
    task = asyncio.create_task(call(r, events))
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert (one.calls, two.calls) == (1, 0)
    assert events == []
    assert sleeps.delays == []


async def test_cancelled_error_from_a_provider_is_never_retried_or_converted() -> None:
    one = FakeProvider("one", asyncio.CancelledError())
    two = FakeProvider("two")
    r, sleeps = router(one, two)
    with pytest.raises(asyncio.CancelledError):
        await call(r)
    assert (one.calls, two.calls) == (1, 0)
    assert sleeps.delays == []


async def test_cancel_mid_stream_with_a_real_provider() -> None:
    streaming = asyncio.Event()
    closed: list[bool] = []

    def slow(_: httpx.Request) -> httpx.Response:
        async def body() -> Any:
            try:
                yield b'data: {"choices":[{"index":0,"delta":{"content":"hel"}}]}\n\n'
                await asyncio.sleep(60)
            finally:
                closed.append(True)

        return httpx.Response(200, content=body())

    openai = make_provider("openai_compat", Wire("openai_compat", [slow]))
    backup = FakeProvider("backup")
    r, sleeps = router(openai, backup)
    task = asyncio.create_task(
        r([UserMessage("hi")], [], ChatOptions(stream=True, on_event=lambda e: streaming.set()))
    )
    await asyncio.wait_for(streaming.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert closed == [True]
    assert backup.calls == 0
    assert sleeps.delays == []
    await openai.aclose()


# ---------------------------------------------------------------------------
# the plugin hook and its settings
# ---------------------------------------------------------------------------


async def test_jitter_spreads_retries_of_conversations_failing_together() -> None:
    # Many conversations hitting one rate-limited provider at the same moment.
    rng = random.Random(11)
    delays: list[float] = []
    for _ in range(40):
        r, sleeps = router(FakeProvider("p", err("rate_limit"), ok("p")), jitter="full", rng=rng)
        await call(r)
        delays += sleeps.delays
    assert all(0 <= d <= 1.25 for d in delays)  # never above the deterministic delay
    assert len(set(delays)) > 30


async def test_equal_jitter_waits_at_least_half_and_a_retry_after_still_floors_it() -> None:
    p = FakeProvider("p", err("rate_limit"), err("rate_limit", retry_after=7), ok("p"))
    r, sleeps = router(p, jitter="equal", rng=random.Random(3))
    await call(r)
    assert 0.625 <= sleeps.delays[0] <= 1.25
    assert sleeps.delays[1] == 7


async def test_without_jitter_the_delays_are_the_documented_ones() -> None:
    r, sleeps = router(FakeProvider("p", err("network"), err("network"), ok("p")),
                       rng=random.Random(1))
    await call(r)
    assert sleeps.delays == [1.25, 2.5]


def _config(**settings: Any) -> LichConfig:
    return LichConfig(
        providers=(ProviderConfig(kind="openai_compat", name="a", model="m"),),
        tables={"failover": settings} if settings else {},
        plugins=(),
    )


def test_hook_builds_a_router_with_settings() -> None:
    p = FakeProvider("p")
    r = lich_make_router([p], _config(max_attempts=5, base_delay_s=0.01, retry_after_cap_s=2))
    assert isinstance(r, FailoverRouter)
    assert (r.max_attempts, r.base_delay_s, r.max_delay_s, r.retry_after_cap_s) == (5, 0.01, 8.0,
                                                                                    2.0)
    assert r.jitter == "none"
    jittered = lich_make_router([p], _config(jitter="full"))
    assert isinstance(jittered, FailoverRouter)
    assert jittered.jitter == "full"
    assert lich_make_router([], _config()) is None


def test_the_configs_retry_jitter_is_the_default_and_the_routers_own_setting_wins() -> None:
    p = FakeProvider("p")
    spread = attrs.evolve(_config(), retry_jitter="full")
    own = attrs.evolve(_config(jitter="equal"), retry_jitter="full")
    for config, expected in ((spread, "full"), (own, "equal")):
        router = lich_make_router([p], config)
        assert isinstance(router, FailoverRouter)
        assert router.jitter == expected


def test_the_gateway_spreads_retries_unless_told_otherwise(tmp_path: Any) -> None:
    from lich.gateway.config import parse_gateway_config
    from lich.gateway.runner import gateway_agent_config

    gateway = parse_gateway_config({})
    config = attrs.evolve(_config(), work_dir=str(tmp_path))
    assert gateway_agent_config(config, gateway).retry_jitter == "full"
    exact = attrs.evolve(config, retry_jitter="none")
    assert gateway_agent_config(exact, gateway).retry_jitter == "none"
    # And the router the gateway's agent gets is jittered.
    router = lich_make_router([FakeProvider("p")], gateway_agent_config(config, gateway))
    assert isinstance(router, FailoverRouter)
    assert router.jitter == "full"


@pytest.mark.parametrize(
    ("settings", "problem"),
    [({"max_attempts": 0}, "$.failover.max_attempts: must be at least 1"),
     ({"max_attempts": 1.5}, "$.failover.max_attempts: expected an integer"),
     ({"base_delay_s": "fast"}, "$.failover.base_delay_s: expected a number"),
     ({"retry_after_cap_s": -1}, "$.failover.retry_after_cap_s: must be at"),
     ({"jitter": "lots"}, "$.failover.jitter: must be one of 'none', 'full', "
                          "'equal', got 'lots'"),
     ({"jitter": True}, "$.failover.jitter: must be one of"),
     ({"max_retries": 2}, "$.failover.max_retries: unknown key")],
)
def test_bad_settings_are_config_errors(settings: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        router_settings(settings)
    assert info.value.problems[0].startswith(problem)


def test_the_plugin_is_found_through_the_host(tmp_path: Any) -> None:
    host = PluginHost(work_dir=str(tmp_path))
    host.load(["failover"])
    p = FakeProvider("p")
    r = host.make_router([p], _config())
    assert isinstance(r, FailoverRouter)
    assert r.providers == [p]


async def test_router_over_scripted_failures_in_every_dialect() -> None:
    """Each provider's real error mapping drives the router the same way."""
    providers = [
        make_provider("anthropic", Wire("anthropic", [Fail(529), Fail(529), Fail(529)])),
        make_provider("ollama", Wire("ollama", [Fail(404, {"error": "model not found"})])),
        make_provider("openai_compat", Wire("openai_compat", [Reply("from openai")])),
    ]
    r, _sleeps = router(*providers)
    events: list[Any] = []
    result = await call(r, events)
    assert result.message.content == "from openai"
    assert [(type(e).__name__, getattr(e, "kind", "")) for e in events] == [
        ("Retry", "server_error"), ("Retry", "server_error"), ("Failover", "server_error"),
        ("Failover", "bad_request"),
    ]
    for p in providers:
        await p.aclose()
