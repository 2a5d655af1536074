"""fetch_url, web_search, http_request, and the SSRF guard.

Only loopback servers are contacted. "Private" destinations other than
loopback (10.0.0.1, 169.254.169.254) are checked at the guard; when
``allow_private`` lets them through, the request goes to an
``httpx.MockTransport`` that records it, so nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from lich_builtin_tools._net import NetGuard, blocked_reason

from .conftest import Hit, LoopbackServer, Runner

ServerFactory = Callable[..., LoopbackServer]
ALLOW = {"allow_private": True}


def _resolver(table: dict[str, Sequence[str]]) -> Any:
    async def resolve(host: str, port: int) -> list[str]:
        if host in table:
            return list(table[host])
        raise socket.gaierror(f"unknown test host {host}")

    return resolve


# ---------------------------------------------------------------- fetch_url


async def test_fetch_html_header_marker_and_body(run: Runner, http_server: ServerFactory) -> None:
    server = http_server()
    server.routes["/page"] = (200, {"content-type": "text/html; charset=utf-8"},
                              b"<html><body>hello</body></html>")
    result = await run("fetch_url", {"url": server.url("/page")}, settings=ALLOW)
    assert result.ok, result
    assert result.output.startswith("# 200 text/html; charset=utf-8 (")
    assert result.output == (
        "# 200 text/html; charset=utf-8 (31 bytes)\n[html content]\n<html><body>hello</body></html>"
    )
    assert server.hits[0].headers["user-agent"].startswith("Mozilla/5.0 (X11; Linux x86_64)")


async def test_fetch_errors(run: Runner, http_server: ServerFactory) -> None:
    server = http_server()
    server.routes["/png"] = (200, {"content-type": "image/png"}, b"\x89PNG")
    server.routes["/bin"] = (200, {"content-type": "application/octet-stream"}, b"\x00")
    assert (await run("fetch_url", {"url": server.url("/missing")}, settings=ALLOW)
            ).error == "http_404"
    assert (await run("fetch_url", {"url": server.url("/png")}, settings=ALLOW)
            ).error == "unsupported_content_type: image/png"
    assert (await run("fetch_url", {"url": server.url("/bin")}, settings=ALLOW)
            ).error == "unsupported_content_type: application/octet-stream"
    assert (await run("fetch_url", {"url": "not a url"})).error == "invalid_url: not a url"
    assert (await run("fetch_url", {"url": "ftp://example.com/x"})
            ).error == "invalid_url: unsupported protocol ftp:"
    assert (await run("fetch_url", {"url": "file:///etc/passwd"})
            ).error == "invalid_url: unsupported protocol file:"
    assert (await run("fetch_url", {})).error == "missing_arg: url"


async def test_fetch_connection_refused_surfaces(
    run: Runner, refused_port: Callable[[], int]
) -> None:
    port = refused_port()
    result = await run("fetch_url", {"url": f"http://127.0.0.1:{port}/"}, settings=ALLOW)
    assert result.error is not None
    assert result.error.startswith("network_error:")
    assert "refused" in result.error.lower()


async def test_fetch_clamps_chars_and_decodes_the_charset(
    run: Runner, http_server: ServerFactory
) -> None:
    server = http_server()
    server.routes["/latin"] = (200, {"content-type": "text/plain; charset=latin-1"},
                               "café ".encode("latin-1") * 10)
    result = await run("fetch_url", {"url": server.url("/latin"), "max_chars": 12},
                       settings=ALLOW)
    assert result.output.startswith("# 200 text/plain; charset=latin-1 (50 bytes)\ncafé café ca")
    assert "[... truncated," in result.output


async def test_fetch_reads_an_endless_body_only_up_to_the_cap(
    run: Runner, http_server: ServerFactory
) -> None:
    server = http_server()

    def endless(hit: Hit) -> None:
        handler = hit.handler
        handler.send_response(200)
        handler.send_header("content-type", "text/plain")
        handler.end_headers()  # no content-length: the body lasts until the connection closes
        try:
            # 256 MiB: "endless" for the tool. Bounded so that a tool reading it all
            # fails on the size it reports, not on the clock.
            for _ in range(4096):
                handler.wfile.write(b"z" * 65536)
        except OSError:
            pass  # the client stopped reading: what we want

    server.routes["/endless"] = endless
    result = await run("fetch_url", {"url": server.url("/endless"), "max_chars": 1000},
                       settings=ALLOW)
    assert result.ok
    assert result.output.startswith("# 200 text/plain (more than 4000 bytes)\n" + "z" * 1000)


async def test_fetch_timeout(run: Runner, http_server: ServerFactory) -> None:
    server = http_server()

    def slow(hit: Hit) -> tuple[int, dict[str, str], bytes]:
        time.sleep(3)
        return 200, {"content-type": "text/plain"}, b"late"

    server.routes["/slow"] = slow
    result = await run("fetch_url", {"url": server.url("/slow"), "timeout_ms": 200},
                       settings=ALLOW)
    assert result.error == "timeout: fetch_url exceeded 200ms"


# ---------------------------------------------------------------- web_search

DDG_PAGE = """
<div class="result">
  <a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fnodejs.org%2Fen&amp;rut=abc">Node.js &amp; More</a>
