"""Confinement under attack: a directory swapped for a symlink mid-call, hard links to
files outside, writes into ``.git/`` — each done for real, on real files.

The race tests run a thread that keeps exchanging a real directory of the work dir
with a symlink to a directory outside it, while a tool is called on a path through
it in a loop. Each test is bounded by a number of calls and a wall-clock budget,
whichever ends first; what it asserts (nothing outside was read, listed, sized or
changed) must hold for every call, so it does not depend on how many calls a slow
machine gets through.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import hashlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.guards import ToolError, open_beneath

from .conftest import Runner

CANARY = "CANARY-7f3e0c-OUTSIDE"
CANARY_NAME = "canary-7f3e0c-listed.txt"
CANARY_SIZE = 987_654_321  # the apparent size of a sparse file outside: du must never see it
MARKER_A = "marker-AAAA"
MARKER_B = "marker-BBBB"
RACE_CALLS = 400
RACE_BUDGET_S = 2.0


def _snapshot(directory: Path) -> dict[str, str]:
    """Every entry below ``directory`` with its content's hash (or kind)."""
    out: dict[str, str] = {}
    for p in sorted(directory.rglob("*")):
        st = p.lstat()
        if p.is_symlink():
            out[str(p.relative_to(directory))] = "link:" + os.readlink(p)
        elif p.is_file() and st.st_size > 1_000_000:  # the sparse file: not read through
            out[str(p.relative_to(directory))] = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
        elif p.is_file():
            out[str(p.relative_to(directory))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(directory))] = "dir"
    return out


def _exchanger() -> Callable[[str, str], None] | None:
    """``renameat2(RENAME_EXCHANGE)`` (Linux, glibc 2.28+): swaps two names atomically,
    as an attacker would, so the path is always there, a directory or a link."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return None
    at_fdcwd, rename_exchange = -100, 2

    def exchange(a: str, b: str) -> None:
        if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange):
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return exchange


@pytest.fixture
def arena(work: Path, tmp_path: Path) -> Path:
    """``work/d`` (a real directory with ``f.txt``) and ``work/swap`` (a link to the
    outside directory, which holds a canary file, a canary name and a huge sparse file)."""
    outside = tmp_path / "outside"
    (outside / "f.txt").write_text(f"{CANARY} {MARKER_A} {MARKER_B}\n")
    (outside / CANARY_NAME).write_text(CANARY)
    with (outside / "huge.bin").open("wb") as fh:
        fh.truncate(CANARY_SIZE)
    (work / "d").mkdir()
    (work / "d" / "f.txt").write_text(f"inside {MARKER_A}\n")
    (work / "swap").symlink_to(outside)
    return outside


@contextlib.contextmanager
def _swapping(work: Path, real: str = "d", link: str = "swap") -> Iterator[None]:
    """A thread exchanging ``work/<real>`` and ``work/<link>`` while the block runs."""
    stop = threading.Event()
    exchange = _exchanger()
    d, swap, parked = str(work / real), str(work / link), str(work / "parked")
    errors: list[BaseException] = []

    def fallback(a: str, b: str) -> None:
        # Without RENAME_EXCHANGE: three renames (the path is missing for a moment).
        os.rename(a, parked)
        os.rename(b, a)
        os.rename(parked, b)

    swap_names = exchange or fallback

    def loop() -> None:
        try:
            while not stop.is_set():
                swap_names(d, swap)
        except BaseException as exc:  # reported by the test, never swallowed
            errors.append(exc)

    thread = threading.Thread(target=loop, name="symlink-swapper", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        assert not errors, errors
        if Path(d).is_symlink():
            swap_names(d, swap)  # leave d the real directory again


async def _race(run: Runner, tool: str, make_args: Callable[[int], dict[str, Any]],
                work: Path, outside: Path, swap: tuple[str, str] = ("d", "swap")) -> list[str]:
    """Call ``tool`` in a loop while ``swap`` is exchanged; every call's text, for checks."""
    before = _snapshot(outside)
    seen: list[str] = []
    deadline = time.monotonic() + RACE_BUDGET_S
    with _swapping(work, *swap):
        for i in range(RACE_CALLS):
            if time.monotonic() > deadline:
                break
            result = await run(tool, make_args(i))
            seen.append(f"{result.output}\n{result.error or ''}")
    assert _snapshot(outside) == before, f"{tool} changed the outside directory"
    assert seen
    for text in seen:
        assert CANARY not in text, f"{tool} read from outside: {text[:300]}"
        assert CANARY_NAME not in text, f"{tool} listed outside: {text[:300]}"
        assert "huge.bin" not in text, f"{tool} listed outside: {text[:300]}"
        assert str(CANARY_SIZE) not in text, f"{tool} sized outside: {text[:300]}"
    return seen


