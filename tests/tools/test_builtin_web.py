"""fetch_url, web_search, http_request, and the SSRF guard.

Only loopback servers are contacted. "Private" destinations other than
loopback (10.0.0.1, 169.254.169.254) are checked at the guard; when
``allow_private`` lets them through, the request goes to an
``httpx.MockTransport`` that records it, so nothing leaves the machine.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
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


async def test_fetch_connection_refused_surfaces(run: Runner) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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


async def test_web_search_no_results_and_failures(run: Runner, http_server: ServerFactory) -> None:
    server = http_server()
    server.routes["/empty"] = (200, {"content-type": "text/html"}, b"<html></html>")
    server.routes["/forbidden"] = (403, {}, b"no")
    allow = {"allow_private": True}
    assert (await run("web_search", {"query": "x"},
                      settings={**allow, "base_url": server.url("/empty")})).output == "no results"
    assert (await run("web_search", {"query": "x"},
                      settings={**allow, "base_url": server.url("/forbidden")})
            ).error == "search_failed: http_403"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/"
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
