"""Docs tools: ``docs_read`` and ``docs_search`` over a root of Markdown files.

The root is found, in order: ``LICH_DOCS_DIR`` (from the tool env, then the
process env; ``<dir>/docs`` before ``<dir>``), ``<work_dir>/docs``, then the
``docs/`` of lich's own repository next to the installed ``lich`` package. A
directory qualifies only if it holds an ``index.md``. The root is resolved on
every call (no process-wide memo: two agents with different work dirs see
their own docs); the parsed files are cached by path, size and mtime.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

from attrs import frozen

from lich.guards import (
    ToolError,
    is_within,
    open_beneath,
    optional_int_arg,
    optional_number_arg,
    require_string_arg,
    resolve_in_root,
    truncate_text,
)
from lich.protected import ProtectedPaths, is_protected
from lich.secret_files import fd_holds_private_key
from lich.tools import Tool, ToolContext
from lich.types import ToolResult
from lich_builtin_tools._common import KEY_TEXT, PROTECTED_TEXT, schema
from lich_builtin_tools._settings import ReadFileSettings, tool_settings

__all__ = [
    "DOCS_UNAVAILABLE",
    "DocsResolver",
    "list_doc_files",
    "make_docs_tools",
    "resolve_docs_root",
    "search_docs",
]

DOCS_UNAVAILABLE = "docs_unavailable: set LICH_DOCS_DIR or install the lich package with docs"
DOCS_READ_MAX_CHARS = 30_000
DOCS_SEARCH_MAX_CHARS = 20_000
_WALK_MAX_DEPTH = 4
_WALK_SKIP = frozenset({".vitepress"})
_STOP_WORDS = frozenset({"the", "a", "an", "is", "how", "to", "in", "for", "of", "and", "or"})
_SNIPPET_BEFORE = 40
_SNIPPET_CHARS = 160

DocsResolver: TypeAlias = Callable[[str, Mapping[str, str]], "Path | None"]


def _qualifies(directory: Path) -> bool:
    return (directory / "index.md").is_file()


def _package_docs() -> list[Path]:
    import lich

    package = Path(lich.__file__).resolve().parent
    return [package.parent / "docs", package / "docs"]


def resolve_docs_root(work_dir: str | os.PathLike[str], env: Mapping[str, str]) -> Path | None:
    """The docs root for a work dir and a tool env, or ``None``.

    ``env`` is the tool env; ``LICH_DOCS_DIR`` falls back to the process env.
    """
    candidates: list[Path] = []
    configured = env.get("LICH_DOCS_DIR") or os.environ.get("LICH_DOCS_DIR")
    if configured:
        base = Path(configured).expanduser()
        candidates += [base / "docs", base]
    candidates.append(Path(work_dir) / "docs")
    candidates += _package_docs()
    for candidate in candidates:
        if _qualifies(candidate):
            return Path(os.path.realpath(candidate))
    return None


def _file_inside(entry: os.DirEntry[str], root: Path) -> bool:
    """A regular file, or a link to one that stays inside ``root``."""
    if entry.is_symlink():
        real = os.path.realpath(entry.path)
        return is_within(os.path.realpath(root), real) and os.path.isfile(real)
    return entry.is_file(follow_symlinks=False)


def list_doc_files(root: Path, protected: ProtectedPaths | None = None) -> list[str]:
    """Every ``.md`` file under ``root``, as sorted ``/``-joined relative paths.

    The walk goes 4 levels deep and skips ``.vitepress`` and whatever
    ``protected`` covers (judged by the path met and, for a link, its target).
    """
    real = os.path.realpath(root)

    def hidden(path: str) -> bool:
        return is_protected(protected, path, real) or is_protected(
            protected, os.path.realpath(path), real)

    found: list[str] = []
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        directory, depth = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.name in _WALK_SKIP or (protected and hidden(entry.path)):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 < _WALK_MAX_DEPTH:
                        stack.append((Path(entry.path), depth + 1))
                elif entry.name.endswith(".md") and _file_inside(entry, root):
                    found.append(Path(entry.path).relative_to(root).as_posix())
            except OSError:
                continue
    return sorted(found)


@frozen
class Section:
    """A searchable part of a doc: the head of a file, or one ``## `` section."""

    rel_path: str
    heading: str
    body: str


_cache_lock = threading.Lock()
_section_cache: dict[str, tuple[tuple[int, int], list[Section]]] = {}