</div>
<div class="result">
  <a class="result__a" href="https://github.com/nodejs/node"><b>nodejs</b>/node &#x27;repo&#x27;</a>
</div>
<a href="https://ignored.example" class="result__a">href before class: not a result</a>
"""  # noqa: E501


async def test_web_search_parses_results(run: Runner, http_server: ServerFactory) -> None:
    server = http_server()
    server.routes["/html/"] = (200, {"content-type": "text/html"}, DDG_PAGE.encode())
    settings = {"base_url": server.url("/html/"), "allow_private": True}
    result = await run("web_search", {"query": "node js"}, settings=settings)
    assert result.ok, result
    assert result.output == (
        "1. Node.js & More\n   https://nodejs.org/en\n"
        "2. nodejs/node 'repo'\n   https://github.com/nodejs/node"
    )
    hit = server.hits[0]
    assert hit.path == "/html/?q=node+js"
    assert hit.headers["accept-language"] == "en"
    one = await run("web_search", {"query": "node", "max_results": 1}, settings=settings)
    assert one.output == "1. Node.js & More\n   https://nodejs.org/en"


async def test_web_search_no_results_and_failures(
    run: Runner, http_server: ServerFactory, refused_port: Callable[[], int]
) -> None:
    server = http_server()
    server.routes["/empty"] = (200, {"content-type": "text/html"}, b"<html></html>")
    server.routes["/forbidden"] = (403, {}, b"no")
    allow = {"allow_private": True}
    assert (await run("web_search", {"query": "x"},
                      settings={**allow, "base_url": server.url("/empty")})).output == "no results"
    assert (await run("web_search", {"query": "x"},
                      settings={**allow, "base_url": server.url("/forbidden")})
            ).error == "search_failed: http_403"
    dead = f"http://127.0.0.1:{refused_port()}/"
    failed = await run("web_search", {"query": "x"}, settings={**allow, "base_url": dead})
    assert failed.error is not None
    assert failed.error.startswith("search_failed: network_error:")
    # The configured base URL is guarded like any other: loopback needs allow_private.
    blocked = await run("web_search", {"query": "x"}, settings={"base_url": server.url("/empty")})
    assert blocked.error is not None
    assert blocked.error.startswith("search_failed: blocked_url:")


# ---------------------------------------------------------------- http_request


async def test_http_request_method_headers_body_and_output(
    run: Runner, http_server: ServerFactory
) -> None:
    server = http_server()
    server.routes["/api"] = (
        200, {"content-type": "application/json", "ratelimit-remaining": "59"}, b'{"ok":true}'
    )
    result = await run(
        "http_request",
        {"url": server.url("/api"), "method": "post", "headers": {"X-Test": "yes", "N": 5,
                                                                    "Skip": None},
         "body": '{"a":1}'},
        settings=ALLOW,
    )
    assert result.ok, result
    hit = server.hits[0]
    assert (hit.method, hit.body) == ("POST", b'{"a":1}')
    assert hit.headers["x-test"] == "yes"
    assert hit.headers["n"] == "5"
    assert "skip" not in hit.headers
    assert "user-agent" not in hit.headers or "Mozilla" not in hit.headers["user-agent"]
    assert result.output.split("\n") == [
        "# status 200",
        "# content-type application/json",
        "# header content-length: 11",
        "# header ratelimit-remaining: 59",
        "",
        '{"ok":true}',
    ]


async def test_http_request_get_sends_no_body_and_non_2xx_is_ok(
    run: Runner, http_server: ServerFactory
) -> None:
    server = http_server()
    server.routes["/teapot"] = (418, {"content-type": "text/plain", "retry-after": "7"}, b"short")
    result = await run("http_request", {"url": server.url("/teapot"), "body": "ignored"},
                       settings=ALLOW)
    assert result.ok
    assert server.hits[0].body == b""
    assert "content-length" not in server.hits[0].headers
    assert result.output.startswith("# status 418\n# content-type text/plain\n")
    assert "# header retry-after: 7" in result.output
    assert (await run("http_request", {"url": server.url("/"), "method": "TRACE"})
            ).error == "invalid_method: TRACE"
    head = await run("http_request", {"url": server.url("/teapot"), "method": "HEAD"},
                     settings=ALLOW)
    assert head.output.endswith("\n\n")


async def test_http_request_refuses_header_injection(run: Runner) -> None:
    result = await run("http_request", {"url": "http://example.com/",
                                        "headers": {"X": "a\r\nHost: evil"}})
    assert result.error == "invalid_header: X: header names and values are single lines"


# ---------------------------------------------------------------- SSRF guard

BLOCKED_URLS = [
    ("http://127.0.0.1:{port}/", "loopback"),
    ("http://localhost:{port}/", "loopback"),
    ("http://[::1]:{port}/", "loopback"),
    ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
    ("http://10.0.0.1/", "private"),
    ("http://[::ffff:127.0.0.1]:{port}/", "loopback (embedded in IPv6)"),
    ("http://2130706433:{port}/", "loopback"),  # 127.0.0.1 as one decimal number
    ("http://0.0.0.0:{port}/", "unspecified"),
    ("http://[fd00:ec2::254]/", "cloud metadata"),
    ("http://192.168.1.1/", "private"),
    ("http://100.64.0.1/", "not globally routable"),
]


@pytest.mark.parametrize("tool", ["fetch_url", "http_request"])
@pytest.mark.parametrize(("template", "reason"), BLOCKED_URLS)
async def test_private_destinations_are_refused_by_default(
    run: Runner, http_server: ServerFactory, tool: str, template: str, reason: str
) -> None:
    server = http_server()
    server.routes["/"] = (200, {"content-type": "text/plain"}, b"INTERNAL")
    url = template.format(port=server.port)
    result = await run(tool, {"url": url})
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith(f"blocked_url: {url.rstrip('/')}")
    assert f"resolves to a {reason} address" in result.error
    assert f"set [tools.{tool}] allow_private = true" in result.error
    assert server.hits == []


@pytest.mark.parametrize("tool", ["fetch_url", "http_request"])
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_loopback_is_allowed_with_allow_private(
    run: Runner, http_server: ServerFactory, tool: str, host: str
) -> None:
    server = http_server()
    server.routes["/"] = (200, {"content-type": "text/plain"}, b"INTERNAL")
    result = await run(tool, {"url": server.url("/", host=host)}, settings=ALLOW)
    assert result.ok, result
    assert result.output.endswith("INTERNAL")


async def test_ipv6_loopback_is_allowed_with_allow_private(
    run: Runner, http_server: ServerFactory
) -> None:
    try:
        server = http_server("::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    server.routes["/"] = (200, {"content-type": "text/plain"}, b"V6")
    result = await run("fetch_url", {"url": server.url("/")}, settings=ALLOW)
    assert result.ok, result
    assert result.output.endswith("V6")


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/"])
async def test_non_loopback_private_is_allowed_with_allow_private(run: Runner, url: str) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"content-type": "text/plain"}, text="mocked")

    run.net = NetGuard(transport=httpx.MockTransport(handler))
    refused = await run("fetch_url", {"url": url})
    assert refused.error is not None
    assert refused.error.startswith("blocked_url:")
    assert seen == []
    allowed = await run("fetch_url", {"url": url}, settings=ALLOW)
    assert allowed.ok, allowed
    assert str(seen[0].url) == url


async def test_redirect_from_an_allowed_host_to_loopback_is_refused(
    run: Runner, http_server: ServerFactory
) -> None:
    public = http_server()  # plays a public host, marked allowed through the seam
    internal = http_server()
    internal.routes["/secret"] = (200, {"content-type": "text/plain"}, b"INTERNAL-SECRET")
    public.routes["/go"] = (302, {"location": internal.url("/secret")}, b"")
    public.routes["/ok"] = (200, {"content-type": "text/plain"}, b"public page")
    run.net = NetGuard(
        resolver=_resolver({"public.test": ["127.0.0.1"], "127.0.0.1": ["127.0.0.1"]}),
        exempt={("127.0.0.1", public.port)},
    )
    start = f"http://public.test:{public.port}"
    # The allowed host itself works without allow_private.
    ok = await run("fetch_url", {"url": f"{start}/ok"})
    assert ok.ok, ok
    assert ok.output.endswith("public page")
    # Its Host header still names it, although the connection went to the checked address.
    assert public.hits_for("/ok")[0].headers["host"] == f"public.test:{public.port}"

    for tool in ("fetch_url", "http_request"):
        refused = await run(tool, {"url": f"{start}/go"})
        assert refused.error is not None, tool
        assert refused.error.startswith(f"blocked_url: {internal.url('/secret')}")
        assert "INTERNAL-SECRET" not in refused.output
    assert internal.hits == []

    followed = await run("fetch_url", {"url": f"{start}/go"}, settings=ALLOW)
    assert followed.ok, followed
    assert followed.output.endswith("INTERNAL-SECRET")
    assert len(internal.hits_for("/secret")) == 1


async def test_a_host_resolving_to_any_private_address_is_refused(run: Runner) -> None:
    run.net = NetGuard(resolver=_resolver({"mixed.test": ["93.184.216.34", "10.1.2.3"]}))
    result = await run("fetch_url", {"url": "http://mixed.test/"})
    assert result.error is not None
    assert "private address (10.1.2.3)" in result.error


async def test_unresolvable_host(run: Runner) -> None:
    run.net = NetGuard(resolver=_resolver({}))
    result = await run("fetch_url", {"url": "http://nowhere.test/"})
    assert result.error is not None
    assert result.error.startswith("network_error: cannot resolve nowhere.test")


async def test_redirect_loops_stop(run: Runner, http_server: ServerFactory) -> None:
    server = http_server()
    server.routes["/loop"] = (302, {"location": "/loop"}, b"")
    result = await run("fetch_url", {"url": server.url("/loop")}, settings=ALLOW)
    assert result.error == "too_many_redirects: more than 10"


async def test_redirects_drop_credentials_across_origins_and_post_becomes_get(
    run: Runner, http_server: ServerFactory
) -> None:
    a = http_server()
    b = http_server()
    b.routes["/land"] = (200, {"content-type": "text/plain"}, b"landed")
    a.routes["/form"] = (302, {"location": b.url("/land")}, b"")
    result = await run(
        "http_request",
        {"url": a.url("/form"), "method": "POST", "body": "x=1",
         "headers": {"Authorization": "Bearer s3cret", "X-Keep": "1"}},
        settings=ALLOW,
    )
    assert result.ok, result
    assert a.hits[0].headers["authorization"] == "Bearer s3cret"
    landed = b.hits_for("/land")[0]
    assert landed.method == "GET"
    assert landed.body == b""
    assert "authorization" not in landed.headers
    assert landed.headers["x-keep"] == "1"


async def test_redirect_to_another_protocol_is_refused(
    run: Runner, http_server: ServerFactory
) -> None:
    server = http_server()
    server.routes["/ftp"] = (301, {"location": "file:///etc/passwd"}, b"")
    result = await run("fetch_url", {"url": server.url("/ftp")}, settings=ALLOW)
    assert result.error == (
        "invalid_redirect: file:///etc/passwd (invalid_url: unsupported protocol file:)"
    )


async def test_allow_private_must_be_a_boolean(run: Runner) -> None:
    result = await run("fetch_url", {"url": "http://127.0.0.1/"},
                       settings={"allow_private": "yes"})
    assert result.error == (
        "invalid_setting: $.tools.fetch_url.allow_private: expected true or false, got string"
    )


def test_blocked_reason_classifies_addresses() -> None:
    assert blocked_reason("8.8.8.8") is None
    assert blocked_reason("2606:4700:4700::1111") is None
    assert blocked_reason("127.5.6.7") == "loopback"
    assert blocked_reason("::1") == "loopback"
    assert blocked_reason("fe80::1") == "link-local"
    assert blocked_reason("fe80::1%2") == "link-local"
    assert blocked_reason("169.254.1.1") == "link-local"
    assert blocked_reason("169.254.169.254") == "cloud metadata"
    assert blocked_reason("172.16.0.1") == "private"
    assert blocked_reason("fc00::1") == "private"
    assert blocked_reason("224.0.0.1") == "multicast"
    assert blocked_reason("64:ff9b::a00:1") == "private (embedded in IPv6)"
    assert blocked_reason("2002:7f00:1::") == "loopback (embedded in IPv6)"


async def test_the_next_checked_address_is_tried_when_one_refuses(
    run: Runner, http_server: ServerFactory
) -> None:
    server = http_server()  # listens on 127.0.0.1 only, so [::1] refuses (or is unreachable)
    server.routes["/"] = (200, {"content-type": "text/plain"}, b"second address")
    run.net = NetGuard(resolver=_resolver({"dual.test": ["::1", "127.0.0.1"]}))
    result = await run("fetch_url", {"url": f"http://dual.test:{server.port}/"}, settings=ALLOW)
    assert result.ok, result
    assert result.output.endswith("second address")
    assert server.hits[0].headers["host"] == f"dual.test:{server.port}"


# ------------------------------------------------------------ content encodings


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _zeros_gzipped(mib: int) -> bytes:
    """``mib`` MiB of zeros, gzipped a MiB at a time (the zeros are never all in memory)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = bytes(1 << 20)
    return b"".join(packer.compress(block) for _ in range(mib)) + packer.flush()


