"""docs_read and docs_search (the reference's docs_tools tests, ported, exact scores included)."""

from __future__ import annotations

from pathlib import Path

import pytest

import lich
from lich_builtin_tools import builtin_tools, resolve_docs_root
from lich_builtin_tools._docs import DOCS_UNAVAILABLE

from .conftest import Runner

GATEWAY = (
    "# Gateway guide\n"
    "\n"
    "The webhook adapter forwards platform events to the agent.\n"
    "The gateway delivers payloads onward.\n"
    "\n"
    "## Webhook events\n"
    "\n"
    "The gateway delivers webhook payloads to the endpoint for processing.\n"
)


@pytest.fixture
def docs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LICH_DOCS_DIR", raising=False)
    root = tmp_path / "docs-fixture" / "docs"
    (root / "guide").mkdir(parents=True)
    (root / "index.md").write_text(
        "# Lich test docs\n\nA small library for testing the docs tools.\n\n"
        "## Installation\n\npip install it.\n"
    )
    (root / "guide" / "gateway.md").write_text(GATEWAY)
    (root / "guide" / "tools.md").write_text("Use docs_read to read one page.\n")
    (root / "guide" / "overview.md").write_text("# Overview\n\narchitecture and the gateway")
    (root / ".vitepress").mkdir()
    (root / ".vitepress" / "theme.md").write_text("gateway gateway gateway")
    return root


@pytest.fixture
def docs_run(run: Runner, docs: Path) -> Runner:
    run.env = {"LICH_DOCS_DIR": str(docs)}
    return run


# ---------------------------------------------------------------- root resolution


def test_root_from_lich_docs_dir_parent_or_itself(docs: Path, work: Path) -> None:
    assert resolve_docs_root(str(work), {"LICH_DOCS_DIR": str(docs.parent)}) == docs
    assert resolve_docs_root(str(work), {"LICH_DOCS_DIR": str(docs)}) == docs