RACED: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
    ("read_file", lambda i: {"path": "d/f.txt"}),
    ("write_file", lambda i: {"path": "d/f.txt", "content": f"written {i}\n"}),
    ("write_file", lambda i: {"path": f"d/new{i}.txt", "content": "new\n"}),
    ("edit_file", lambda i: {"path": "d/f.txt", "replace_all": True,
                             "old_string": MARKER_A if i % 2 == 0 else MARKER_B,
                             "new_string": MARKER_B if i % 2 == 0 else MARKER_A}),
    ("list_dir", lambda i: {"path": "d"}),
    ("list_dir", lambda i: {"path": ".", "depth": 3}),
    ("grep_files", lambda i: {"pattern": "CANARY|inside", "path": "d"}),
    ("grep_files", lambda i: {"pattern": "CANARY|inside"}),
    ("disk_usage", lambda i: {"path": "d"}),
]


@pytest.mark.parametrize(
    ("tool", "make_args"), RACED,
    ids=["read", "write", "write-new", "edit", "list", "list-tree", "grep", "grep-tree", "du"],
)
async def test_a_directory_swapped_for_a_symlink_never_leads_outside(
    run: Runner, work: Path, arena: Path, tool: str,
    make_args: Callable[[int], dict[str, Any]],
) -> None:
    if "new" in str(make_args(0).get("path")) and _exchanger() is None:
        # Without an atomic exchange d is missing for a moment, and write_file would
        # make it anew (make_parents), which breaks the swapper's renames.
        pytest.skip("renameat2(RENAME_EXCHANGE) is not available")
    seen = await _race(run, tool, make_args, work, arena)
    # Every answer is either the inside directory's or a coded error; never a crash.
    for text in seen:
        assert "Traceback" not in text


FILE_RACED = [item for item in RACED
              if item[0] in ("read_file", "write_file", "edit_file") and "new" not in
              str(item[1](0)["path"])]


@pytest.mark.parametrize(("tool", "make_args"), FILE_RACED, ids=["read", "write", "edit"])
async def test_a_file_swapped_for_a_symlink_never_leads_outside(
    run: Runner, work: Path, arena: Path, tool: str,
    make_args: Callable[[int], dict[str, Any]],
) -> None:
    """The last component raced: ``d/f.txt`` exchanged with a link to the outside file."""
    (work / "d" / "fswap").symlink_to(arena / "f.txt")
    await _race(run, tool, make_args, work, arena, swap=("d/f.txt", "d/fswap"))


async def test_the_swap_also_works_when_the_tree_is_still(run: Runner, work: Path,
                                                          arena: Path) -> None:
    """The race tests prove something only if the tools do work on ``d`` when it is a
    directory, and refuse it when it is the link: both, without the swapper."""
    assert (await run("read_file", {"path": "d/f.txt"})).output == f"inside {MARKER_A}\n"
    (work / "d").rename(work / "parked")
    (work / "swap").rename(work / "d")
    for tool, make_args in RACED:
        args = make_args(0)
        result = await run(tool, args)
        if args.get("path", ".") == ".":  # a walk of the whole tree: d shown, not entered
            assert result.ok, (tool, result)
            assert CANARY not in result.output
            assert CANARY_NAME not in result.output
            continue
        assert result.error is not None, (tool, result)
        assert result.error.startswith("path_escape:"), (tool, result)


# ---------------------------------------------------------------- the walk itself