@functools.cache
def _bombs() -> dict[str, tuple[dict[str, str], bytes]]:
    """Bodies whose every 64 kB network chunk expands to tens of megabytes."""
    zeros = _zeros_gzipped(256)  # 256 MiB of zeros in about 250 kB
    raw_deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return {
        "/gzip": ({"content-encoding": "gzip"}, zeros),
        "/stacked": ({"content-encoding": "gzip, gzip"}, _gzip(zeros)),
        "/two-headers": ({"content-encoding": "gzip"}, _gzip(zeros)),  # + a second header below
        "/deflate": ({"content-encoding": "deflate"},
                     b"".join(raw_deflate.compress(bytes(1 << 20)) for _ in range(256))
                     + raw_deflate.flush()),
    }


def _serve_bombs(server: LoopbackServer) -> None:
    for path, (headers, body) in _bombs().items():
        def route(hit: Hit, headers: dict[str, str] = headers, body: bytes = body,
                  path: str = path) -> None:
            handler = hit.handler
            handler.send_response(200)
            handler.send_header("content-type", "text/plain")
            for name, value in headers.items():
                handler.send_header(name, value)
            if path == "/two-headers":
                handler.send_header("content-encoding", "gzip")
            handler.send_header("content-length", str(len(body)))
            handler.end_headers()
            with contextlib.suppress(OSError):  # the client stops reading at its cap
                handler.wfile.write(body)

        server.routes[path] = route
    server.routes["/small"] = (200, {"content-type": "text/plain"}, b"small")


