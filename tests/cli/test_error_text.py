"""What `lich` says when the model call (or its setup) fails: who failed, where, why.

Real loopback sockets throughout: a port that refuses (bound, never listening), a
scripted server that records every request, a proxy named in the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import write_config

NO_BACKOFF = "[failover]\nbase_delay_s = 0\nmax_delay_s = 0"


def error_line(stderr: str) -> str:
    (line,) = [entry for entry in stderr.splitlines() if entry.startswith("lich: error:")]
    return line


def test_a_refused_connection_names_the_provider_and_the_url(
    work: Path, lich: Any, refused_port: Callable[[], int]
) -> None:
    port = refused_port()
    write_config(work, f"http://127.0.0.1:{port}/v1", extra=NO_BACKOFF)

    result = lich("hi")

    assert result.exit_code == 1
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    # One provider: its own error, no "failover: all 1 provider failed" wrapper, and the
    # cause said once (not once per attempt).
    assert error_line(result.stderr) == (
        f"lich: error: model call failed: provider 'scripted' ({url}): "
        "network: connection refused (3 attempts)"
    )
    assert "failover" not in result.stderr
    assert "Traceback" not in result.stderr


def test_a_proxy_from_the_environment_is_named(
    work: Path, lich: Any, scripted: Any, monkeypatch: pytest.MonkeyPatch,
    refused_port: Callable[[], int],
) -> None:
    # The model server works; the proxy in HTTP_PROXY refuses. Reaching the proxy (and
    # failing) proves the request went through it, and the message must say so.
    server = scripted(["never sent"])
    write_config(work, server.base_url, extra=NO_BACKOFF)
    proxy_port = refused_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://user:secret@127.0.0.1:{proxy_port}")
    for var in ("NO_PROXY", "no_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)

    result = lich("hi")

    assert result.exit_code == 1
    line = error_line(result.stderr)
    assert f"({server.base_url}/chat/completions, through the proxy " \
           f"http://127.0.0.1:{proxy_port} from HTTP_PROXY)" in line
    assert line.endswith("network: connection refused (3 attempts)")
    assert "secret" not in result.stderr  # the proxy's credentials are not shown
    assert server.requests == []


def test_no_proxy_is_honoured_in_the_message_too(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch, refused_port: Callable[[], int]
) -> None:
    port = refused_port()
    write_config(work, f"http://127.0.0.1:{port}/v1", extra=NO_BACKOFF)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{refused_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")

    result = lich("hi")

    # Sent straight to the refusing port (NO_PROXY), and said so.
    assert error_line(result.stderr).endswith(
        f"(http://127.0.0.1:{port}/v1/chat/completions): network: connection refused "
        "(3 attempts)")


def test_different_causes_are_each_said_once(work: Path, lich: Any, scripted: Any) -> None:
    from lich.testing import Fail

    server = scripted([Fail(503, {"error": {"message": "warming up"}}),
                       Fail(503, {"error": {"message": "warming up"}}),
                       Fail(500, {"error": {"message": "broke"}})])
    write_config(work, server.base_url, extra=NO_BACKOFF)

    result = lich("hi")

    line = error_line(result.stderr)
    assert line.startswith(
        f"lich: error: model call failed: provider 'scripted' ({server.base_url}"
        "/chat/completions): server_error 500: HTTP 500: ")
    assert "broke" in line
    assert line.count("warming up") == 1
    assert "(3 attempts; before that: server_error 503: HTTP 503: " in line
    assert len(server.requests) == 3


def test_a_missing_required_key_is_a_config_error_before_any_request(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["never sent"])
    config = write_config(work, server.base_url)
    # The anthropic kind requires the key its api_key_env names.
    config.write_text(
        "[[providers]]\nkind = \"anthropic\"\nname = \"claude\"\nmodel = \"c\"\n"
        f"base_url = \"{server.server.root_url}\"\napi_key_env = \"LICH_TEST_MISSING_KEY\"\n",
        encoding="utf-8")

    result = lich("hi")

    assert result.exit_code == 2
    assert error_line(result.stderr) == (
        "lich: error: $.providers[0]: provider 'claude': missing API key: set the "
        "environment variable LICH_TEST_MISSING_KEY (or name another variable in this "
        "provider's api_key_env) (line 1)"
    )
    assert server.requests == []


def test_a_misspelt_provider_kind_gets_a_did_you_mean(work: Path, lich: Any) -> None:
    config = work / ".lich" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[[providers]]\nkind = \"openai-compat\"\nname = \"p\"\nmodel = \"m\"\n",
                      encoding="utf-8")

    result = lich("hi")

    assert result.exit_code == 2
    line = error_line(result.stderr)
    assert "$.providers[0].kind: unknown provider kind 'openai-compat' " \
           "(did you mean 'openai_compat'?)" in line


def test_config_validate_warns_about_a_missing_key(work: Path, lich: Any) -> None:
    config = work / ".lich" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[[providers]]\nkind = \"openai_compat\"\nname = \"p\"\nmodel = \"m\"\n",
                      encoding="utf-8")

    result = lich("config", "validate")

    # The file is fine; this environment lacks the key a run would need.
    assert result.exit_code == 0, result.stderr
    assert ("lich: warning: $.providers[0]: provider 'p': missing API key: set the "
            "environment variable OPENAI_API_KEY") in result.stderr
