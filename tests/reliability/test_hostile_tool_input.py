"""Hostile tool input: generated arguments of wrong types and shapes for every builtin
tool, through the real :class:`lich.tools.ToolExecutor`, and generated path escapes
for every tool that takes a path.

Properties: nothing ever raises out of the executor; a failure is always a clear
coded error string (``missing_arg: path``, ``path_escape: …``) — never a bare
``TypeError: …`` leaking out of a tool; nothing outside the work dir is read,
listed, written or changed. No traffic leaves the machine: the web tools get an
SSRF guard whose resolver answers every name with a loopback address (refused by
default) and whose transport records and refuses anything that gets through; a
socket-level guard refuses any non-loopback connection or name lookup besides.
``terminal`` only ever receives wrong-typed arguments, or ``printf`` of
generated text.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lich.config import LichConfig
from lich.tools import ToolExecutor, ToolRegistry
from lich.types import ToolCall, ToolResult
from lich_builtin_tools import CORE_TOOL_NAMES, DOCS_TOOL_NAMES, builtin_tools
from lich_builtin_tools._net import NetGuard

from .conftest import TALLY, scaled

SECRET = "TOP-SECRET-OUTSIDE-7f3a"
OUTSIDE_NAME = "outside-only-name-5c1e.txt"
# A failure the model can act on: a snake_case code, then a colon (or nothing more).
CODED = re.compile(r"^[a-z][a-z0-9_]*(:|$)")
ALL_TOOLS = (*CORE_TOOL_NAMES, *DOCS_TOOL_NAMES)
PATH_TOOLS = ("read_file", "write_file", "edit_file", "list_dir", "grep_files", "disk_usage",
              "docs_read")

HOSTILE_STRINGS = st.sampled_from([
    "", " ", "\x00", "a\x00b", "\ud800", "..", "../..", "/", "/etc/passwd", "~", "~root",
    "\n", "\r\n", "${HOME}", "$(id)", "`id`", "%2e%2e/", "..\\..\\", "C:\\Windows", "*", "[",
    "(a+)+$", "\\", "\u202e", "x" * 5000, "http://169.254.169.254/", "file:///etc/passwd",
    "gopher://127.0.0.1/", "http://[::1]/", "http://0/", "https://example.com/",
])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
    | HOSTILE_STRINGS,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10,
)
NOT_A_STRING = st.none() | st.booleans() | st.integers() | st.floats() | st.lists(
    JSON, max_size=3) | st.dictionaries(st.text(max_size=5), JSON, max_size=3)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A sandbox shared by the generated-argument tests (they may write inside it)."""
    yield from _sandbox(tmp_path_factory.mktemp("hostile"))


