"""The ``failover`` router plugin: walk the providers in config order.

Per provider, ``rate_limit``, ``server_error`` and ``network`` failures are
retried in place (at most ``max_attempts`` attempts) after a backoff (deterministic unless
``jitter`` is set; :mod:`lich.backoff`); a server's
``Retry-After`` is a floor for that delay, capped at ``retry_after_cap_s``.
``auth``, ``overflow``, ``bad_request`` and ``unknown`` move on to the next
provider at once. When every provider failed, one :class:`ProviderError`
lists every attempt.

Events go through ``options.emit``: ``retry`` before each in-place retry,
``failover`` when moving to the next provider, and ``stream_reset`` when an
attempt that already streamed text failed (the UI drops the partial text).

Cancellation is asyncio task cancellation and is never caught here: it ends
the call at once, wherever it lands (a provider call, a backoff sleep), with
no retry and no failover.

Settings (``[failover]``): ``max_attempts`` (3),
``base_delay_s`` (0.5), ``max_delay_s`` (8), ``retry_after_cap_s`` (30),
``jitter`` (``"none"``; or ``"full"``, ``"equal"``).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from lich.backoff import Backoff, Jitter
from lich.events import Event, Failover, Retry, StreamReset, TextDelta
from lich.guards import truncate_text
from lich.hooks import hookimpl
from lich.settings import at_least, setting, structure_settings
from lich.types import (
    ChatOptions,
    ChatResult,
    Message,
    Provider,
    ProviderError,
    ProviderErrorKind,
    ToolDefinition,
)

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.settings import ConfigTables

__all__ = [
    "DEFAULT_BASE_DELAY_S",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_MAX_DELAY_S",
    "DEFAULT_RETRY_AFTER_CAP_S",
    "RETRYABLE_KINDS",
    "FailoverRouter",
    "FailoverSettings",
    "classify_error",
    "compute_backoff",
    "lich_make_router",
    "lich_register_config_tables",
    "router_settings",
]

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BASE_DELAY_S = 0.5
DEFAULT_MAX_DELAY_S = 8.0
DEFAULT_RETRY_AFTER_CAP_S = 30.0
RETRYABLE_KINDS: frozenset[str] = frozenset({"rate_limit", "server_error", "network"})

# Exception class names (anywhere in the MRO) that mean "the network failed",
# for providers that let a transport error escape; httpx is not imported here.
_NETWORK_CLASS_NAMES = frozenset({"TransportError", "TimeoutException", "StreamError"})


def compute_backoff(
    attempt: int,
    base_s: float = DEFAULT_BASE_DELAY_S,
    max_s: float = DEFAULT_MAX_DELAY_S,
) -> float:
    """The deterministic delay in seconds after failed attempt number ``attempt`` (1-based).

    ``min(base·2^attempt + base·attempt/2, max)`` in whole milliseconds (lich-ts's
    schedule, through :class:`lich.backoff.Backoff`): 1.25 s after attempt 1 and
    2.5 s after attempt 2 with the defaults; the cap for any attempt number.
    """
    return _schedule(base_s, max_s).delay(attempt)


def _schedule(
    base_s: float, max_s: float, jitter: Jitter = "none", rng: random.Random | None = None
) -> Backoff:
    return Backoff(base_s, max_s, step_s=base_s / 2, jitter=jitter, rng=rng)


def classify_error(exc: BaseException, provider: str) -> ProviderError:
    """``exc`` as a :class:`ProviderError`: kinds are kept, transport errors are
    ``network``, anything else ``unknown``."""
    if isinstance(exc, ProviderError):
        return exc
    names = {cls.__name__ for cls in type(exc).__mro__}
    kind: ProviderErrorKind
    if isinstance(exc, OSError | TimeoutError) or names & _NETWORK_CLASS_NAMES:
        kind = "network"
    else:
        kind = "unknown"
    return ProviderError(kind, provider, f"{type(exc).__name__}: {exc}")


class _StreamWatch:
    """Forwards a call's events and remembers whether any answer text went out."""

    __slots__ = ("forward", "streamed")

    def __init__(self, forward: Callable[[Event], None] | None) -> None:
        self.forward = forward
        self.streamed = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta) and event.text:
            self.streamed = True
        if self.forward is not None:
            self.forward(event)


