"""Outbound HTTP for the web tools, behind an SSRF guard.

Every hop of a request — the first URL and each redirect — is checked the
same way: the host is resolved, and if *any* address it resolves to is
loopback, private, link-local, cloud metadata, multicast, reserved or
otherwise not globally routable (IPv4 and IPv6, including IPv4 embedded in
IPv6), the request is refused unless the tool's ``allow_private`` setting is
true. The connection then goes to the address that was checked (the URL's
host is replaced by the IP; ``Host`` and TLS SNI keep the name), so a DNS
answer that changes between check and connect cannot slip through.
Redirects are followed by hand for that reason, and bodies are read as a
stream up to a byte cap.

Content encodings (``gzip``, ``deflate``, stacked as in ``gzip, gzip``) are
undone here rather than by httpx, whose decoders hand back whatever one
network chunk expands to: 2 MB of gzip could become hundreds of megabytes in
memory before a cap of a few kilobytes was even checked. Here the compressed
bytes are counted as they arrive and each decoder is asked for at most the
room left under the cap, so memory stays bounded by the cap whatever the
ratio. Only what can be decoded this way is asked for (``accept-encoding:
gzip, deflate``); a body in another encoding is passed on as it came.

httpx is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from attrs import field, frozen

from lich.guards import ToolError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "FetchResult",
    "NetGuard",
    "Resolver",
    "blocked_reason",
    "parse_http_url",
    "system_resolver",
]

Resolver: TypeAlias = Callable[[str, int], Awaitable[Sequence[str]]]

MAX_REDIRECTS = 10
_REDIRECTS = (301, 302, 303, 307, 308)
# Credentials must not follow a redirect to another origin.
_ORIGIN_BOUND_HEADERS = ("authorization", "cookie", "proxy-authorization")
_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# The encodings _Decoder undoes with bounded output, in accept-encoding form.
ACCEPT_ENCODING = "gzip, deflate"
# Decoded bytes asked of a decoder at a time: what one step can hold in memory.
_DECODE_STEP = 64 * 1024


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the event loop's ``getaddrinfo``)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        ip = str(sockaddr[0])
        if ip not in seen:
            seen.append(ip)
    return seen


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    return None


def blocked_reason(ip: str) -> str | None:
    """Why a request to ``ip`` is refused by default, or ``None`` if it is public."""
    try:
        addr: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(ip)
    except ValueError:
        return "unparseable address"
    if isinstance(addr, ipaddress.IPv6Address):
        inner = _embedded_ipv4(addr)
        if inner is not None:
            reason = blocked_reason(str(inner))
            if reason is not None:
                return f"{reason} (embedded in IPv6)"
        if addr.scope_id:
            addr = ipaddress.IPv6Address(str(addr).split("%", 1)[0])
    if addr in _METADATA:
        return "cloud metadata"
    if addr.is_loopback:
        return "loopback"
    if addr.is_link_local:
        return "link-local"
    if addr.is_unspecified:
        return "unspecified"
    if addr.is_multicast:
        return "multicast"
    if addr.is_private:
        return "private"
    if addr.is_reserved or not addr.is_global:
        return "not globally routable"
    return None


def parse_http_url(raw: str) -> httpx.URL:
    """``raw`` as an http(s) URL with a host, or ``invalid_url: …``."""
    import httpx

    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ToolError(f"invalid_url: {raw}") from exc
    if not url.scheme:
        raise ToolError(f"invalid_url: {raw}")
    if url.scheme not in ("http", "https"):
        raise ToolError(f"invalid_url: unsupported protocol {url.scheme}:")
    if not url.host:
        raise ToolError(f"invalid_url: {raw}")
    return url


@frozen
class FetchResult:
    """A response whose body was read up to the cap."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    truncated: bool
    url: str
    cut: str = ""
    """Why the body was cut short (``""`` when it was not): the cap it reached."""

    @property
    def content_type(self) -> str:
        """The ``content-type`` header ('' when absent)."""
        return self.headers.get("content-type", "")

    def size_label(self) -> str:
        """``<n>``: the content-length if given, else what was read (``more than <n>`` if cut).

        The content-length of an encoded body counts compressed bytes: it is not used then.
        """
        length = self.headers.get("content-length", "")
        encoded = self.headers.get("content-encoding", "identity").strip().lower()
        if length.isdigit() and encoded in ("", "identity"):
            return length
        return f"more than {len(self.body)}" if self.truncated else str(len(self.body))

    def cut_note(self) -> str:
        """A line saying the body was cut and why (``""`` when it was not)."""
        return f"[body cut: {self.cut}; the rest was not read]" if self.cut else ""


