"""What the builtin tools declare for approvals, and the diffs write_file and edit_file
show the person approving them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lich.approvals.rules import primary_of, suggest_rules
from lich.tools import Tool
from lich_builtin_tools import builtin_tools
from lich_builtin_tools._preview import PREVIEW_MAX_CHARS

ASKING = {"terminal", "write_file", "edit_file", "http_request"}


def _tools() -> dict[str, Tool]:
    # The docs tools too: a resolver that always finds a root.
    return {t.name: t for t in builtin_tools(docs_resolver=lambda w, e: Path(w))}


def test_only_the_four_tools_that_change_things_need_approval() -> None:
    tools = _tools()
    assert len(tools) == 14
    assert {n for n, t in tools.items() if not t.read_only} == ASKING
    assert {n for n, t in tools.items() if t.requires_approval} == ASKING


def test_read_only_tools_and_write_file_are_idempotent() -> None:
    # What a resumed gateway turn may run again (docs/tools.md#idempotent-tools).
    tools = _tools()
    assert {n for n, t in tools.items() if not t.idempotent} == {
        "terminal", "edit_file", "http_request"}


@pytest.mark.parametrize(("name", "arg", "kind"), [
    ("terminal", "command", "shell"), ("write_file", "path", "path"),
    ("edit_file", "path", "path"), ("http_request", "url", "url"), ("fetch_url", "url", "url"),
    ("read_file", "path", "path"), ("list_dir", "path", "path"), ("grep_files", "path", "path"),
    ("disk_usage", "path", "path"), ("docs_read", "path", "text"),
    ("web_search", "query", "text"),
])
def test_primary_arguments(name: str, arg: str, kind: str) -> None:
    primary = primary_of(_tools()[name])
    assert (primary.name, primary.kind) == (arg, kind)


def _preview(name: str, work: Path, **args: object) -> str | None:
    item = _tools()[name]
    assert item.preview is not None
    return item.preview(args, work)


def test_write_file_previews_a_diff_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("a = 1\nb = 2\n")
    diff = _preview("write_file", tmp_path, path="app.py", content="a = 1\nb = 3\n")
    assert diff is not None
    assert diff.splitlines() == ["--- a/app.py", "+++ b/app.py", "@@ -1,2 +1,2 @@", " a = 1",
                                 "-b = 2", "+b = 3"]
    new = _preview("write_file", tmp_path, path="src/new.py", content="x\ny")
    assert new is not None
    assert new.splitlines() == ["--- /dev/null", "+++ b/src/new.py", "@@ -0,0 +1,2 @@", "+x",
                                "+y", "\\ No newline at end of file"]
    same = _preview("write_file", tmp_path, path="app.py", content="a = 1\nb = 2\n")
    assert same == "(no change: app.py already has this content)"
    assert not (tmp_path / "src").exists()  # a preview creates nothing


def test_edit_file_previews_the_edit_or_why_it_would_fail(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\ntwo\n")
    single = _preview("edit_file", tmp_path, path="a.txt", old_string="one", new_string="1")
    assert "-one\n+1\n" in (single or "")
    twice = _preview("edit_file", tmp_path, path="a.txt", old_string="two", new_string="2")
    assert twice == ("(no preview: old_string occurs 2 times in a.txt; the edit would fail "
                     "without replace_all)")
    every = _preview("edit_file", tmp_path, path="a.txt", old_string="two", new_string="2",
                     replace_all=True)
    assert (every or "").count("+2") == 2
    assert "the edit would fail" in (_preview("edit_file", tmp_path, path="a.txt",
                                              old_string="three", new_string="") or "")
    assert "does not exist" in (_preview("edit_file", tmp_path, path="nope.txt",
                                         old_string="a", new_string="b") or "")
    assert _preview("edit_file", tmp_path, path="a.txt", old_string=1, new_string="") is None


def test_a_preview_never_reads_a_protected_or_outside_file(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / ".lich").mkdir(parents=True)
    (work / ".lich" / "config.toml").write_text("SECRET-CONFIG\n")
    (work / ".env").write_text("KEY=SECRET-ENV\n")
    (tmp_path / "outside.txt").write_text("SECRET-OUTSIDE\n")
    os.symlink(work / ".env", work / "notes.txt")
    os.symlink(tmp_path / "outside.txt", work / "link.txt")
    for path in (".lich/config.toml", ".env", "notes.txt", "link.txt", "../outside.txt",
                 str(tmp_path / "outside.txt")):
        for name, extra in (("write_file", {"content": "x"}),
                            ("edit_file", {"old_string": "SECRET", "new_string": "x"})):
            shown = _preview(name, work, path=path, **extra)
            assert (shown or "").startswith("(no preview: "), (path, shown)
            assert "SECRET" not in (shown or "")


def test_a_large_diff_is_capped(tmp_path: Path) -> None:
    content = "".join(f"line {i}\n" for i in range(20_000))
    diff = _preview("write_file", tmp_path, path="big.txt", content=content)
    assert diff is not None
    assert len(diff) <= PREVIEW_MAX_CHARS + 200
    assert "truncated" in diff


def test_suggestions_for_the_builtin_tools(tmp_path: Path) -> None:
    tools = _tools()
    assert suggest_rules("write_file", {"path": "src/../app.py", "content": ""},
                         tools["write_file"], str(tmp_path)) == ("write_file(app.py)",)
    assert suggest_rules("terminal", {"command": "git status"}, tools["terminal"],
                         str(tmp_path)) == ("terminal(git status)",)
    assert suggest_rules("http_request", {"url": "https://example.com/x"},
                         tools["http_request"], str(tmp_path)) == (
        "http_request(https://example.com/*)",)
