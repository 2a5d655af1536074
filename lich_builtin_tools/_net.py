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

httpx is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
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

    @property
    def content_type(self) -> str:
        """The ``content-type`` header ('' when absent)."""
        return self.headers.get("content-type", "")

    def size_label(self) -> str:
        """``<n>``: the content-length if given, else what was read (``more than <n>`` if cut)."""
        length = self.headers.get("content-length", "")
        if length.isdigit():
            return length
        return f"more than {len(self.body)}" if self.truncated else str(len(self.body))


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
                    data, truncated = await _read_capped(response, max_bytes)
                    return FetchResult(head.status, head.headers, data, truncated, str(url))
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


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """At most ``max_bytes`` of the (decoded) body; whether more was left unread."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        room = max_bytes - size
        if len(chunk) > room:
            chunks.append(chunk[:room])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False
