"""HTTP for the provider plugins: the one place that knows httpx and HTTP statuses.

Every provider owns one :class:`HttpClient`, whose transport is injectable so
tests use ``httpx.MockTransport``. Deviating from DESIGN.md's "one
``httpx.AsyncClient`` per provider", the client keeps its own pool of
single-connection httpx clients, all on that transport (why: see
:class:`HttpClient` and "Connections" in docs/providers.md). The client
speaks JSON in, JSON (or a stream of lines) out, and turns every failure into a
:class:`lich.types.ProviderError` with a kind from the fixed taxonomy:

========== =============================================================
auth       401, 403 (and a missing required key, raised by the provider)
rate_limit 429
server_error every 5xx (and Anthropic's 529 "overloaded")
overflow   400 whose body matches the provider's overflow pattern
bad_request every other non-2xx status; a 2xx body that does not parse
network    connection errors, timeouts, a stream that breaks mid-way
========== =============================================================

Every error names the URL it was sent to, and the proxy from the environment it
went through (:meth:`HttpClient.error`): the one place that maps foreign errors.
A streamed request answered ``200 application/json`` (the server ignored
``stream: true``) raises :class:`WholeAnswer` with the parsed body.

``Retry-After`` (seconds or an HTTP-date) becomes ``retry_after`` in seconds.
Error bodies are cut to :data:`MAX_ERROR_BODY` characters in the message.

An answer larger than :data:`MAX_RESPONSE_BYTES` (after content decoding) is
refused as ``bad_request`` while it is being read, streamed or not: a broken
or hostile server cannot make lich buffer an unbounded body (or one endless
stream line) in memory, nor put it into a transcript.

Cancellation is asyncio task cancellation: ``CancelledError`` is never caught
here, so it reaches the caller unchanged (and httpx closes the connection).
"""

from __future__ import annotations

import asyncio
import codecs
import email.utils
import json
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from attrs import frozen

from lich.guards import truncate_text
from lich.types import ProviderError, ProviderErrorKind

if TYPE_CHECKING:
    import ssl

    import httpx

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "MAX_ERROR_BODY",
    "MAX_RESPONSE_BYTES",
    "HttpClient",
    "SseEvent",
    "SseParser",
    "WholeAnswer",
    "cut",
    "encode_body",
    "env_proxy",
    "error_for_status",
    "iter_sse",
    "kind_for_status",
    "parse_retry_after",
]

MAX_ERROR_BODY = 500
DEFAULT_TIMEOUT_S = 300.0
# Requests in flight per provider (httpx's own default pool size), each on a connection
# of its own that is kept for the next request (see HttpClient, and B3 in
# docs/performance.md for the measurements behind this).
MAX_CONNECTIONS = 100
# Far above any real answer (a 100k-token stream with per-token JSON framing is ~25 MB);
# the point is a bound, not a quota.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
# Only the start of an error body is shown; the rest is not even read.
_MAX_ERROR_READ = 64 * 1024
_NEWLINE = re.compile(r"\r\n|\r|\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as compact UTF-8 JSON (as httpx's ``json=`` encodes it).

    A lone surrogate — from a chat platform's JSON (``"\\ud800"`` is valid JSON), or a
    terminal's undecodable bytes — cannot be encoded as UTF-8; it is sent as U+FFFD
    (as the session file records it), so that one odd character cannot fail every
    later call of the conversation that holds it.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text).encode("utf-8")


_httpx: Any = None  # the module, once _import_httpx() has imported it


def _import_httpx() -> Any:
    """``import httpx``, without httpx's own command line.

    ``httpx/__init__.py`` imports ``httpx._main`` (its CLI: click, rich's console,
    syntax highlighting, progress bars, pygments) whenever those are installed — as
    they are with lich — and keeps a stub ``main`` when that import fails. lich never
    calls ``httpx.main``; the import cost 10–30 ms of every cold start (B2-cold in
    docs/performance.md). A ``None`` entry in ``sys.modules`` makes that one import
    fail; it is removed again at once, so an explicit ``import httpx._main`` later
    still works.
    """
    global _httpx
    if _httpx is not None:  # called several times per request: once imported, at once
        return _httpx
    import sys

    # Through the import statement until it has returned here: a module another thread
    # is still importing is in sys.modules already, and only the import waits for it.
    blocked = "httpx" not in sys.modules and "httpx._main" not in sys.modules
    if blocked:
        sys.modules["httpx._main"] = None  # type: ignore[assignment]
    try:
        import httpx
    finally:
        if blocked and sys.modules.get("httpx._main", 0) is None:
            del sys.modules["httpx._main"]
    _httpx = httpx
    return httpx