def _own_docs(root: Path) -> bool:
    """Whether ``root`` is lich's own installed docs (which an installer may hard-link
    from its cache: ``uv`` does by default)."""
    return any(os.path.realpath(d) == os.path.realpath(root) for d in _package_docs())


def _open_doc(
    root: Path, rel: str, protected: ProtectedPaths | None = None,
    allow_hard_links: bool = False,
) -> tuple[int, os.stat_result]:
    """The doc ``rel`` opened beneath ``root`` (:func:`lich.guards.open_beneath`: a
    link swapped in since the listing cannot lead outside, nor to a file ``protected``
    covers) and its stat.

    A file with more than one hard link is refused (outside lich's own installed
    docs, and unless ``allow_hard_links``): a hard link made in the docs dir to a
    file outside it (``ln ~/.ssh/id_rsa docs/key.md``) is that file, and no path
    check can tell. With ``protected`` on, so is a file holding a private key,
    whatever it is called.

    :raises OSError: gone, unreadable, protected, a hard link, a key, or not a
        regular file.
    :raises ToolError: ``path_escape:`` / ``invalid_path:``.
    """

    def check(resolved: str) -> None:
        if protected and is_protected(protected, os.path.join(root, resolved), root):
            raise OSError(errno.EACCES, "protected")

    fd = open_beneath(root, rel, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0), check=check).fd
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    if st.st_nlink > 1 and not allow_hard_links and not _own_docs(root):
        os.close(fd)
        raise OSError(errno.EACCES, f"it has {st.st_nlink} hard links and may be a file "
                                    "outside the docs dir")
    if protected and fd_holds_private_key(fd):
        os.close(fd)
        raise OSError(errno.EACCES, KEY_TEXT)
    return fd, st


def _read_doc(fd: int) -> str:
    """The text of the doc open as ``fd`` (closed here), invalid UTF-8 replaced."""
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


def _sections(root: Path, rel: str, protected: ProtectedPaths | None = None,
              allow_hard_links: bool = False) -> list[Section]:
    path = root / rel
    try:
        fd, st = _open_doc(root, rel, protected, allow_hard_links)
    except (OSError, ToolError):
        return []
    try:
        key = (st.st_size, st.st_mtime_ns)
        with _cache_lock:
            hit = _section_cache.get(str(path))
        if hit is not None and hit[0] == key:
            os.close(fd)
            return hit[1]
        text = _read_doc(fd)
    except OSError:
        return []
    sections: list[Section] = []
    heading = f"# {rel}"
    body: list[str] = []
    for line in text.split("\n"):
        if line.startswith("## "):
            sections.append(Section(rel, heading, "\n".join(body)))
            heading, body = f"## {line[3:].strip()}", []
        else:
            body.append(line)
    sections.append(Section(rel, heading, "\n".join(body)))
    with _cache_lock:
        _section_cache[str(path)] = (key, sections)
    return sections


