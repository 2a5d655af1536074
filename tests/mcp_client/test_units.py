"""The pure parts: ``${VAR}`` expansion, the config's checks, tool names, and how a
``CallToolResult`` reads to the model."""

from __future__ import annotations

import base64

import mcp_types as types
import pytest

from lich.config import ConfigError
from lich.mcp.config import expand_vars, parse_mcp_settings
from lich.mcp.naming import MAX_TOOL_NAME, mcp_tool_name
from lich.mcp.results import is_idempotent, map_result, requires_approval
from lich.types import ToolResult


def test_variables_expand_with_defaults_and_unset_ones_are_named() -> None:
    env = {"TOKEN": "abc", "EMPTY": ""}
    assert expand_vars("Bearer ${TOKEN}", env) == ("Bearer abc", [])
    assert expand_vars("${NOPE:-fallback}/${EMPTY:-x}", env) == ("fallback/x", [])
    assert expand_vars("[${EMPTY}]", env) == ("[]", [])  # set, empty on purpose
    assert expand_vars("${NOPE}-${ALSO}", env) == ("${NOPE}-${ALSO}", ["NOPE", "ALSO"])
    assert expand_vars("$HOME and ${not a var}", env) == ("$HOME and ${not a var}", [])


def test_the_config_is_expanded_and_checked() -> None:
    settings = parse_mcp_settings({"servers": {
        "git": {"command": "mcp-server-git", "args": ["--repository", "${REPO:-.}"],
                "env": {"GIT_PAGER": "cat"}, "tools_enabled": ["git_status"]},
        "docs": {"url": "http://127.0.0.1:8931/mcp",
                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}, "timeout_s": 5},
    }}, environ={"DOCS_TOKEN": "t0k"})
    git, docs = settings.servers["git"], settings.servers["docs"]
    assert (git.transport, git.args, git.startup_timeout_s, git.timeout_s) == (
        "stdio", ("--repository", "."), 10.0, 60.0)
    assert git.wants_tool("git_status")
    assert not git.wants_tool("git_commit")
    assert (docs.transport, docs.headers, docs.timeout_s) == (
        "http", {"Authorization": "Bearer t0k"}, 5.0)
    assert settings.context_warning_share == 0.25


def test_every_config_problem_is_reported_with_its_path() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_mcp_settings({"context_warning_share": 2, "servers": {
            "a": {"command": "x", "startup_timeout_s": 0},
            "b": {"url": "ftp://example.invalid/"},
            "c": {"command": "x", "headers": {"A": "b"}},
            "d": {"command": "x", "env": {"N": 1}},
            "e": "not a table",
            "f": {"command": "x", "tool_enabled": ["y"]},
        }}, environ={})
    problems = caught.value.problems
    assert "$.mcp.context_warning_share: must be between 0 and 1, got 2.0" in problems
    assert "$.mcp.servers.a.startup_timeout_s: must be greater than 0, got 0.0" in problems
    assert any(p.startswith("$.mcp.servers.b.url: expected a http or https URL") for p in problems)
    assert "$.mcp.servers.c.headers: not used by a stdio server (command)" in problems
    assert any(p.startswith("$.mcp.servers.d.env: values must be strings") for p in problems)
    assert "$.mcp.servers.e: expected a table, got string" in problems
    assert any(p.startswith("$.mcp.servers.f.tool_enabled: unknown key") for p in problems)


def test_tool_names_are_safe_and_short() -> None:
    assert mcp_tool_name("git", "git_status") == "mcp__git__git_status"
    assert mcp_tool_name("my server", "read.file") == "mcp__my_server__read_file"
    long_a = mcp_tool_name("s" * 40, "t" * 40 + "a")
    long_b = mcp_tool_name("s" * 40, "t" * 40 + "b")
    assert len(long_a) == len(long_b) == MAX_TOOL_NAME
    assert long_a != long_b
    assert long_a[:55] == long_b[:55]
    assert all(c.isalnum() or c in "_-" for c in long_a)


def _b64(n: int) -> str:
    return base64.b64encode(b"x" * n).decode()