@pytest.mark.parametrize("path", ["/gzip", "/stacked", "/two-headers", "/deflate"])
async def test_a_decompression_bomb_is_capped_with_memory_bounded(
    http_server: ServerFactory, tmp_path: Path, path: str
) -> None:
    # In a process of its own, so that its peak resident size is this fetch's alone.
    server = http_server()
    _serve_bombs(server)
    child = Path(__file__).with_name("_fetch_child.py")

    def measure(target: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(child), server.url("/small"), server.url(target), "1000"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        return report

    baseline = measure("/small")
    bomb = measure(path)
    growth = (bomb["after"] - bomb["before"]) * 1024  # ru_maxrss is in KiB on Linux
    baseline_growth = (baseline["after"] - baseline["before"]) * 1024
    # 256 MiB of zeros behind it; httpx's own decoding added 64 MiB and more per chunk.
    assert growth < 32 * 1024 * 1024 + baseline_growth, (growth, baseline_growth)
    assert bomb["ok"], bomb["error"]
    header, _, rest = bomb["output"].partition("\n")
    # The content-length counts compressed bytes: the header says what was read.
    assert header == "# 200 text/plain (more than 4000 bytes)"
    assert rest.startswith("\0" * 1000 + "\n[... truncated, 3000 chars omitted ...]")
    assert rest.endswith("\n[body cut: over the 4000-byte cap; the rest was not read]")


async def test_encoded_bodies_are_decoded(run: Runner, http_server: ServerFactory) -> None:
    server = http_server()
    text = b"hello, encoded world\n" * 50
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    server.routes["/gzip"] = (200, {"content-type": "text/plain", "content-encoding": "gzip"},
                              _gzip(text))
    server.routes["/zlib"] = (200, {"content-type": "text/plain", "content-encoding": "deflate"},
                              zlib.compress(text))
    server.routes["/raw"] = (200, {"content-type": "text/plain", "content-encoding": "deflate"},
                             raw.compress(text) + raw.flush())
    server.routes["/stacked"] = (200, {"content-type": "text/plain",
                                       "content-encoding": "deflate, gzip"},
                                 _gzip(zlib.compress(text)))
    server.routes["/identity"] = (200, {"content-type": "text/plain",
                                        "content-encoding": "identity"}, text)
    for path in ("/gzip", "/zlib", "/raw", "/stacked", "/identity"):
        result = await run("fetch_url", {"url": server.url(path)}, settings=ALLOW)
        assert result.ok, (path, result)
        # The content-length of an encoded body is not its size: what was read is.
        assert result.output == f"# 200 text/plain ({len(text)} bytes)\n{text.decode()}", path
        assert server.hits_for(path)[-1].headers["accept-encoding"] == "gzip, deflate"
    result = await run("http_request", {"url": server.url("/stacked"), "max_chars": 30},
                       settings=ALLOW)
    assert result.ok, result
    assert result.output.endswith("\n[body cut: over the 120-byte cap; the rest was not read]")


async def test_a_corrupt_encoded_body_is_a_network_error(run: Runner,
                                                         http_server: ServerFactory) -> None:
    server = http_server()
    server.routes["/bad"] = (200, {"content-type": "text/plain", "content-encoding": "gzip"},
                             b"\x1f\x8b\x08\x00not really gzip at all")
    result = await run("fetch_url", {"url": server.url("/bad")}, settings=ALLOW)
    assert result.error is not None
    assert result.error.startswith("network_error: cannot decode the gzip body:"), result.error


async def test_an_encoding_lich_does_not_decode_is_passed_on_capped(
    run: Runner, http_server: ServerFactory
) -> None:
    server = http_server()
    server.routes["/br"] = (200, {"content-type": "text/plain", "content-encoding": "br"},
                            b"\x8b" * 10_000)
    result = await run("http_request", {"url": server.url("/br"), "max_chars": 100},
                       settings=ALLOW)
    assert result.ok, result
    assert result.output.endswith("[body cut: over the 400-byte cap; the rest was not read]")