def _terms(query: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", query.lower()) if t and t not in _STOP_WORDS]


def _score(section: Section, terms: list[str], whole: str) -> int:
    heading = section.heading.lower()
    rel = section.rel_path.lower()
    body = section.body.lower()
    score = 0
    for term in terms:
        if term in heading:
            score += 3
        if term in rel:
            score += 2
        score += min(5, body.count(term))
    if terms and whole and whole in body:
        score += 10
    return score


def _snippet(body: str, terms: list[str]) -> str:
    lower = body.lower()
    positions = [i for i in (lower.find(t) for t in terms) if i >= 0]
    start = max(0, min(positions) - _SNIPPET_BEFORE) if positions else 0
    return " ".join(body[start:start + _SNIPPET_CHARS].split())


def search_docs(
    root: Path, query: str, max_results: int, protected: ProtectedPaths | None = None,
    allow_hard_links: bool = False,
) -> list[tuple[Section, int]]:
    """The best ``max_results`` sections for ``query``, as ``(section, score)``.

    Per term: +3 if the heading contains it, +2 if the file path does, +1 per
    body occurrence (at most 5); +10 once if the body contains the whole
    query. Ties keep file order. Files ``protected`` covers are not searched.
    """
    terms = _terms(query)
    whole = query.strip().lower()
    scored: list[tuple[Section, int]] = []
    for rel in list_doc_files(root, protected):
        for section in _sections(root, rel, protected, allow_hard_links):
            score = _score(section, terms, whole)
            if score > 0:
                scored.append((section, score))
    scored.sort(key=lambda pair: -pair[1])  # stable: equal scores keep file order
    return scored[:max_results]


def make_docs_tools(resolver: DocsResolver | None = None) -> list[Tool]:
    """``docs_read`` and ``docs_search``; ``resolver(work_dir, env)`` finds the root."""
    find_root = resolver or resolve_docs_root

    def root_for(ctx: ToolContext) -> Path:
        root = find_root(str(ctx.work_dir), ctx.env)
        if root is None:
            raise ToolError(DOCS_UNAVAILABLE)
        return Path(os.path.realpath(root))

    def docs_read(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        target = require_string_arg(args, "path")
        root = root_for(ctx)
        if os.path.isabs(target):
            raise ToolError(f"path_escape: {target} is not relative to the docs root")
        resolved = resolve_in_root(root, target)  # path_escape / invalid_path, links followed
        if is_protected(ctx.protected, resolved, root):
            raise ToolError(f"forbidden_path: {target[:200]} ({PROTECTED_TEXT})")
        files = list_doc_files(root, ctx.protected)
        wanted = os.path.normpath(target).replace(os.sep, "/")
        rel = next((c for c in (wanted, f"{wanted}.md") if c in files), None)
        if rel is None:
            available = ", ".join(files[:8]) or "none"
            raise ToolError(f"not_found: {target} (available: {available})")
        offset = max(1, int(optional_number_arg(args, "offset", 1)))
        limit = max(1, int(optional_number_arg(args, "limit", 400)))
        try:
            # Opened beneath the root: the .md form must not escape through a link either.
            allow = tool_settings(ctx, "docs_read", ReadFileSettings).allow_hard_links
            text = _read_doc(_open_doc(root, rel, ctx.protected, allow)[0])
        except OSError as exc:
            if exc.errno == errno.EACCES:
                raise ToolError(f"forbidden_path: {target[:200]} ({exc.strerror})") from exc
            raise ToolError(f"not_found: {target} ({exc.strerror})") from exc
        window = "\n".join(text.split("\n")[offset - 1:offset - 1 + limit])
        text = f"# lich doc: {rel}\n{window}"
        return ToolResult.success(truncate_text(text, DOCS_READ_MAX_CHARS))

    def docs_search(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        query = require_string_arg(args, "query")
        max_results = optional_int_arg(args, "max_results", 5, lo=1, hi=20)
        root = root_for(ctx)
        allow = tool_settings(ctx, "docs_search", ReadFileSettings).allow_hard_links
        hits = search_docs(root, query, max_results, ctx.protected, allow)
        if not hits:
            return ToolResult.success(f"no results for: {query}")
        terms = _terms(query)
        lines = []
        for i, (section, score) in enumerate(hits, 1):
            lines.append(f"{i}. {section.rel_path} — {section.heading} (score {score})")
            lines.append(f"   {_snippet(section.body, terms)}")
        return ToolResult.success(truncate_text("\n".join(lines), DOCS_SEARCH_MAX_CHARS))

    return [
        Tool(
            name="docs_read",
            description=(
                "Read one of lich's Markdown docs by its path relative to the docs root "
                "(with or without .md), optionally a window of lines."
            ),
            parameters=schema(
                {
                    "path": {"type": "string", "description": "Doc path, e.g. 'tools'."},
                    "offset": {"type": "integer", "description": "1-based first line (default 1)."},
                    "limit": {"type": "integer", "description": "Lines to return (default 400)."},
                },
                ["path"],
            ),
            execute=docs_read,
            timeout_s=30.0,
            max_output_chars=DOCS_READ_MAX_CHARS,
            read_only=True,
            # Relative to the docs root, not the work dir: matched as text.
            primary_kind="text",
        ),
        Tool(
            name="docs_search",
            description=(
                "Keyword search across lich's Markdown docs; returns ranked sections "
                "with snippets."
            ),
            parameters=schema(
                {
                    "query": {"type": "string", "description": "Keywords to look for."},
                    "max_results": {"type": "integer", "description": "Hits (default 5, max 20)."},
                },
                ["query"],
            ),
            execute=docs_search,
            timeout_s=30.0,
            read_only=True,
        ),
    ]
