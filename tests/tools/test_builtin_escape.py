"""The escape corpus, for every tool that takes a path.

Each attempt must fail with ``path_escape:`` or another clear coded error,
must not show anything from outside the work dir, and must not create or
change anything outside it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import Runner

SECRET = "TOP-SECRET-OUTSIDE"


def _snapshot(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        if p.is_file() else "dir"
        for p in sorted(directory.rglob("*"))
    }


def _corpus(tmp_path: Path) -> list[tuple[str, str]]:
    """(label, path argument) pairs; the symlinks are created by the ``escapes`` fixture."""
    outside = tmp_path / "outside"
    return [
        ("dotdot", "../outside/secret.txt"),
        ("dotdot-new", "../outside/new.txt"),
        ("absolute", str(outside / "secret.txt")),
        ("absolute-new", str(outside / "new.txt")),
        ("symlinked-file", "link_file"),
        ("symlinked-dir", "link_dir/secret.txt"),
        ("symlinked-dir-new", "link_dir/new.txt"),
        ("symlinked-dir-itself", "link_dir"),
        ("a/../../x", "a/../../outside/secret.txt"),
        ("nul", "a\x00b.txt"),
        ("over-long", "a/" * 3000 + "x.txt"),
        ("over-long-name", "n" * 300 + ".txt"),
    ]


@pytest.fixture
def escapes(work: Path, tmp_path: Path) -> list[tuple[str, str]]:
    (work / "a").mkdir()
    (work / "link_file").symlink_to(tmp_path / "outside" / "secret.txt")
    (work / "link_dir").symlink_to(tmp_path / "outside")
    return _corpus(tmp_path)


Args = Callable[[str], dict[str, Any]]
PATH_TOOLS: list[tuple[str, Args]] = [
    ("read_file", lambda p: {"path": p}),
    ("write_file", lambda p: {"path": p, "content": "pwned"}),
    ("edit_file", lambda p: {"path": p, "old_string": "TOP", "new_string": "pwned"}),
    ("list_dir", lambda p: {"path": p}),
    ("grep_files", lambda p: {"pattern": "SECRET", "path": p}),
    ("disk_usage", lambda p: {"path": p}),
]
# Clear coded errors that are acceptable besides path_escape (an over-long name is not an
# escape, it just cannot exist).
ACCEPTABLE = ("path_escape:", "invalid_path:")


@pytest.mark.parametrize(("tool", "make_args"), PATH_TOOLS, ids=[t for t, _ in PATH_TOOLS])
async def test_no_path_taking_tool_reaches_outside(
    run: Runner, work: Path, tmp_path: Path, escapes: list[tuple[str, str]], tool: str,
    make_args: Args,
) -> None:
    outside = tmp_path / "outside"
    before = _snapshot(outside)
    for label, target in escapes:
        result = await run(tool, make_args(target))
        assert not result.ok, f"{tool} accepted {label}: {result}"
        assert result.error is not None
        assert result.error.startswith(ACCEPTABLE) or (
            label == "over-long-name" and result.error.startswith(("not_found:", "invalid_path:"))
        ), f"{tool} / {label}: {result.error}"
        assert SECRET not in result.output, f"{tool} / {label} leaked the outside file"
        assert _snapshot(outside) == before, f"{tool} / {label} changed the outside dir"
    assert (outside / "secret.txt").read_text() == SECRET + "\n"


async def test_nul_and_length_errors_are_named(run: Runner, escapes: list[tuple[str, str]]) -> None:
    nul = await run("read_file", {"path": "a\x00b"})
    assert nul.error == "invalid_path: path contains a NUL byte"
    long = await run("write_file", {"path": "a/" * 3000, "content": ""})
    assert long.error == "invalid_path: path longer than 4096 characters"
    name = await run("write_file", {"path": "n" * 300, "content": ""})
    assert name.error is not None
    assert name.error.startswith("invalid_path: name too long")


async def test_escape_messages_name_the_target(run: Runner, escapes: list[tuple[str, str]]) -> None:
    result = await run("read_file", {"path": "../outside/secret.txt"})
    assert result.error is not None
    assert result.error.startswith("path_escape: ../outside/secret.txt escapes ")


async def test_inside_paths_through_dotdot_and_absolute_are_fine(run: Runner, work: Path) -> None:
    (work / "a").mkdir()
    (work / "in.txt").write_text("inside")
    assert (await run("read_file", {"path": "a/../in.txt"})).output == "inside"
    assert (await run("read_file", {"path": str(work / "in.txt")})).output == "inside"
    (work / "inner_link").symlink_to(work / "in.txt")
    assert (await run("read_file", {"path": "inner_link"})).output == "inside"


async def test_grep_and_list_do_not_follow_links_out_of_a_searched_tree(
    run: Runner, work: Path, escapes: list[tuple[str, str]]
) -> None:
    (work / "a" / "mine.txt").write_text("SECRET in here is fine\n")
    grep = await run("grep_files", {"pattern": "SECRET"})
    assert grep.ok
    assert grep.output == "a/mine.txt:1: SECRET in here is fine"
    listing = await run("list_dir", {"depth": 4})
    assert SECRET not in listing.output
    assert "secret.txt" not in listing.output
    usage = await run("disk_usage", {})
    assert usage.ok
    # The link is measured as a link, not followed into the outside tree.
    sizes = dict(line.split("\t")[::-1] for line in usage.output.split("\n"))
    assert int(sizes["link_dir"]) < 1000


async def test_docs_read_cannot_escape_the_docs_root(
    run: Runner, work: Path, tmp_path: Path
) -> None:
    docs = work / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# docs\n")
    (docs / "leak.md").symlink_to(tmp_path / "outside" / "secret.txt")
    (tmp_path / "outside" / "other.md").write_text(SECRET)
    run.env = {}
    for target in ("../outside/secret.txt", str(tmp_path / "outside" / "other.md"),
                   "leak.md", "leak", "a/../../../outside/other", "x\x00y", "../work/docs/index"):
        result = await run("docs_read", {"path": target})
        assert not result.ok, target
        assert result.error is not None
        assert result.error.startswith(("path_escape:", "invalid_path:", "not_found:")), result
        assert SECRET not in result.output
        assert SECRET not in result.error
    search = await run("docs_search", {"query": "TOP SECRET OUTSIDE"})
    assert SECRET not in search.output
