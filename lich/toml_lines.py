"""Which line of a TOML file a ``$.path`` of a configuration problem stands on.

``tomllib`` gives values, not positions, so the file is read again, line by line,
only when there is a problem to report: the table headers (``[gateway]``,
``[[providers]]`` counted per array) and the keys (dotted and quoted ones
included) each give a line its path. A problem's line is that of its path, or of
the nearest part of it the file has (a required key that is missing points at
its table's header), so ``$.providers[1].name: required key missing`` reads
``(line 7)``: the second ``[[providers]]``.

Values that span lines (arrays, multi-line strings) are skipped over, so a key
inside one is never taken for a key.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["line_of", "with_lines"]

Path = tuple[str | int, ...]

_PATH_PART = re.compile(r"\.([A-Za-z0-9_-]+)|\.\"((?:[^\"\\]|\\.)*)\"|\[(\d+)\]")
_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r"\"(?:[^\"\\]|\\.)*\"|'[^']*'"
_KEY = rf"(?:{_BARE}|{_QUOTED})(?:\s*\.\s*(?:{_BARE}|{_QUOTED}))*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_KEY})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_KEY})\s*=\s*(.*)$")
_KEY_PART = re.compile(rf"\s*({_BARE}|{_QUOTED})\s*(?:\.|$)")
_PROBLEM = re.compile(r"^(\$(?:\.[A-Za-z0-9_-]+|\.\"(?:[^\"\\]|\\.)*\"|\[\d+\])*)(?=[:\s]|$)")


def parse_path(path: str) -> Path | None:
    """``$.providers[0].name`` → ``("providers", 0, "name")``; ``None`` if not a path."""
    if not path.startswith("$"):
        return None
    parts: list[str | int] = []
    rest = path[1:]
    while rest:
        m = _PATH_PART.match(rest)
        if m is None:
            return None
        bare, quoted, index = m.groups()
        parts.append(int(index) if index is not None else (bare if bare is not None
                                                            else quoted))
        rest = rest[m.end():]
    return tuple(parts)


def _key_parts(text: str) -> list[str]:
    parts = []
    for m in _KEY_PART.finditer(text):
        part = m.group(1)
        if part[0] in "\"'":
            part = part[1:-1]
        parts.append(part)
    return parts


def _opens(value: str) -> str | None:
    """What a value that starts on this line leaves open: ``]`` (an array), a triple
    quote, or ``None`` (it ends here). Strings inside are stepped over."""
    depth = 0
    i = 0
    while i < len(value):
        c = value[i]
        if value.startswith(('"""', "'''"), i):
            quote = value[i:i + 3]
            end = value.find(quote, i + 3)
            if end < 0:
                return quote
            i = end + 3
            continue
        if c in "\"'":
            end = i + 1
            while end < len(value) and value[end] != c:
                end += 2 if c == '"' and value[end] == "\\" else 1
            i = end + 1
            continue
        if c == "#":
            break
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        i += 1
    return "]" if depth > 0 else None


def _lines(text: str) -> list[tuple[Path, int]]:
    """Every table header and key of ``text`` with its path and 1-based line."""
    found: list[tuple[Path, int]] = []
    table: Path = ()
    counts: dict[Path, int] = {}
    open_: str | None = None
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        if open_ is not None:  # inside a value that spans lines
            if open_ in ('"""', "'''"):
                if open_ in line:
                    open_ = None
                continue
            depth += line.count("[") - line.count("]")  # close enough for arrays
            if depth <= 0:
                open_ = None
            continue
        header = _HEADER.match(line)
        if header:
            key = tuple(_key_parts(header.group(2)))
            if header.group(1) == "[[":
                index = counts.get(key, 0)
                counts[key] = index + 1
                table = (*key, index)
            else:
                table = key
            found.append((table, number))
            continue
        assign = _ASSIGN.match(line)
        if assign:
            key = tuple(_key_parts(assign.group(1)))
            # A dotted key (tools.terminal.timeout_s = 5) makes its tables on this line.
            found.extend(((*table, *key[:n]), number) for n in range(1, len(key) + 1))
            open_ = _opens(assign.group(2))
            if open_ == "]":
                value = assign.group(2)
                depth = value.count("[") - value.count("]")
    return found


def line_of(text: str, path: str) -> int | None:
    """The line of ``text`` (TOML) that ``path`` (``$.a.b[0].c``) stands on, or that of
    the deepest part of it the file has; ``None`` when the file has no part of it."""
    target = parse_path(path)
    if not target:
        return None
    best: tuple[int, int] | None = None  # (matched parts, line)
    for where, number in _lines(text):
        if len(where) > len(target) or target[:len(where)] != where:
            continue
        if best is None or len(where) > best[0]:
            best = (len(where), number)
    return best[1] if best is not None else None


def with_lines(text: str, problems: Sequence[str],
               skip: frozenset[str] = frozenset()) -> list[str]:
    """``problems`` (``"$.path: message"`` lines) with `` (line N)`` after each one whose
    path ``text`` has; paths under a top-level key in ``skip`` (set from the environment
    or a flag, not the file) are left as they are."""
    out = []
    for problem in problems:
        m = _PROBLEM.match(problem)
        parts = parse_path(m.group(1)) if m else None
        number = line_of(text, m.group(1)) if m and parts and parts[0] not in skip else None
        out.append(problem if number is None else f"{problem} (line {number})")
    return out