_ssl_context: ssl.SSLContext | None = None
_plain_context: ssl.SSLContext | None = None


def _shared_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~45 ms per httpx client; one context (made as httpx
    # would make it, honouring SSL_CERT_FILE / SSL_CERT_DIR) serves every provider.
    global _ssl_context
    if _ssl_context is None:
        httpx = _import_httpx()
        _ssl_context = httpx.create_ssl_context()
    return _ssl_context


def _needs_tls(base_url: str) -> bool:
    """Whether requests to ``base_url`` can use TLS: an ``https`` URL, or a proxy from
    the environment reached over ``https`` (the provider client follows no redirects,
    so a plain ``http`` endpoint never leads to TLS otherwise)."""
    if not base_url.lower().startswith("http://"):
        return True
    proxy = env_proxy(base_url)
    return proxy is not None and proxy.lower().startswith("https://")


def _verify_for(base_url: str) -> ssl.SSLContext:
    """The TLS context of a provider's clients: the shared, CA-loaded one where TLS is
    possible; for a plain ``http://`` endpoint a context with no CA loaded (loading
    the bundle is most of a cold start's TLS cost, ~16 ms), which would refuse every
    certificate if it were ever used — it is not (:func:`_needs_tls`)."""
    if _needs_tls(base_url):
        return _shared_ssl_context()
    global _plain_context
    if _plain_context is None:
        import ssl

        _plain_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return _plain_context


def cut(text: str, limit: int = MAX_ERROR_BODY) -> str:
    """``text`` cut to ``limit`` characters (500 by default), marked when something
    was dropped: the inline :func:`lich.guards.truncate_text`."""
    return truncate_text(text, limit, style="inline")


def kind_for_status(status: int, body: str, overflow: re.Pattern[str]) -> ProviderErrorKind:
    """The error kind for a non-2xx ``status`` whose body is ``body``."""
    if status in (401, 403):
        return "auth"
    if status == 429:
        return "rate_limit"
    if status >= 500:
        return "server_error"
    if status == 400 and overflow.search(body):
        return "overflow"
    return "bad_request"


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP-date), floored at 0.

    ``None`` when the header is absent or unreadable.
    """
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP-date is GMT by definition
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN, inf
        return None
    return max(0.0, seconds)


def _retry_after_from(headers: Mapping[str, str]) -> float | None:
    # OpenAI also sends ``retry-after-ms``; it is the more precise of the two.
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"))


def error_for_status(
    provider: str,
    status: int,
    headers: Mapping[str, str],
    body: str,
    overflow: re.Pattern[str],
) -> ProviderError:
    """The :class:`ProviderError` for a non-2xx answer."""
    kind = kind_for_status(status, body, overflow)
    text = cut(body.strip()) or "(empty body)"
    return ProviderError(
        kind, provider, f"HTTP {status}: {text}", status=status,
        retry_after=_retry_after_from(headers),
    )


@frozen
class SseEvent:
    """One server-sent event: its ``event`` name ('' when unnamed) and ``data``."""

    event: str
    data: str


class SseParser:
    """The ``text/event-stream`` format, one line at a time (no I/O, no generator).

    Multi-line ``data`` is joined with ``\\n``; comments (``:``) and unknown fields
    are ignored. Lines that are no SSE field at all, until the first event, are
    appended to ``stray`` when given (to tell a body that is not a stream from a
    broken one). A plain object rather than one more async generator per stream:
    each layer of those costs every line a resumption, and one left unfinished (a
    consumer that stops at the answer's last event) is finalised by the event loop
    in a task of its own.
    """

    __slots__ = ("_data", "_event", "_seen", "_stray")

    def __init__(self, stray: list[str] | None = None) -> None:
        self._event = ""
        self._data: list[str] = []
        self._seen = False
        self._stray = stray

    def line(self, line: str) -> SseEvent | None:
        """Take one line (without its newline); the event it completes, if any."""
        if not line:
            data, self._data, event, self._event = self._data, [], self._event, ""
            if data:
                self._seen = True
                return SseEvent(event, "\n".join(data))
            return None
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif self._stray is not None and not self._seen and name not in ("id", "retry"):
            self._stray.append(line)
        return None

    def end(self) -> SseEvent | None:
        """The stream ended: the event still open, if any (it is delivered)."""
        data, self._data = self._data, []
        return SseEvent(self._event, "\n".join(data)) if data else None


async def iter_sse(
    lines: AsyncIterator[str], stray: list[str] | None = None
) -> AsyncIterator[SseEvent]:
    """Server-sent events from a stream of lines (see :class:`SseParser`; an event still
    open when the stream ends is delivered)."""
    parser = SseParser(stray)
    async for line in lines:
        event = parser.line(line)
        if event is not None:
            yield event
    event = parser.end()
    if event is not None:
        yield event


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it, outermost first (each once)."""
    out: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and all(cause is not seen for seen in out):
        out.append(cause)
        cause = cause.__cause__ or cause.__context__
    return out


def _transport_reason(exc: BaseException, what: str) -> str:
    """What a transport failure means, in words: "connection refused", not httpx's
    "ConnectError: All connection attempts failed"."""
    import ssl
    from socket import gaierror

    causes = _causes(exc)
    names = {cls.__name__ for cause in causes for cls in type(cause).__mro__}
    for cause in causes:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, gaierror):
            return f"cannot resolve the host name ({cause.strerror or cause})"
        if isinstance(cause, ssl.SSLError):
            return f"TLS failed: {cut(cause.reason or str(cause), 200)}"
    if "ConnectTimeout" in names:
        return "connection timed out"
    detail = str(exc) or _os_reason(exc) or type(exc).__name__
    return f"{what}: {type(exc).__name__}: {cut(detail, 200)}"