@frozen
class NetGuard:
    """The SSRF guard and HTTP runner shared by fetch_url, http_request and web_search.

    :param resolver: ``async (host, port) -> [ip, ...]``; injectable for tests.
    :param exempt: ``(ip, port)`` pairs that are never refused — a test seam
        that lets one loopback server play an "allowed" public host.
    :param transport: an httpx transport to send through (tests); default is httpx's.
    """

    resolver: Resolver = system_resolver
    exempt: frozenset[tuple[str, int]] = field(default=frozenset(), converter=frozenset)
    transport: Any = None
    max_redirects: int = MAX_REDIRECTS

    async def check(self, url: httpx.URL, *, allow_private: bool, tool: str) -> list[str]:
        """Resolve ``url``'s host and return the addresses to connect to, or refuse.

        Every address must pass: a name that resolves to one public and one
        private address is refused.

        :raises ToolError: ``blocked_url: …`` when an address is not public and
            ``allow_private`` is off; ``network_error: …`` when the host does not resolve.
        """
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = list(await self.resolver(host, port))
        except OSError as exc:
            raise ToolError(f"network_error: cannot resolve {host}: {exc}") from exc
        if not addresses:
            raise ToolError(f"network_error: cannot resolve {host}")
        if not allow_private:
            for ip in addresses:
                reason = blocked_reason(ip)
                if reason is not None and (ip, port) not in self.exempt:
                    raise ToolError(
                        f"blocked_url: {url} resolves to a {reason} address ({ip}); "
                        f"set [tools.{tool}] allow_private = true to allow it"
                    )
        return addresses

    async def _send_pinned(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: httpx.URL,
        addresses: Sequence[str],
        headers: Mapping[str, str],
        body: bytes | None,
    ) -> httpx.Response:
        """Try the checked addresses in resolver order until one accepts the connection."""
        import httpx

        for i, ip in enumerate(addresses):
            try:
                return await _send_one(client, method, url, ip, headers, body)
            except httpx.ConnectError:
                if i == len(addresses) - 1:
                    raise
        raise AssertionError("unreachable: check() returns at least one address")

    async def request(
        self,
        method: str,
        raw_url: str,
        *,
        tool: str,
        allow_private: bool,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        max_bytes: int,
        before_body: Callable[[FetchResult], None] | None = None,
    ) -> FetchResult:
        """Send ``method raw_url``, following redirects by hand, each hop checked.

        ``before_body`` sees the final response (without body) and may raise to
        skip reading it (e.g. an unsupported content type). The caller bounds
        the total time.
        """
        import httpx

        url = parse_http_url(raw_url)
        sent_headers = {k: v for k, v in (headers or {}).items() if k.lower() != "host"}
        if not any(k.lower() == "accept-encoding" for k in sent_headers):
            # httpx would also offer br and zstd when their packages are installed;
            # only what _Decoder decodes with bounded memory is asked for.
            sent_headers["accept-encoding"] = ACCEPT_ENCODING
        client = httpx.AsyncClient(
            transport=self.transport,
            trust_env=False,  # a proxy from the environment would bypass the pinned address
            follow_redirects=False,
            timeout=None,  # the caller's deadline covers the whole exchange
        )
        try:
            for _hop in range(self.max_redirects + 1):
                addresses = await self.check(url, allow_private=allow_private, tool=tool)
                client.cookies.clear()  # cookies would be keyed by the pinned IP: keep none
                response = await self._send_pinned(client, method, url, addresses,
                                                   sent_headers, body)
                try:
                    location = response.headers.get("location")
                    if response.status_code in _REDIRECTS and location:
                        try:
                            next_url = parse_http_url(str(url.join(location)))
                        except ToolError as exc:
                            raise ToolError(f"invalid_redirect: {location} ({exc})") from exc
                        if (response.status_code == 303 and method != "HEAD") or (
                            response.status_code in (301, 302) and method == "POST"
                        ):
                            method, body = "GET", None
                        if (next_url.scheme, next_url.host, next_url.port) != (
                            url.scheme, url.host, url.port
                        ):
                            sent_headers = {
                                k: v for k, v in sent_headers.items()
                                if k.lower() not in _ORIGIN_BOUND_HEADERS
                            }
                        url = next_url
                        continue
                    head = FetchResult(
                        status=response.status_code,
                        headers={k.lower(): v for k, v in response.headers.items()},
                        body=b"",
                        truncated=False,
                        url=str(url),
                    )
                    if before_body is not None:
                        before_body(head)
                    data, cut = await _read_capped(response, max_bytes)
                    return FetchResult(head.status, head.headers, data, bool(cut), str(url),
                                       cut)
                finally:
                    await response.aclose()
            raise ToolError(f"too_many_redirects: more than {self.max_redirects}")
        except httpx.InvalidURL as exc:
            raise ToolError(f"invalid_url: {exc}") from exc
        except httpx.TimeoutException as exc:
            raise ToolError(f"network_error: timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise ToolError(f"network_error: {_describe(exc)}") from exc
        finally:
            await client.aclose()


async def _send_one(
    client: httpx.AsyncClient,
    method: str,
    url: httpx.URL,
    ip: str,
    headers: Mapping[str, str],
    body: bytes | None,
) -> httpx.Response:
    """Send to ``ip`` (already checked) while ``Host`` and TLS SNI keep the URL's name."""
    extensions: dict[str, Any] = {}
    if url.scheme == "https" and not _is_ip(url.host):
        extensions["sni_hostname"] = url.raw_host.decode("ascii")
    request = client.build_request(
        method,
        url.copy_with(host=ip.split("%", 1)[0]),
        headers={**headers, "Host": url.netloc.decode("ascii")},
        content=body if body else None,
        extensions=extensions,
    )
    return await client.send(request, stream=True)


def _describe(exc: BaseException) -> str:
    """The error's text plus the OS reason underneath (``Connection refused``), if any.

    httpx's connect errors often say only "All connection attempts failed".
    """
    text = str(exc) or type(exc).__name__
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno:
            reason = os.strerror(cause.errno)
            return text if reason.lower() in text.lower() else f"{text} ({reason})"
        cause = cause.__cause__ or cause.__context__
    return text


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class _Decoder:
    """One content encoding undone with bounded output (:meth:`feed` yields pieces of
    at most ``limit`` bytes, however much they expand)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        # gzip: a gzip header; deflate: the zlib wrapper, which many servers leave
        # out (raw deflate) — tried first, as httpx does, with raw as the fallback.
        wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self.inflate = zlib.decompressobj(wbits)
        self.first = encoding == "deflate"

    @property
    def done(self) -> bool:
        """Whether the compressed stream ended (bytes after it are ignored, as by httpx)."""
        return self.inflate.eof

    def feed(self, data: bytes, limit: Callable[[], int]) -> Iterator[bytes]:
        """The decoded pieces of ``data``, each at most ``limit()`` bytes (asked anew each time)."""
        pending = data
        while not self.inflate.eof:
            room = max(1, limit())
            try:
                out = self.inflate.decompress(pending, room)
            except zlib.error as exc:
                if not self.first:
                    raise ToolError(
                        f"network_error: cannot decode the {self.encoding} body: {exc}"
                    ) from None
                self.inflate = zlib.decompressobj(-zlib.MAX_WBITS)
                self.first = False
                continue
            self.first = False
            pending = self.inflate.unconsumed_tail
            if out:
                yield out
            # A full piece may leave output inside zlib though all input was taken.
            if not pending and len(out) < room:
                return


def _decoders(response: httpx.Response) -> list[_Decoder] | None:
    """The decoders for the response's content-encoding, the last applied first;
    ``None`` when an encoding is not one lich decodes (the body is passed on as it is)."""
    encodings = [e.strip().lower() for e in
                 response.headers.get_list("content-encoding", split_commas=True)]
    decoders: list[_Decoder] = []
    for encoding in reversed(encodings):
        if encoding in ("", "identity"):
            continue
        if encoding not in ("gzip", "x-gzip", "deflate"):
            return None
        decoders.append(_Decoder(encoding))
    return decoders


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, str]:
    """At most ``max_bytes`` of the decoded body, and why it was cut (``""`` if it was not).

    The compressed bytes are capped too (at twice the cap plus 64 KiB: a body that
    compresses at all is far smaller), so a stream that decodes to nothing — empty
    deflate blocks for ever — ends as well.
    """
    import httpx

    try:
        # A response made with its content (a mock transport's) has no raw stream
        # left; its content is what there is, already decoded.
        content = response.content
    except httpx.ResponseNotRead:
        decoders = _decoders(response)
        stream = response.aiter_raw()
    else:
        decoders = []
        stream = _once(content)
    chunks: list[bytes] = []
    size = 0
    raw_size = 0
    raw_cap = max_bytes if not decoders else 2 * max_bytes + 65536

    def room() -> int:
        # One byte over the cap tells "exactly the cap" from "more than the cap".
        return min(_DECODE_STEP, max_bytes + 1 - size)

    def pump(stage: int, data: bytes) -> Iterator[bytes]:
        if decoders is None or stage == len(decoders):
            yield data
            return
        for piece in decoders[stage].feed(data, room):
            yield from pump(stage + 1, piece)

    async for raw in stream:
        raw_size += len(raw)
        for piece in pump(0, raw):
            take = min(len(piece), max_bytes - size)
            chunks.append(piece[:take])
            size += take
            if take < len(piece):
                return b"".join(chunks), f"over the {max_bytes}-byte cap"
        if decoders and decoders[0].done:
            break
        if raw_size > raw_cap:
            return b"".join(chunks), f"over the {raw_cap}-byte cap on encoded bytes"
    return b"".join(chunks), ""