def test_open_beneath_follows_inside_links_and_refuses_the_rest(
    work: Path, tmp_path: Path
) -> None:
    (work / "a").mkdir()
    (work / "a" / "in.txt").write_text("in")
    (work / "rel_link").symlink_to("a/in.txt")
    (work / "abs_link").symlink_to(work / "a" / "in.txt")
    (work / "dir_link").symlink_to("a")
    (work / "a" / "up").symlink_to("..")
    (work / "climb").symlink_to(f"../{work.name}/a/in.txt")  # leaves the root to come back
    (work / "loop").symlink_to("loop")

    def read(target: str, **kwargs: Any) -> tuple[str, str]:
        opened = open_beneath(work, target, **kwargs)
        with os.fdopen(opened.fd, "rb") as fh:
            return opened.rel, fh.read().decode()

    assert read("rel_link") == ("a/in.txt", "in")
    assert read("abs_link") == ("a/in.txt", "in")
    assert read("dir_link/in.txt") == ("a/in.txt", "in")
    assert read("a/up/a/up/rel_link") == ("a/in.txt", "in")
    assert read(str(work / "a" / "in.txt")) == ("a/in.txt", "in")
    for target in ("climb", "../x", "a/../../x", "/etc/passwd", "dir_link/../../x"):
        with pytest.raises(ToolError, match=r"^path_escape: "):
            open_beneath(work, target)
    with pytest.raises(ToolError, match=r"^invalid_path: surrogates not allowed in the path"):
        open_beneath(work, "a/\ud800.txt", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(ToolError, match=r"^invalid_path: too many levels of symbolic links"):
        open_beneath(work, "loop")
    with pytest.raises(ToolError, match=r"^symlink_refused: dir_link/in\.txt"):
        open_beneath(work, "dir_link/in.txt", follow_links=False)
    with pytest.raises(OSError, match="Not a directory") as info:
        open_beneath(work, "a/in.txt/x")
    assert info.value.errno == errno.ENOTDIR


def test_check_sees_the_resolved_path_before_anything_is_created(work: Path) -> None:
    (work / "notes").symlink_to("secret/plan.txt")
    (work / "secret").mkdir()
    checked: list[str] = []

    def refuse(rel: str) -> None:
        checked.append(rel)
        raise ToolError(f"forbidden_path: {rel}")

    with pytest.raises(ToolError, match=r"^forbidden_path: secret/plan\.txt$"):
        open_beneath(work, "notes", os.O_WRONLY | os.O_CREAT, check=refuse)
    assert checked == ["secret/plan.txt"]
    assert not (work / "secret" / "plan.txt").exists()
    # A write below missing directories is checked before the first one is made.
    checked.clear()
    with pytest.raises(ToolError, match=r"^forbidden_path: secret/new/deeper/x\.txt$"):
        open_beneath(work, "secret/../secret/new/./deeper/x.txt", os.O_WRONLY | os.O_CREAT,
                     check=refuse, make_parents=True)
    assert checked == ["secret/new/deeper/x.txt"]
    assert not (work / "secret" / "new").exists()
    # However deep: every missing directory is made (not a bounded number of them).
    deep = open_beneath(work, "m/" * 150 + "x.txt", os.O_WRONLY | os.O_CREAT,
                        make_parents=True)
    os.close(deep.fd)
    assert deep.rel == "m/" * 150 + "x.txt"


# ---------------------------------------------------------------- hard links


@pytest.fixture
def hard_link(work: Path, tmp_path: Path) -> Path:
    """``work/hl.txt``: a hard link to ``outside/secret.txt`` (the same file)."""
    target = work / "hl.txt"
    os.link(tmp_path / "outside" / "secret.txt", target)
    return target


async def test_a_hard_link_to_an_outside_file_is_refused_for_reading(
    run: Runner, hard_link: Path
) -> None:
    result = await run("read_file", {"path": "hl.txt"})
    assert result.error is not None
    assert result.error.startswith("hard_link_refused: hl.txt has 2 hard links")
    assert "[tools.read_file] allow_hard_links = true" in result.error
    assert "SECRET" not in result.output
    grep = await run("grep_files", {"pattern": "SECRET"})
    assert grep.ok
    assert grep.output == ""
    allowed = await run("read_file", {"path": "hl.txt"}, settings={"allow_hard_links": True})
    assert allowed.output == "TOP-SECRET-OUTSIDE\n"
    grep_allowed = await run("grep_files", {"pattern": "SECRET"},
                             settings={"allow_hard_links": True})
    assert grep_allowed.output == "hl.txt:1: TOP-SECRET-OUTSIDE"


async def test_a_hard_link_to_an_outside_file_is_refused_for_writing(
    run: Runner, hard_link: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    write = await run("write_file", {"path": "hl.txt", "content": "pwned"})
    assert write.error is not None
    assert write.error.startswith("hard_link_refused: hl.txt")
    assert "[tools.write_file] allow_hard_links = true" in write.error
    edit = await run("edit_file", {"path": "hl.txt", "old_string": "TOP", "new_string": "X"})
    assert edit.error is not None
    assert edit.error.startswith("hard_link_refused: hl.txt")
    assert secret.read_text() == "TOP-SECRET-OUTSIDE\n"  # not even truncated
    allowed = await run("edit_file", {"path": "hl.txt", "old_string": "TOP", "new_string": "X"},
                        settings={"allow_hard_links": True})
    assert allowed.ok, allowed
    assert secret.read_text() == "X-SECRET-OUTSIDE\n"


# ---------------------------------------------------------------- .git


@pytest.fixture
def repo(work: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(work)], check=True, timeout=30,
                   env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
    return work


FSMONITOR = "[core]\n\tfsmonitor = touch pwned-by-fsmonitor\n"


def _git_status(repo: Path) -> None:
    subprocess.run(["git", "status", "--short"], cwd=repo, check=True, timeout=30,
                   capture_output=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})


async def test_a_write_into_git_is_refused_so_git_status_runs_nothing(
    run: Runner, repo: Path
) -> None:
    config = (repo / ".git" / "config").read_text()
    (repo / "cfg").symlink_to(".git/config")
    attempts = [
        ("write_file", {"path": ".git/config", "content": config + FSMONITOR}),
        ("write_file", {"path": "cfg", "content": config + FSMONITOR}),
        ("write_file", {"path": "./sub/../.git/hooks/pre-commit", "content": "#!/bin/sh\n"}),
        ("write_file", {"path": ".GIT/config", "content": FSMONITOR}),
        ("write_file", {"path": ".git/made/up/x", "content": "x"}),
        ("edit_file", {"path": ".git/config", "old_string": "[core]",
                       "new_string": FSMONITOR.rstrip("\n")}),
    ]
    for tool, args in attempts:
        result = await run(tool, args)
        assert result.error is not None, (tool, args)
        assert result.error.startswith("forbidden_path: "), result.error
        assert "allow_git_dir = true" in result.error
    assert (repo / ".git" / "config").read_text() == config
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    assert not (repo / ".git" / "made").exists()  # refused before any directory is made
    # The attack, had it worked: git status would have run the fsmonitor command.
    await asyncio.to_thread(_git_status, repo)
    assert not (repo / "pwned-by-fsmonitor").exists()


async def test_git_writes_are_allowed_by_the_setting(run: Runner, repo: Path) -> None:
    # The same write as the attack above, allowed: git status does run the command,
    # which is why it is refused by default.
    config = (repo / ".git" / "config").read_text()
    allowed = await run("write_file", {"path": ".git/config", "content": config + FSMONITOR},
                        settings={"allow_git_dir": True})
    assert allowed.ok, allowed
    await asyncio.to_thread(_git_status, repo)
    assert (repo / "pwned-by-fsmonitor").exists()
    result = await run("write_file", {"path": ".git/description", "content": "mine\n"},
                       settings={"allow_git_dir": True})
    assert result.ok, result
    assert (repo / ".git" / "description").read_text() == "mine\n"
    edit = await run("edit_file", {"path": ".git/description", "old_string": "mine",
                                   "new_string": "ours"}, settings={"allow_git_dir": True})
    assert edit.ok, edit
    # Reading .git is not a write: always allowed.
    assert (await run("read_file", {"path": ".git/description"})).output == "ours\n"


# ---------------------------------------------------------------- links inside the work dir


async def test_links_inside_the_work_dir_behave_as_documented(
    run: Runner, work: Path, tmp_path: Path
) -> None:
    (work / "real").mkdir()
    (work / "real" / "in.txt").write_text("in\n")
    (work / "link_dir").symlink_to("real")
    (work / "link_file").symlink_to(work / "real" / "in.txt")
    (work / "dangling_in").symlink_to("real/created.txt")
    (work / "dangling_out").symlink_to(tmp_path / "outside" / "created.txt")
    (work / "climb").symlink_to(f"../{work.name}/real/in.txt")
    # Followed, for every tool, while they stay inside.
    assert (await run("read_file", {"path": "link_dir/in.txt"})).output == "in\n"
    assert (await run("read_file", {"path": "link_file"})).output == "in\n"
    assert (await run("list_dir", {"path": "link_dir"})).output == "- in.txt (3 bytes)"
    assert (await run("grep_files", {"pattern": "in", "path": "link_dir"})).output == (
        "in.txt:1: in")
    assert (await run("write_file", {"path": "dangling_in", "content": "new"})).ok
    assert (work / "real" / "created.txt").read_text() == "new"
    assert (await run("edit_file", {"path": "link_file", "old_string": "in",
                                    "new_string": "out"})).ok
    assert (work / "real" / "in.txt").read_text() == "out\n"
    assert not (work / "link_file").resolve().is_relative_to(tmp_path / "outside")
    # Refused when they lead outside, even for a moment (climb leaves and comes back).
    for tool, args in [("write_file", {"path": "dangling_out", "content": "x"}),
                       ("read_file", {"path": "climb"})]:
        result = await run(tool, args)
        assert result.error is not None
        assert result.error.startswith("path_escape: "), result.error
    assert not (tmp_path / "outside" / "created.txt").exists()
    # Walks show links by their target but never descend them.
    listing = (await run("list_dir", {"depth": 3})).output.split("\n")
    assert "d link_dir/" in listing
    assert "- climb (symlink outside the work dir)" in listing
    assert listing.count("- in.txt (4 bytes)") == 1


async def test_a_docs_directory_swapped_for_a_symlink_never_leads_outside(
    run: Runner, work: Path, tmp_path: Path
) -> None:
    """``docs_read`` and ``docs_search`` over ``<work>/docs`` while ``docs/d`` is swapped."""
    outside = tmp_path / "outside"
    (outside / "page.md").write_text(f"# page\n{CANARY}\n")
    docs = work / "docs"
    (docs / "d").mkdir(parents=True)
    (docs / "index.md").write_text("# docs\n")
    (docs / "d" / "page.md").write_text("# page\ninside\n")
    (docs / "swap").symlink_to(outside)
    run.env = {}
    before = _snapshot(outside)
    seen: list[str] = []
    deadline = time.monotonic() + RACE_BUDGET_S
    with _swapping(docs):
        for i in range(RACE_CALLS):
            if time.monotonic() > deadline:
                break
            tool, args = (("docs_read", {"path": "d/page"}) if i % 2 == 0
                          else ("docs_search", {"query": "page canary outside"}))
            result = await run(tool, args)
            seen.append(f"{result.output}\n{result.error or ''}")
    assert _snapshot(outside) == before
    assert seen
    for text in seen:
        assert CANARY not in text, text[:300]


@pytest.mark.parametrize("tool", ["read_file", "write_file", "list_dir", "grep_files",
                                  "disk_usage"])
async def test_a_path_with_no_file_name_encoding_is_a_clear_error(
    run: Runner, tool: str
) -> None:
    args: dict[str, Any] = {"path": "a/\ud800", "content": "x", "pattern": "x"}
    if tool != "write_file":
        del args["content"]
    if tool != "grep_files":
        del args["pattern"]
    result = await run(tool, args)
    assert result.error == "invalid_path: surrogates not allowed in the path"