def test_root_from_the_process_env(
    docs: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LICH_DOCS_DIR", str(docs))
    assert resolve_docs_root(str(work), {}) == docs


def test_root_from_work_dir_docs(work: Path) -> None:
    (work / "docs").mkdir()
    (work / "docs" / "index.md").write_text("# mine\n")
    assert resolve_docs_root(str(work), {}) == work / "docs"


def test_a_dir_without_index_does_not_qualify(work: Path, tmp_path: Path) -> None:
    (work / "docs").mkdir()
    (work / "docs" / "other.md").write_text("x")
    root = resolve_docs_root(str(work), {"LICH_DOCS_DIR": str(tmp_path / "nothing")})
    assert root != work / "docs"


def test_package_fallback(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LICH_DOCS_DIR", raising=False)
    repo_docs = Path(lich.__file__).resolve().parent.parent / "docs"
    if not (repo_docs / "index.md").is_file():
        pytest.skip("lich is installed without its docs/")
    assert resolve_docs_root(str(work), {}) == repo_docs


def test_docs_tools_registered_only_when_a_root_is_found(work: Path) -> None:
    with_docs = [t.name for t in builtin_tools(docs_resolver=lambda w, e: work)]
    assert with_docs[-2:] == ["docs_read", "docs_search"]
    without = [t.name for t in builtin_tools(docs_resolver=lambda w, e: None)]
    assert "docs_read" not in without
    assert "docs_search" not in without
    assert "read_file" in without


async def test_docs_unavailable(run: Runner, work: Path) -> None:
    calls = iter([work, None, None])  # found at registration, gone when called
    run.docs_resolver = lambda w, e: next(calls)
    registry = run.registry()
    assert registry.has("docs_read")
    run.registry = lambda: registry  # type: ignore[method-assign]
    assert (await run("docs_read", {"path": "index"})).error == DOCS_UNAVAILABLE
    assert (await run("docs_search", {"query": "x"})).error == DOCS_UNAVAILABLE
    assert DOCS_UNAVAILABLE == (
        "docs_unavailable: set LICH_DOCS_DIR or install the lich package with docs"
    )


# ---------------------------------------------------------------- docs_read


async def test_docs_read_with_and_without_md(docs_run: Runner) -> None:
    for target in ("guide/gateway.md", "guide/gateway"):
        result = await docs_run("docs_read", {"path": target})
        assert result.ok, result
        assert result.output == f"# lich doc: guide/gateway.md\n{GATEWAY}"


async def test_docs_read_window(docs_run: Runner) -> None:
    window = await docs_run("docs_read", {"path": "guide/gateway", "offset": 2, "limit": 1})
    assert window.output == "# lich doc: guide/gateway.md\n"
    third = await docs_run("docs_read", {"path": "guide/gateway", "offset": 3, "limit": 1})
    assert third.output == (
        "# lich doc: guide/gateway.md\nThe webhook adapter forwards platform events to the agent."
    )
    past = await docs_run("docs_read", {"path": "guide/gateway", "offset": 99})
    assert past.output == "# lich doc: guide/gateway.md\n"


async def test_docs_read_not_found_lists_the_available_files(docs_run: Runner) -> None:
    result = await docs_run("docs_read", {"path": "guide/absent.md"})
    assert result.error == (
        "not_found: guide/absent.md (available: guide/gateway.md, guide/overview.md, "
        "guide/tools.md, index.md)"
    )
    hidden = await docs_run("docs_read", {"path": ".vitepress/theme"})
    assert hidden.error is not None
    assert hidden.error.startswith("not_found:")


async def test_docs_read_rejects_escapes_and_absolute_paths(docs_run: Runner, docs: Path) -> None:
    escape = await docs_run("docs_read", {"path": "../../etc/passwd"})
    assert escape.error is not None
    assert escape.error.startswith("path_escape:")
    absolute = await docs_run("docs_read", {"path": str(docs / "index.md")})
    assert absolute.error == f"path_escape: {docs / 'index.md'} is not relative to the docs root"
    assert (await docs_run("docs_read", {})).error == "missing_arg: path"


# ---------------------------------------------------------------- docs_search


async def test_docs_search_webhook_scores(docs_run: Runner) -> None:
    result = await docs_run("docs_search", {"query": "webhook"})
    lines = result.output.split("\n")
    assert lines[0] == "1. guide/gateway.md — ## Webhook events (score 14)"
    assert lines[1].startswith("   ")
    assert "webhook" in lines[1]
    assert "(score 11)" in result.output
    assert lines[2] == "2. guide/gateway.md — # guide/gateway.md (score 11)"


async def test_docs_search_gateway_scores(docs_run: Runner) -> None:
    result = await docs_run("docs_search", {"query": "gateway"})
    headings = [line for line in result.output.split("\n") if not line.startswith("   ")]
    assert headings == [
        "1. guide/gateway.md — # guide/gateway.md (score 17)",
        "2. guide/gateway.md — ## Webhook events (score 13)",
        "3. guide/overview.md — # guide/overview.md (score 11)",
    ]


async def test_docs_search_phrase_scores(docs_run: Runner) -> None:
    result = await docs_run("docs_search", {"query": "delivers payloads"})
    headings = [line for line in result.output.split("\n") if not line.startswith("   ")]
    assert headings == [
        "1. guide/gateway.md — # guide/gateway.md (score 12)",
        "2. guide/gateway.md — ## Webhook events (score 2)",
    ]


async def test_docs_search_snippet_starts_near_the_match(docs_run: Runner) -> None:
    result = await docs_run("docs_search", {"query": "endpoint", "max_results": 1})
    snippet = result.output.split("\n")[1]
    # 40 characters before the first match, whitespace collapsed (mid-word, as in the reference).
    assert snippet == "   ateway delivers webhook payloads to the endpoint for processing."
    long_body = "word " * 100 + "needle " + "tail " * 100
    (docs_run.work_dir / "unused").write_text("")  # the work dir is not the docs root
    docs_root = Path(docs_run.env["LICH_DOCS_DIR"])
    (docs_root / "long.md").write_text(long_body)
    long = await docs_run("docs_search", {"query": "needle", "max_results": 1})
    snippet = long.output.split("\n")[1]
    assert snippet.startswith("   ")
    assert len(snippet) - 3 <= 160
    assert "needle" in snippet
    assert snippet.index("needle") - 3 <= 40


async def test_docs_search_no_results_cap_and_missing_query(docs_run: Runner) -> None:
    assert (await docs_run("docs_search", {"query": "xzyqqqq"})).output == (
        "no results for: xzyqqqq"
    )
    capped = await docs_run("docs_search", {"query": "gateway", "max_results": 1})
    assert len(capped.output.split("\n")) == 2
    assert (await docs_run("docs_search", {})).error == "missing_arg: query"
    stop_words_only = await docs_run("docs_search", {"query": "how to the"})
    assert stop_words_only.output == "no results for: how to the"


async def test_docs_search_sees_edits(docs_run: Runner, docs: Path) -> None:
    assert (await docs_run("docs_search", {"query": "zebra"})).output == "no results for: zebra"
    (docs / "guide" / "tools.md").write_text("A zebra appears, a longer line than before.\n")
    assert "guide/tools.md" in (await docs_run("docs_search", {"query": "zebra"})).output
