"""The shared HTTP layer: status kinds, Retry-After, SSE framing, error-body cutting."""

from __future__ import annotations

import email.utils
import re
from collections.abc import AsyncIterator

import pytest

from lich_providers._base import parse_tool_args
from lich_providers._http import (
    SseEvent,
    cut,
    env_proxy,
    iter_sse,
    kind_for_status,
    parse_retry_after,
)

OVERFLOW = re.compile(r"context|token|maximum", re.I)


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [(401, "", "auth"), (403, "", "auth"), (429, "", "rate_limit"), (529, "", "server_error"),
     (500, "", "server_error"), (599, "", "server_error"), (400, "max context", "overflow"),
     (400, "Too many TOKENS", "overflow"), (400, "bad field", "bad_request"),
     (413, "maximum size", "bad_request"), (404, "", "bad_request"), (302, "", "bad_request")],
)
def test_kind_for_status(status: int, body: str, kind: str) -> None:
    assert kind_for_status(status, body, OVERFLOW) == kind


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2", 2.0), (" 0.5 ", 0.5), ("0", 0.0), ("-3", 0.0), ("", None), (None, None),
     ("soon", None), ("nan", None), ("inf", None),
     (email.utils.formatdate(NOW + 90, usegmt=True), 90.0),
     (email.utils.formatdate(NOW - 90, usegmt=True), 0.0),
     ("Wed, 21 Oct 2015 07:28:00", None)],  # no zone: not an HTTP-date
)
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value, now=NOW) == expected


def test_cut() -> None:
    assert cut("abc", 5) == "abc"
    assert cut("abcdefgh", 5) == "abcde… [3 chars omitted]"


async def _lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


async def test_iter_sse_framing() -> None:
    events = [e async for e in iter_sse(_lines(
        ": comment", "event: a", "data: one", "data:two", "id: 7", "", "",
        "data: {\"x\": 1}", "", "retry: 10", "", "data: tail",
    ))]
    assert events == [SseEvent("a", "one\ntwo"), SseEvent("", '{"x": 1}'), SseEvent("", "tail")]


@pytest.mark.parametrize(
    ("raw", "args", "error"),
    [({"a": 1}, {"a": 1}, None), ('{"a": 1}', {"a": 1}, None), ("", {}, None), ("  ", {}, None),
     (None, {}, None), ('{"a": ', {}, "arguments are not valid JSON"),
     ("[1]", {}, "arguments must be a JSON object, got array"),
     ('"x"', {}, "arguments must be a JSON object, got string"),
     (5, {}, "arguments must be a JSON object, got integer"),
     (2.5, {}, "arguments must be a JSON object, got number"),
     ([1], {}, "arguments must be a JSON object, got array")],
)
def test_parse_tool_args(raw: object, args: dict[str, object], error: str | None) -> None:
    got_args, got_error = parse_tool_args(raw)
    assert got_args == args
    if error is None:
        assert got_error is None
    else:
        assert got_error is not None
        assert got_error.startswith(error)


@pytest.mark.parametrize(
    ("env", "url", "expected"),
    [
        ({}, "http://h/x", None),
        ({"HTTP_PROXY": "http://p:1"}, "http://h/x", "http://p:1 from HTTP_PROXY"),
        ({"HTTP_PROXY": "http://p:1"}, "https://h/x", None),
        ({"http_proxy": "p:2", "HTTP_PROXY": "http://p:1"}, "http://h/x",
         "http://p:2 from http_proxy"),
        ({"ALL_PROXY": "socks5://p:3"}, "https://h/x", "socks5://p:3 from ALL_PROXY"),
        ({"HTTPS_PROXY": "http://u:pw@p:4"}, "https://h/x", "http://p:4 from HTTPS_PROXY"),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "example.com,h"}, "http://h/x", None),
        ({"HTTP_PROXY": "http://p:1", "no_proxy": ".example.com"}, "http://a.example.com/", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "*"}, "http://h/x", None),
        ({"HTTP_PROXY": "http://p:1", "NO_PROXY": "xh"}, "http://h/x",
         "http://p:1 from HTTP_PROXY"),
    ],
)
def test_env_proxy_names_the_proxy_a_request_goes_through(
    env: dict[str, str], url: str, expected: str | None
) -> None:
    assert env_proxy(url, env) == expected