class FailoverRouter:
    """A :data:`lich.types.ChatFn` over several providers; see the module docstring.

    :param providers: in the order they are tried.
    :param jitter: ``"none"`` (the default: the documented delays exactly),
        ``"full"`` or ``"equal"`` (see :mod:`lich.backoff`) to spread the retries of
        many conversations that hit the same rate limit at once.
    :param rng: where jitter draws from (tests pass a seeded :class:`random.Random`).
    :param sleep: the backoff sleep (``asyncio.sleep``); tests pass a recorder.
    """

    def __init__(
        self,
        providers: Sequence[Provider],
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        base_delay_s: float = DEFAULT_BASE_DELAY_S,
        max_delay_s: float = DEFAULT_MAX_DELAY_S,
        retry_after_cap_s: float = DEFAULT_RETRY_AFTER_CAP_S,
        jitter: Jitter = "none",
        rng: random.Random | None = None,
        sleep: Callable[[float], Awaitable[Any]] | None = None,
    ) -> None:
        if not providers:
            raise ValueError("at least one provider is required")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.providers = list(providers)
        self.max_attempts = max_attempts
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.retry_after_cap_s = retry_after_cap_s
        self.jitter: Jitter = jitter
        self._rng = rng
        self.sleep = sleep or asyncio.sleep

    def delay_for(self, error: ProviderError, attempt: int) -> float:
        """The wait after failed attempt ``attempt``: the backoff (jittered when
        configured), or the server's ``Retry-After`` when it is longer (but never
        more than the cap)."""
        schedule = _schedule(self.base_delay_s, self.max_delay_s, self.jitter, self._rng)
        delay = schedule.delay(attempt)
        if error.retry_after is not None:
            delay = max(delay, min(error.retry_after, self.retry_after_cap_s))
        return delay

    async def __call__(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        options: ChatOptions,
    ) -> ChatResult:
        """Answer from the first provider that succeeds; see the module docstring."""
        failures: list[tuple[str, int, ProviderError]] = []
        for index, provider in enumerate(self.providers):
            attempt = 0
            while True:
                attempt += 1
                watch = _StreamWatch(options.on_event)
                try:
                    return await provider.chat(
                        messages, tools, attrs.evolve(options, on_event=watch)
                    )
                except Exception as exc:  # CancelledError is a BaseException: never caught
                    error = classify_error(exc, provider.name)
                failures.append((provider.name, attempt, error))
                if watch.streamed:
                    options.emit(StreamReset(provider.name, f"{error.kind}: {error.message}"))
                if error.kind not in RETRYABLE_KINDS or attempt >= self.max_attempts:
                    break
                delay = self.delay_for(error, attempt)
                options.emit(Retry(provider.name, attempt + 1, error.kind, delay, error.message))
                await self.sleep(delay)
            if index + 1 < len(self.providers):
                options.emit(
                    Failover(provider.name, self.providers[index + 1].name, error.kind,
                             error.message)
                )
        raise self._all_failed(failures)

    def _all_failed(self, failures: Sequence[tuple[str, int, ProviderError]]) -> ProviderError:
        last = failures[-1][2]
        attempts = tuple((name, n, e.kind, e.message) for name, n, e in failures)
        if len(self.providers) == 1:
            # One provider: its own error, where it happened, and how often it was tried;
            # no "failover" wrapper around it, no cause repeated once per attempt.
            return attrs.evolve(_summary([e for _, _, e in failures]), attempts=attempts)
        by_provider: dict[str, list[ProviderError]] = {}
        for name, _, error in failures:
            by_provider.setdefault(name, []).append(error)
        listing = "; ".join(
            truncate_text(str(_summary(errors)), 400, style="inline")
            for errors in by_provider.values()
        )
        count = len(self.providers)
        return ProviderError(
            last.kind,
            "failover",
            f"all {count} provider{'s' if count != 1 else ''} failed "
            f"({_attempts(len(failures))}): {listing}",
            status=last.status,
            retry_after=last.retry_after,
            attempts=attempts,
        )


def _attempts(count: int) -> str:
    return f"{count} attempt{'s' if count != 1 else ''}"


def _summary(errors: Sequence[ProviderError]) -> ProviderError:
    """One provider's failed attempts as its last error, saying how many there were and
    each earlier cause that differed (once)."""
    last = errors[-1]
    seen = {_cause(last)}
    earlier = []
    for error in errors[:-1]:
        if _cause(error) not in seen:
            seen.add(_cause(error))
            status = f" {error.status}" if error.status is not None else ""
            earlier.append(f"; before that: {error.kind}{status}: "
                           f"{truncate_text(error.message, 200, style='inline')}")
    return attrs.evolve(last, message=f"{last.message} ({_attempts(len(errors))}"
                                      f"{''.join(earlier)})")


def _cause(error: ProviderError) -> tuple[str, int | None, str]:
    return (error.kind, error.status, error.message)


@attrs.frozen
class FailoverSettings:
    """``[failover]``."""

    max_attempts: int = setting(DEFAULT_MAX_ATTEMPTS, check=at_least(1),
                                help="tries per provider before failing over")
    base_delay_s: float = setting(DEFAULT_BASE_DELAY_S, check=at_least(0),
                                  help="first backoff wait; doubles per attempt")
    max_delay_s: float = setting(DEFAULT_MAX_DELAY_S, check=at_least(0),
                                 help="longest backoff wait")
    retry_after_cap_s: float = setting(DEFAULT_RETRY_AFTER_CAP_S, check=at_least(0),
                                       help="longest Retry-After honoured")
    # Spread retries: "none", "full" or "equal"; unset, the config's retry_jitter decides.
    jitter: Jitter | None = None


SETTINGS_PATH = "$.failover"


def router_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """``[failover]`` checked, as keyword arguments of :class:`FailoverRouter`.

    :raises lich.config.ConfigError: naming every bad ``$.failover`` key.
    """
    return attrs.asdict(structure_settings(settings, FailoverSettings, SETTINGS_PATH))



@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[failover]``: retries and backoff of the router."""
    tables.claim("failover", FailoverSettings,
                 help="the failover router: attempts per provider and backoff")


@hookimpl(trylast=True)
def lich_make_router(providers: list[Provider], config: LichConfig) -> FailoverRouter | None:
    """Return the failover router over ``providers`` (config order)."""
    if not providers:
        return None
    settings = router_settings(config.table("failover"))
    settings["jitter"] = settings["jitter"] or config.retry_jitter or "none"
    return FailoverRouter(providers, **settings)