def _public_url(url: str) -> str:
    """``url`` without its credentials (``user:password@``), to show in a message."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return url
    if "@" not in parts.netloc or host is None:
        return url
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _bypassed(host: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` (``*``, or host names and domain suffixes) exempts ``host``."""
    host = host.lower()
    for entry in no_proxy.split(","):
        entry = entry.strip().lower().lstrip(".")
        if entry == "*" or (entry and (host == entry or host.endswith(f".{entry}"))):
            return True
    return False


def env_proxy(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The proxy from the environment that a request to ``url`` goes through, as
    ``"<proxy url> from <VARIABLE>"`` (credentials removed), or ``None``.

    Mirrors how httpx picks one (``<scheme>_proxy``, then ``all_proxy``, lower case
    before upper case, ``no_proxy`` honoured); for messages only.
    """
    env = os.environ if env is None else env
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    for base in (parts.scheme.lower(), "all"):
        for var in (f"{base}_proxy", f"{base}_proxy".upper()):
            value = env.get(var, "").strip()
            if not value:
                continue
            if _bypassed(parts.hostname or "", env.get("no_proxy") or env.get("NO_PROXY") or ""):
                return None
            if "://" not in value:
                value = f"http://{value}"
            return f"{_public_url(value)} from {var}"
    return None


def _os_reason(exc: BaseException) -> str:
    # httpx's ReadError for a reset connection has an empty message ("ReadError: ReadError");
    # the OSError underneath says what happened ("Connection reset by peer").
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and (cause.strerror or cause.errno):
            return cause.strerror or os.strerror(cause.errno or 0)
        cause = cause.__cause__ or cause.__context__
    return ""


class WholeAnswer(Exception):
    """A streamed request answered with one complete JSON body, not a stream.

    Some servers and proxies ignore ``stream: true`` and answer ``200
    application/json``. :meth:`HttpClient.stream_lines` raises this (before any line)
    with the parsed body; the provider reads it as its non-streamed answer.
    """

    def __init__(self, data: Any) -> None:
        super().__init__("the server answered with a whole JSON body")
        self.data = data


def _json_lines(text: str) -> list[str] | None:
    """The lines of ``text`` when every non-blank one is a JSON document (NDJSON), else None."""
    lines = _NEWLINE.split(text)
    try:
        for line in lines:
            if line.strip():
                json.loads(line)
    except ValueError:
        return None
    return lines


class _TooLarge(Exception):
    """The answer passed the byte cap (turned into a ``bad_request`` by the client)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


async def _read_capped(response: httpx.Response, cap: int, *, strict: bool = True) -> bytes:
    """The body, read chunk by chunk; past ``cap`` bytes raise :class:`_TooLarge`
    (``strict``) or stop reading and keep what came (error bodies)."""
    declared = response.headers.get("content-length", "")
    if strict and declared.isdigit() and int(declared) > cap:
        raise _TooLarge(int(declared))  # refused before reading a byte
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            if strict:
                raise _TooLarge(size)
            chunks.append(chunk[: len(chunk) - (size - cap)])
            break
        chunks.append(chunk)
    return b"".join(chunks)


# What is left of a body after its consumer stopped reading is read (so that the
# connection can be reused) only if it ends soon and is small; otherwise the
# connection is closed, as it would be without this.
_FINISH_BODY_S = 0.25
_FINISH_BODY_BYTES = 64 * 1024


async def _finish_body(chunks: AsyncIterator[bytes]) -> None:
    """Read and drop the rest of a body, within :data:`_FINISH_BODY_S` and
    :data:`_FINISH_BODY_BYTES`; any failure just leaves the connection to be closed."""
    httpx = _import_httpx()

    size = 0
    try:
        async with asyncio.timeout(_FINISH_BODY_S):
            async for chunk in chunks:
                size += len(chunk)
                if size > _FINISH_BODY_BYTES:
                    return
    except (TimeoutError, httpx.HTTPError):
        pass


class _StallTimer:
    """The "no data for ``timeout_s``" deadline of a stream, with one timer for the whole
    stream instead of an :func:`asyncio.timeout` per chunk (a timer handle scheduled
    and cancelled for every piece, several per streamed answer).

    Only the time spent in :meth:`wait` counts: the clock starts when a wait begins,
    and the timer, when it fires early, re-arms itself for the current wait's
    deadline. When a wait passes its deadline the waiting task is cancelled and
    :meth:`wait` raises :class:`TimeoutError` — the same outcome, and the same
    handling of a cancellation from elsewhere (it is never swallowed), as
    :func:`asyncio.timeout`.
    """

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self._loop = asyncio.get_running_loop()
        self._started: float | None = None  # when the current wait began; None: not waiting
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False

    def _check(self) -> None:
        self._handle = None
        if self._started is None:
            return  # not waiting: the next wait arms the timer again
        due = self._started + self._timeout_s
        if self._loop.time() < due:
            self._handle = self._loop.call_at(due, self._check)
            return
        assert self._task is not None
        self._fired = True
        self._task.cancel()

    async def wait(self, awaitable: Any) -> Any:
        """Await ``awaitable``; :class:`TimeoutError` once it has taken ``timeout_s``."""
        self._started = self._loop.time()
        if self._handle is None:
            self._task = asyncio.current_task()
            self._handle = self._loop.call_at(self._started + self._timeout_s, self._check)
        try:
            return await awaitable
        except asyncio.CancelledError:
            if self._fired and self._task is not None and self._task.uncancel() == 0:
                raise TimeoutError from None
            raise
        finally:
            self._started = None

    def close(self) -> None:
        """Cancel the timer (the stream is over)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class HttpClient:
    """One provider's HTTP client: JSON requests, typed failures.

    :param provider: the provider name put on every error.
    :param base_url: the API root; request paths are appended to it.
    :param overflow: the provider's pattern for "context window exceeded" 400s.
    :param timeout_s: bounds a whole non-streaming call; for a streamed call,
        the wait for the response and every gap between two pieces of it.
    :param transport: an ``httpx.AsyncBaseTransport`` (tests pass ``httpx.MockTransport``).
    :param headers: sent with every request.
    :param max_response_bytes: a larger answer is refused (``bad_request``) as it is read.
    :param path: the path the provider posts to, named in the errors raised outside a
        request (:meth:`bad_stream`, :meth:`broken_stream`, :meth:`error`).
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        overflow: re.Pattern[str],
        timeout_s: float | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: Mapping[str, str] | None = None,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        path: str = "",
    ) -> None:
        self.provider = provider
        self.path = path
        self.base_url = base_url.rstrip("/")
        self.overflow = overflow
        self.timeout_s = timeout_s or DEFAULT_TIMEOUT_S
        self.max_response_bytes = max_response_bytes
        self.headers = dict(headers or {})
        self._transport = transport
        # The connection pool is kept here, not in httpcore: a lane is an httpx client
        # limited to one connection, taken for one request (or one stream) at a time,
        # most recently used first. httpcore's own pool rescans every pooled connection
        # (two syscalls each) on every request and response, and its queue of waiting
        # requests against all of them: that was half the gateway's CPU with 50
        # concurrent conversations, and throughput fell ~5x with 500. Here a request
        # costs the same whatever the concurrency; callers beyond MAX_CONNECTIONS wait
        # on the semaphore.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._lanes: set[httpx.AsyncClient] = set()
        self._idle: list[httpx.AsyncClient] = []

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Pooled connections belong to the loop that opened them; clients carried
            # over from an earlier asyncio.run (Agent.run_sync twice) would fail on
            # them, so start afresh.
            self._lanes, self._idle = set(), []
            self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
            self._loop = loop

    async def _checkout(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        """A lane for one request; hand it back with :meth:`_checkin`."""
        httpx = _import_httpx()

        slots = self._slots
        await slots.acquire()
        if self._idle:
            return self._idle.pop(), slots
        lane = httpx.AsyncClient(
            transport=self._lane_transport(),
            timeout=httpx.Timeout(self.timeout_s),
            headers=self.headers,
            verify=_verify_for(self.base_url) if self._transport is None else True,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )
        self._lanes.add(lane)
        return lane, slots

    def _lane_transport(self) -> httpx.AsyncBaseTransport | None:
        """A new lane's transport: the injected one; else, for a direct connection, one
        on lich's asyncio network backend (lich_providers/_net.py: less CPU per request
        than httpx's anyio path, B1 in docs/performance.md); else (a proxy in the
        environment) None: httpx's own transport, which routes through it."""
        if self._transport is not None:
            return self._transport
        from lich_providers import _net

        if not _net.usable() or _net.environment_has_proxy():
            return None
        return _net.DirectTransport(_verify_for(self.base_url))

    def _checkin(self, lane: httpx.AsyncClient, slots: asyncio.Semaphore) -> None:
        if lane in self._lanes:  # not closed by aclose() (or left behind by a new loop)
            self._idle.append(lane)
        slots.release()

    def url(self, path: str) -> str:
        """The absolute URL of ``path``."""
        return f"{self.base_url}{path}"

    def error(
        self, kind: ProviderErrorKind, message: str, *, path: str | None = None, **fields: Any
    ) -> ProviderError:
        """A :class:`ProviderError` of this provider that names the URL it tried (and the
        proxy from the environment the request went through, if any)."""
        url = self.url(self.path if path is None else path)
        # httpx only honours the environment's proxies on its own transport.
        proxy = env_proxy(url) if self._transport is None else None
        return ProviderError(kind, self.provider, message, url=_public_url(url), proxy=proxy,
                             **fields)

    def _transport_error(
        self, exc: BaseException, what: str, path: str | None = None
    ) -> ProviderError:
        return self.error("network", _transport_reason(exc, what), path=path)

    async def _post(
        self, client: httpx.AsyncClient, path: str, body: Mapping[str, Any],
        headers: Mapping[str, str] | None,
    ) -> httpx.Response:
        # Streamed, so every caller reads the body through its own cap.
        request = client.build_request(
            "POST", self.url(path), content=encode_body(body),
            headers={"content-type": "application/json", **(headers or {})},
        )
        return await client.send(request, stream=True)

    def _error(self, response: httpx.Response, body: str, path: str) -> ProviderError:
        plain = error_for_status(
            self.provider, response.status_code, response.headers, body, self.overflow
        )
        return self.error(plain.kind, plain.message, path=path, status=plain.status,
                          retry_after=plain.retry_after)

    def _too_large(self, status: int, size: int, path: str) -> ProviderError:
        return self.error(
            "bad_request",
            f"response too large: over the {self.max_response_bytes}-byte limit "
            f"(at least {size} bytes); refused",
            path=path, status=status,
        )

    def _bad_body(self, body: str, why: str, path: str) -> ProviderError:
        return self.error(
            "bad_request", f"{why}: {cut(body.strip()) or '(empty body)'}", path=path, status=200
        )

    async def post_json(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> Any:
        """POST ``body`` as JSON and return the parsed 2xx answer."""
        httpx = _import_httpx()

        self._check_loop()
        try:
            async with asyncio.timeout(self.timeout_s):
                client, slots = await self._checkout()
                try:
                    response = await self._post(client, path, body, headers)
                    try:
                        if response.is_success:
                            raw = await _read_capped(response, self.max_response_bytes)
                        else:
                            raw = await _read_capped(response, _MAX_ERROR_READ, strict=False)
                    finally:
                        await response.aclose()
                finally:
                    self._checkin(client, slots)
        except _TooLarge as exc:
            raise self._too_large(response.status_code, exc.size, path) from None
        except TimeoutError as exc:
            raise self.error(
                "network", f"request timed out after {self.timeout_s:g}s", path=path
            ) from exc
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, "request failed", path) from exc
        text = raw.decode(response.encoding or "utf-8", "replace")
        if not response.is_success:
            raise self._error(response, text, path)
        try:
            return json.loads(text)
        except ValueError as exc:
            raise self._bad_body(text, "unparseable response body", path) from exc

    async def stream_lines(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> AsyncGenerator[str, None]:
        """POST ``body`` and yield the 2xx answer line by line as it arrives.

        A failure status raises its :class:`ProviderError` before any line;
        a connection that breaks or stalls mid-way raises ``network``. Use it
        under :func:`contextlib.aclosing` so a cancelled consumer closes the
        connection at once.
        """
        httpx = _import_httpx()

        self._check_loop()
        # The deadlines are enforced here, not only by httpx's socket timeouts,
        # so they hold for any transport.
        try:
            async with asyncio.timeout(self.timeout_s):
                # The lane is held until the stream is closed (the finally below).
                client, slots = await self._checkout()
                try:
                    response = await self._post(client, path, body, headers)
                except BaseException:
                    self._checkin(client, slots)
                    raise
        except TimeoutError as exc:
            raise self.error(
                "network", f"request timed out after {self.timeout_s:g}s", path=path
            ) from exc
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, "request failed", path) from exc
        chunks = response.aiter_bytes()
        try:
            if not response.is_success:
                try:
                    async with asyncio.timeout(self.timeout_s):
                        raw = await _read_capped(response, _MAX_ERROR_READ, strict=False)
                except (TimeoutError, httpx.HTTPError):
                    raw = b""
                raise self._error(response, raw.decode("utf-8", "replace"), path)
            media = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if media == "text/html":
                # A proxy's or a captive portal's page, never a model stream: say so, instead
                # of "the stream ended early" (a network error, retried in vain).
                try:
                    async with asyncio.timeout(self.timeout_s):
                        raw = await _read_capped(response, _MAX_ERROR_READ, strict=False)
                except (TimeoutError, httpx.HTTPError):
                    raw = b""
                raise self._bad_body(raw.decode("utf-8", "replace"),
                                     "expected a streamed answer, got a text/html page", path)
            if media == "application/json" or media.endswith("+json"):
                # A server that ignored `stream: true`: the body is the whole answer.
                async for line in self._whole_json(response, path):
                    yield line
                return
            # Lines are split here rather than by httpx's aiter_lines(), which would buffer
            # an endless line whole: every byte is counted against the cap as it arrives.
            decoder = codecs.getincrementaldecoder(response.encoding or "utf-8")("replace")
            line_parts: list[str] = []  # the line in progress (joined once it ends: linear)
            carry = ""  # a trailing CR may be the first half of a CRLF
            size = 0
            stall = _StallTimer(self.timeout_s)
            try:
                while True:
                    try:
                        chunk = await stall.wait(anext(chunks))
                    except StopAsyncIteration:
                        break
                    except TimeoutError as exc:
                        raise self.error(
                            "network", f"stream stalled: no data for {self.timeout_s:g}s",
                            path=path,
                        ) from exc
                    except httpx.HTTPError as exc:
                        raise self._transport_error(exc, "stream broken", path) from exc
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        raise self._too_large(response.status_code, size, path)
                    text = carry + decoder.decode(chunk)
                    carry = "\r" if text.endswith("\r") else ""
                    text = text[: len(text) - len(carry)]
                    if not _NEWLINE.search(text):
                        line_parts.append(text)
                        continue
                    first, *lines, rest = _NEWLINE.split(text)
                    yield "".join(line_parts) + first
                    for line in lines:
                        yield line
                    line_parts = [rest]
                line_parts.append(decoder.decode(b"", final=True))
                last = "".join(line_parts)
                if last or carry:  # the last line had no newline (or only a held CR)
                    yield last
            except GeneratorExit:
                # The consumer has what it needs (the answer's last event came before the
                # end of the body, as with OpenAI's `[DONE]`). Reading the little that is
                # left lets the connection be reused; closing it here would cost the next
                # call a new connection (and a TLS handshake).
                await _finish_body(chunks)
                raise
            finally:
                stall.close()
        finally:
            try:
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    await close()
                await response.aclose()
            finally:
                self._checkin(client, slots)

    async def _whole_json(
        self, response: httpx.Response, path: str
    ) -> AsyncGenerator[str, None]:
        """A ``200 application/json`` answer to a streamed request: raise
        :class:`WholeAnswer` with it, or yield its lines when it is NDJSON under the
        wrong label; anything else is ``bad_request`` (not retried: the server would
        answer the same again)."""
        httpx = _import_httpx()

        try:
            async with asyncio.timeout(self.timeout_s):
                raw = await _read_capped(response, self.max_response_bytes)
        except _TooLarge as exc:
            raise self._too_large(response.status_code, exc.size, path) from None
        except TimeoutError as exc:
            raise self.error(
                "network", f"response stalled: no data for {self.timeout_s:g}s", path=path
            ) from exc
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, "response broken", path) from exc
        text = raw.decode(response.encoding or "utf-8", "replace")
        try:
            data = json.loads(text)
        except ValueError:
            lines = _json_lines(text) if text.strip() else None
            if lines is None:
                raise self._bad_body(
                    text, "unparseable response body (application/json, asked for a stream)",
                    path,
                ) from None
            for line in lines:
                yield line
            return
        raise WholeAnswer(data)

    def bad_stream(self, why: str, data: str = "") -> ProviderError:
        """The error for a stream whose content makes no sense (``bad_request``)."""
        suffix = f": {cut(data.strip())}" if data.strip() else ""
        return self.error("bad_request", f"{why}{suffix}", status=200)

    def broken_stream(self, why: str) -> ProviderError:
        """The error for a stream that ended before its answer was complete (``network``)."""
        return self.error("network", f"stream broken: {why}")

    async def aclose(self) -> None:
        """Close every connection, idle or in use (new ones are opened by the next request).

        Each lane's ``aclose()`` also closes an injected transport; httpx transports
        allow that more than once, and stay usable.
        """
        lanes, self._lanes, self._idle = self._lanes, set(), []
        loop = self._loop
        if lanes and loop is asyncio.get_running_loop():
            # Clients from an earlier (now closed) loop cannot be closed from this
            # one; their sockets died with that loop.
            for lane in lanes:
                await lane.aclose()