def test_results_read_as_text_with_placeholders_for_binary_content() -> None:
    result = types.CallToolResult(content=[
        types.TextContent(text="first"),
        types.ImageContent(data=_b64(2048), mime_type="image/png"),
        types.AudioContent(data=_b64(10), mime_type="audio/wav"),
        types.EmbeddedResource(resource=types.TextResourceContents(
            uri="file:///a.txt", text="hello", mime_type="text/plain")),
        types.ResourceLink(uri="file:///b.bin", name="b", mime_type="application/octet-stream",
                           size=99),
        types.TextContent(text="last"),
    ])
    assert map_result(result) == ToolResult(ok=True, output="\n".join([
        "first", "[image: image/png, 2.0 KiB]", "[audio: audio/wav, 10 bytes]",
        "[resource: file:///a.txt (text/plain, 5 chars)]",
        "[resource link: file:///b.bin (application/octet-stream, 99 bytes)]", "last"]))
    # Structured content only when there is no text: a server sending both meant the
    # text for the model.
    both = types.CallToolResult(content=[types.TextContent(text="42")],
                                structured_content={"n": 42})
    assert map_result(both).output == "42"
    # An image and a structured copy of it, no text (server-filesystem's read_media_file):
    # the blocks, never the copy's base64.
    data = _b64(4096)
    media = types.CallToolResult(
        content=[types.ImageContent(data=data, mime_type="image/png")],
        structured_content={"content": [{"type": "image", "data": data,
                                         "mimeType": "image/png"}]})
    assert map_result(media) == ToolResult(ok=True, output="[image: image/png, 4.0 KiB]")
    blob = types.CallToolResult(
        content=[types.EmbeddedResource(resource=types.BlobResourceContents(
            uri="file:///c.bin", blob=data, mime_type="application/octet-stream"))],
        structured_content={"blob": data})
    assert data not in map_result(blob).output
    # Structured data that is no copy of the binary block is kept beside it.
    described = types.CallToolResult(
        content=[types.ImageContent(data=data, mime_type="image/png")],
        structured_content={"width": 64, "height": 64})
    assert map_result(described).output == \
        '{"width": 64, "height": 64}\n[image: image/png, 4.0 KiB]'
    failed = types.CallToolResult(content=[types.TextContent(text="no such file")],
                                  is_error=True)
    assert map_result(failed) == ToolResult.failure("mcp_tool_error: no such file")


def test_annotations_only_ever_ask_for_approval() -> None:
    def tool(**notes: object) -> types.Tool:
        annotations = types.ToolAnnotations(**notes) if notes else None  # type: ignore[arg-type]
        return types.Tool(name="t", input_schema={"type": "object"}, annotations=annotations)

    assert requires_approval(tool())
    assert requires_approval(tool(destructive_hint=True))
    assert requires_approval(tool(read_only_hint=True, destructive_hint=True))
    assert requires_approval(tool(title="no hints"))  # the protocol's default: destructive
    assert not requires_approval(tool(read_only_hint=True))
    assert not requires_approval(tool(destructive_hint=False))


def test_only_an_explicit_idempotent_hint_makes_a_tool_idempotent() -> None:
    def tool(**notes: object) -> types.Tool:
        annotations = types.ToolAnnotations(**notes) if notes else None  # type: ignore[arg-type]
        return types.Tool(name="t", input_schema={"type": "object"}, annotations=annotations)

    assert is_idempotent(tool(idempotent_hint=True))
    assert is_idempotent(tool(idempotent_hint=True, destructive_hint=True))
    assert not is_idempotent(tool())
    assert not is_idempotent(tool(idempotent_hint=False))
    # A read-only claim alone is not trusted to mean "safe to run twice".
    assert not is_idempotent(tool(read_only_hint=True))


def test_lines_past_the_cap_keep_only_their_ends_and_name_their_request() -> None:
    import json
    import tracemalloc

    from lich.mcp.stdio import CappedLines, TooLong

    lines = CappedLines(cap=1024)
    # Lines under the cap, split across chunks anyhow, come out whole and in order.
    out = list(lines.feed(b'{"a": 1}\n{"b"')) + list(lines.feed(b': 2}\n\n'))
    assert out == [b'{"a": 1}', b'{"b": 2}', b""]
    # 10 MiB in 64 KiB chunks: never more than the cap and a chunk held at once.
    big = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text",
                                                                "text": "x" * 10 * 2**20}]}}
    wire = json.dumps(big).encode() + b"\n"
    tracemalloc.start()
    found: list[object] = []
    for i in range(0, len(wire), 65536):
        found += lines.feed(wire[i:i + 65536])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    (line,) = found
    assert isinstance(line, TooLong)
    assert line.size == len(wire) - 1
    assert line.request_id() == 7
    assert peak < 1024 * 1024  # the 10 MiB line was never held
    # The id at the end (as the TypeScript SDK writes it), or none at all.
    tail_first = b'{"result": {"text": "' + b"y" * 5000 + b'"}, "jsonrpc": "2.0", "id": "r-9"}\n'
    (line,) = list(lines.feed(tail_first))
    assert isinstance(line, TooLong)
    assert line.request_id() == "r-9"
    (line,) = list(lines.feed(b'{"method": "x", "params": "' + b"z" * 5000 + b'"}\n'))
    assert isinstance(line, TooLong)
    assert line.request_id() is None
    assert list(lines.feed(b'{"ok": true}\n')) == [b'{"ok": true}']  # and it goes on