@pytest.fixture
def fresh_sandbox(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A sandbox of its own, for tests that look at what a walk of the work dir shows."""
    yield from _sandbox(tmp_path / "hostile")


def _sandbox(base: Path) -> Iterator[dict[str, Any]]:
    """A work dir with a few files and links out, a docs root, and a secret outside both."""
    outside = base / "outside"
    outside.mkdir(parents=True)
    (outside / OUTSIDE_NAME).write_text(f"{SECRET}\n", encoding="utf-8")
    (outside / "secret.md").write_text(f"# {SECRET}\n", encoding="utf-8")
    work = base / "work"
    (work / "a" / "b").mkdir(parents=True)
    (work / "a" / "note.txt").write_text("hello\nworld\n", encoding="utf-8")
    (work / "link_file").symlink_to(outside / OUTSIDE_NAME)
    (work / "link_dir").symlink_to(outside)
    (work / "link_root").symlink_to("/")
    (work / "a" / "b" / "up").symlink_to("../../..")
    (work / "loop").symlink_to(work / "loop")
    docs = base / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# index\nthe docs\n", encoding="utf-8")
    (docs / "tools.md").write_text("# tools\nread_file reads\n", encoding="utf-8")
    (docs / "leak.md").symlink_to(outside / "secret.md")
    (docs / "outdir").symlink_to(outside)
    hits: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]  # every name is "loopback": the guard refuses it by default

    def transport(request: httpx.Request) -> httpx.Response:
        hits.append(str(request.url))
        raise httpx.ConnectError("the test transport sends nothing", request=request)

    net = NetGuard(resolver=resolver, transport=httpx.MockTransport(transport))
    config = LichConfig(work_dir=str(work), plugins=())
    registry = ToolRegistry()
    for item in builtin_tools(config, net=net, docs_resolver=lambda _w, _e: docs):
        registry.register(item)
    assert registry.names() == list(ALL_TOOLS)
    executor = ToolExecutor(
        registry, work_dir=work,
        # Bounds for generated input that happens to be slow (a wild regex, a deep walk).
        tool_settings={name: {"timeout_s": 10} for name in ALL_TOOLS},
    )
    yield {"work": work, "outside": outside, "docs": docs, "executor": executor,
           "hits": hits, "base": base}
    assert hits == [], f"a web tool got past the SSRF guard: {hits[:3]}"


@pytest.fixture(autouse=True)
def _bare_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``terminal`` runs ``bash -l``: with the developer's HOME, a generated 1 ms timeout
    can kill bash inside their profile (e.g. holding pyenv's rehash lock, which then
    stalls every later login shell for a minute). An empty HOME has no profile."""
    monkeypatch.setenv("HOME", str(tmp_path))


def snapshot(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file() and not p.is_symlink() else "other"
        for p in sorted(directory.rglob("*"))
    }


def run(sandbox: dict[str, Any], name: str, args: dict[str, Any]) -> ToolResult:
    executor: ToolExecutor = sandbox["executor"]
    result = asyncio.run(executor.execute(ToolCall("call_h", name, args)))
    assert isinstance(result, ToolResult)
    assert isinstance(result.output, str)
    if result.ok:
        assert result.error is None
    else:
        assert isinstance(result.error, str)
        assert CODED.match(result.error), f"{name}({args!r}) -> unclear error {result.error!r}"
    return result


def args_for(name: str, sandbox_tools: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Any keys (the tool's own and made-up ones) mapped to any JSON-ish values."""
    keys = list(sandbox_tools[name])
    return st.dictionaries(st.sampled_from(keys) | st.text(max_size=6), JSON, max_size=5)


_PARAMS = {
    item.name: dict(item.parameters.get("properties", {}))
    for item in builtin_tools(LichConfig(work_dir=".", plugins=()),
                              docs_resolver=lambda _w, _e: Path("."))
}


def terminal_args() -> st.SearchStrategy[dict[str, Any]]:
    # Never a string command: only wrong types (or an empty string), so nothing runs.
    return st.fixed_dictionaries(
        {}, optional={"command": NOT_A_STRING | st.just(""), "timeout_ms": JSON},
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL_TOOLS)
def test_generated_arguments_never_break_the_executor(
    name: str, sandbox: dict[str, Any], no_network: list[str]
) -> None:
    strategy = terminal_args() if name == "terminal" else args_for(name, _PARAMS)
    outside = snapshot(sandbox["outside"])

    @settings(max_examples=scaled(40), deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(args=strategy)
    def check(args: dict[str, Any]) -> None:
        result = run(sandbox, name, args)
        assert SECRET not in result.output
        TALLY["hostile tool inputs generated"] += 1

    check()
    assert snapshot(sandbox["outside"]) == outside


@pytest.mark.slow
@pytest.mark.parametrize("key", ["path", "content", "old_string", "pattern", "url", "query",
                                 "keys", "offset", "limit", "depth", "max_results"])
def test_each_argument_of_the_wrong_type(
    key: str, sandbox: dict[str, Any], no_network: list[str]
) -> None:
    """For every tool taking ``key``: the right other arguments, ``key`` of a wrong type."""
    takers = [n for n in ALL_TOOLS if key in _PARAMS[n] and n != "terminal"]
    assert takers, key
    valid: dict[str, dict[str, Any]] = {
        "read_file": {"path": "a/note.txt"}, "write_file": {"path": "w.txt", "content": "x"},
        "edit_file": {"path": "a/note.txt", "old_string": "zzz", "new_string": "y"},
        "list_dir": {"path": "."}, "grep_files": {"pattern": "hello"},
        "fetch_url": {"url": "https://example.com/"}, "web_search": {"query": "q"},
        "http_request": {"url": "https://example.com/"}, "process_list": {},
        "disk_usage": {"path": "."}, "env_get": {"keys": ["HOME"]},
        "docs_read": {"path": "tools"}, "docs_search": {"query": "read"},
    }

    @settings(max_examples=scaled(15), deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(tool=st.sampled_from(takers), value=NOT_A_STRING if key != "keys" else JSON)
    def check(tool: str, value: Any) -> None:
        run(sandbox, tool, {**valid[tool], key: value})
        TALLY["hostile tool inputs generated"] += 1

    check()


@pytest.mark.slow
def test_terminal_with_generated_harmless_commands(
    sandbox: dict[str, Any], no_network: list[str]
) -> None:
    """``printf %s <quoted text>`` with any text (NUL bytes included) and any timeout:
    the text comes back, or a clear error (a NUL cannot be passed to a program)."""

    @settings(max_examples=scaled(25), deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(text=st.text(max_size=60) | HOSTILE_STRINGS,
           timeout=st.none() | st.integers(-10, 10**9) | st.floats() | st.text(max_size=4))
    def check(text: str, timeout: Any) -> None:
        args: dict[str, Any] = {"command": f"printf %s {shlex.quote(text)}"}
        if timeout is not None:
            args["timeout_ms"] = timeout
        result = run(sandbox, "terminal", args)
        if "\x00" not in text and result.ok and _encodable(text):
            assert text in result.output
        TALLY["hostile tool inputs generated"] += 1

    check()


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ---------------------------------------------------------------------------- path escapes

SEGMENTS = ["..", ".", "a", "b", "link_file", "link_dir", "link_root", "up", "loop", "outside",
            OUTSIDE_NAME, "secret.md", "etc", "passwd", "", "~", "%2e%2e", "..\\..", "...",
            "leak", "leak.md", "outdir", "index", "a\x00"]


def path_strategy() -> st.SearchStrategy[str]:
    relative = st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=6).map("/".join)
    return relative | relative.map(lambda p: "/" + p) | st.sampled_from([
        "/etc/passwd", "/proc/self/root/etc/passwd", "/proc/self/cwd/../outside",
        "link_dir/" + OUTSIDE_NAME, "a/b/up/outside/" + OUTSIDE_NAME, "link_root/etc/passwd",
        "./../outside", "a/../../outside/" + OUTSIDE_NAME, "a/" * 3000 + "x",
    ])


def path_args(tool: str, path: str) -> dict[str, Any]:
    return {
        "read_file": {"path": path},
        "write_file": {"path": path, "content": "pwned"},
        "edit_file": {"path": path, "old_string": "TOP", "new_string": "pwned"},
        "list_dir": {"path": path, "depth": 4},
        "grep_files": {"pattern": "SECRET|root:", "path": path},
        "disk_usage": {"path": path},
        "docs_read": {"path": path},
    }[tool]


@pytest.mark.slow
@pytest.mark.parametrize("tool", PATH_TOOLS)
def test_generated_path_escapes(
    tool: str, fresh_sandbox: dict[str, Any], no_network: list[str]
) -> None:
    """Paths built from ``..``, links out (to a file, a dir, ``/``, a loop), absolute
    paths, encodings and NULs: whatever a tool answers, nothing from outside shows
    (neither the secret nor the outside file's name) and nothing outside changes."""
    sandbox = fresh_sandbox
    outside = snapshot(sandbox["outside"])
    passwd = Path("/etc/passwd").read_text(encoding="utf-8", errors="replace").splitlines()[:1]

    @settings(max_examples=scaled(40), deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(path=path_strategy())
    def check(path: str) -> None:
        result = run(sandbox, tool, path_args(tool, path))
        shown = result.output + (result.error or "")
        assert SECRET not in shown, (path, result)
        assert OUTSIDE_NAME not in result.output or OUTSIDE_NAME in path, (path, result)
        for line in passwd:
            assert not line or line not in result.output, (path, result)
        TALLY["path escapes tried"] += 1

    check()
    assert snapshot(sandbox["outside"]) == outside
    assert not (sandbox["base"] / "x").exists()


@pytest.mark.parametrize("path", ["leak.md", "leak", "outdir/secret.md", "outdir/secret",
                                  "../outside/secret.md", "/etc/passwd", "index.md/../../work",
                                  "../docs/index"])
def test_docs_read_stays_in_its_root(path: str, sandbox: dict[str, Any]) -> None:
    result = run(sandbox, "docs_read", {"path": path})
    assert not result.ok, result
    assert SECRET not in result.output + (result.error or "")
    assert result.error is not None
    assert result.error.startswith(("path_escape:", "not_found:", "invalid_path:")), result.error
    TALLY["path escapes tried"] += 1


def test_docs_search_does_not_search_through_links_out(sandbox: dict[str, Any]) -> None:
    result = run(sandbox, "docs_search", {"query": SECRET})
    assert result.output.startswith("no results"), result  # leak.md links out: not searched
    assert "leak" not in result.output


@pytest.mark.parametrize("tool", ["list_dir", "grep_files", "disk_usage"])
def test_walking_the_work_dir_does_not_follow_links_out(
    tool: str, fresh_sandbox: dict[str, Any]
) -> None:
    sandbox = fresh_sandbox
    args = {"list_dir": {"path": ".", "depth": 4}, "grep_files": {"pattern": "SECRET"},
            "disk_usage": {"path": "."}}[tool]
    result = run(sandbox, tool, args)
    assert SECRET not in result.output
    assert OUTSIDE_NAME not in result.output
    if tool == "list_dir":
        # The links are shown as links, never walked.
        assert "- link_dir (symlink outside the work dir)" in result.output
        assert "- link_root (symlink outside the work dir)" in result.output
        assert "etc/" not in result.output
    if tool == "disk_usage":
        assert re.search(r"^\d+\tlink_dir$", result.output, re.M), result.output
