"""A small JSON path language for ``json_query``.

::

    $                  the whole document (may be left out: ".a" and "a" mean "$.a")
    .name  ["name"]    an object member (the bracket form takes any key; '...' works too)
    [2]  [-1]          an array item (negative counts from the end)
    [1:3]  [::2]       an array slice, as in Python
    [*]  .*            every item of an array, every value of an object
    ..name  ..[0]  ..*   the selector applied at every depth (the node itself included)
    [?expr]            the items (or object values) for which expr holds

A filter ``expr`` compares relative paths (``@`` is the item, ``$`` the
document) with literals (numbers, "strings" or 'strings', true, false, null)
using ``== != < <= > >=``; a bare path tests that the member exists. Join
tests with ``&&`` and ``||``, negate with ``!``, group with parentheses::

    $.users[?@.age >= 18 && @.active].email
    $..book[?@.price < 10 || !@.isbn].title

Comparisons never raise: a missing member or a type mismatch is simply
false (``!=`` is then true); ``<`` and friends compare numbers with numbers
and strings with strings only; ``1 == true`` is false.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

__all__ = ["CompiledPath", "PathSyntaxError", "compile_path", "format_location"]

Location: TypeAlias = tuple[str | int, ...]
Node: TypeAlias = tuple[Location, Any]
_MISSING = object()
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INT = re.compile(r"-?[0-9]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_QUERY_CHARS = 2000


class PathSyntaxError(ValueError):
    """The path expression is malformed; the message names the position."""


def format_location(location: Location) -> str:
    """``$.users[0]["full name"]`` for ``("users", 0, "full name")``."""
    out = ["$"]
    for part in location:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENT.match(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out)


# --------------------------------------------------------------------------- selectors

Selector: TypeAlias = Callable[[Node, Any], Iterator[Node]]


def _member(name: str) -> Selector:
    def select(node: Node, _root: Any) -> Iterator[Node]:
        loc, value = node
        if isinstance(value, dict) and name in value:
            yield (*loc, name), value[name]

    return select


def _children(node: Node) -> Iterator[Node]:
    loc, value = node
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*loc, key), child
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield (*loc, i), child


def _wildcard(node: Node, _root: Any) -> Iterator[Node]:
    yield from _children(node)


def _index(i: int) -> Selector:
    def select(node: Node, _root: Any) -> Iterator[Node]:
        loc, value = node
        if isinstance(value, list) and -len(value) <= i < len(value):
            j = i % len(value)
            yield (*loc, j), value[j]

    return select


def _slice(start: int | None, stop: int | None, step: int | None) -> Selector:
    def select(node: Node, _root: Any) -> Iterator[Node]:
        loc, value = node
        if isinstance(value, list):
            for j in range(*slice(start, stop, step).indices(len(value))):
                yield (*loc, j), value[j]

    return select


def _filter(test: Callable[[Any, Any], bool]) -> Selector:
    def select(node: Node, root: Any) -> Iterator[Node]:
        for child in _children(node):
            if test(child[1], root):
                yield child

    return select


def _descendants(node: Node) -> Iterator[Node]:
    """``node`` and everything below it, in document order (iterative: no recursion limit)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(_children(current))))


def _recursive(inner: Selector) -> Selector:
    def select(node: Node, root: Any) -> Iterator[Node]:
        for below in _descendants(node):
            yield from inner(below, root)

    return select


class CompiledPath:
    """A parsed path expression; :meth:`find` yields ``(location, value)`` matches."""

    def __init__(self, source: str, selectors: list[Selector]) -> None:
        self.source = source
        self._selectors = selectors

    def find(self, document: Any) -> Iterator[tuple[str, Any]]:
        """Every match in document order, as ``("$.a[0]", value)``."""
        nodes: Iterator[Node] = iter([((), document)])
        for selector in self._selectors:
            nodes = _chain(selector, nodes, document)
        for loc, value in nodes:
            yield format_location(loc), value


def _chain(selector: Selector, nodes: Iterator[Node], root: Any) -> Iterator[Node]:
    for node in nodes:
        yield from selector(node, root)


# --------------------------------------------------------------------------- filters

Operand: TypeAlias = Callable[[Any, Any], Any]  # (current, root) -> value or _MISSING


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


def _compare(op: str, a: Any, b: Any) -> bool:
    if a is _MISSING or b is _MISSING:
        return op == "!=" and not (a is _MISSING and b is _MISSING)
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if not ((_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str))):
        return False
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


def _comparison(op: str, left: Operand, right: Operand) -> Operand:
    def test(current: Any, root: Any) -> bool:
        return _compare(op, left(current, root), right(current, root))

    return test


# --------------------------------------------------------------------------- parser


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    # -- helpers
    def error(self, message: str, pos: int | None = None) -> PathSyntaxError:
        at = self.pos if pos is None else pos
        return PathSyntaxError(f"{message} at position {at} in {self.text!r}")

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def eat(self, s: str) -> bool:
        if self.peek(s):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str, what: str | None = None) -> None:
        if not self.eat(s):
            found = self.text[self.pos : self.pos + 1] or "the end"
            raise self.error(f"expected {what or repr(s)}, found {found!r}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    # -- path
    def path(self) -> list[Selector]:
        self.skip_ws()
        selectors: list[Selector] = []
        if self.eat("$"):
            pass
        elif not self.at_end() and not self.peek(".") and not self.peek("["):
            # "users[0]" is read as "$.users[0]".
            selectors.append(self.member_or_star())
        while True:
            self.skip_ws()
            if self.at_end():
                return selectors
            if self.eat(".."):
                if self.eat("["):
                    selectors.append(_recursive(self.bracket()))
                else:
                    selectors.append(_recursive(self.member_or_star()))
            elif self.eat("."):
                selectors.append(self.member_or_star())
            elif self.eat("["):
                selectors.append(self.bracket())
            else:
                raise self.error(f"expected '.', '..' or '[', found {self.text[self.pos]!r}")

    def member_or_star(self) -> Selector:
        if self.eat("*"):
            return _wildcard
        match = _NAME.match(self.text, self.pos)
        if not match:
            raise self.error("expected a member name or '*' (use [\"...\"] for other keys)")
        self.pos = match.end()
        return _member(match.group())

    def bracket(self) -> Selector:
        self.skip_ws()
        if self.eat("*"):
            selector: Selector = _wildcard
        elif self.peek('"') or self.peek("'"):
            selector = _member(self.string())
        elif self.eat("?"):
            test = self.expr()
            selector = _filter(lambda current, root: bool(test(current, root)))
        else:
            selector = self.index_or_slice()
        self.skip_ws()
        self.expect("]")
        return selector

    def integer(self) -> int | None:
        self.skip_ws()
        match = _INT.match(self.text, self.pos)
        if not match:
            return None
        self.pos = match.end()
        return int(match.group())

    def index_or_slice(self) -> Selector:
        start = self.integer()
        self.skip_ws()
        if not self.eat(":"):
            if start is None:
                raise self.error("expected an index, a slice, '*', a quoted name or '?'")
            return _index(start)
        stop = self.integer()
        step = None
        self.skip_ws()
        if self.eat(":"):
            step = self.integer()
            if step == 0:
                raise self.error("slice step must not be 0")
        return _slice(start, stop, step)

    def string(self) -> str:
        start = self.pos
        quote = self.text[self.pos]
        end = self.pos + 1
        while end < len(self.text) and self.text[end] != quote:
            end += 2 if self.text[end] == "\\" else 1
        if end >= len(self.text):
            raise self.error("unterminated string", start)
        body = self.text[start + 1 : end]
        self.pos = end + 1
        if quote == "'":
            body = body.replace('\\"', '"').replace("\\'", "'").replace('"', '\\"')
        try:
            value = json.loads(f'"{body}"')
        except json.JSONDecodeError as exc:
            raise self.error(f"bad string escape ({exc.msg})", start) from exc
        return str(value)

    # -- filter expressions
    def expr(self) -> Operand:
        left = self.and_expr()
        while True:
            self.skip_ws()
            if not self.eat("||"):
                return left
            right = self.and_expr()
            left = (lambda a, b: lambda c, r: bool(a(c, r)) or bool(b(c, r)))(left, right)

    def and_expr(self) -> Operand:
        left = self.unary()
        while True:
            self.skip_ws()
            if not self.eat("&&"):
                return left
            right = self.unary()
            left = (lambda a, b: lambda c, r: bool(a(c, r)) and bool(b(c, r)))(left, right)

    def unary(self) -> Operand:
        self.skip_ws()
        if self.peek("!") and not self.peek("!="):
            self.pos += 1
            inner = self.unary()
            return lambda c, r: not inner(c, r)
        if self.eat("("):
            inner = self.expr()
            self.skip_ws()
            self.expect(")")
            return inner
        return self.comparison()

    def comparison(self) -> Operand:
        start = self.pos
        left, left_is_path = self.operand()
        self.skip_ws()
        for op in ("==", "!=", "<=", ">=", "<", ">"):
            if self.eat(op):
                right, right_is_path = self.operand()
                if not (left_is_path or right_is_path):
                    raise self.error("a comparison needs a path (@... or $...) on one side", start)
                return _comparison(op, left, right)
        if self.peek("="):
            raise self.error("use '==' to compare")
        if not left_is_path:
            raise self.error("expected a path test or a comparison", start)
        return lambda c, r: left(c, r) is not _MISSING

    def operand(self) -> tuple[Operand, bool]:
        self.skip_ws()
        if self.peek("@") or self.peek("$"):
            absolute = self.text[self.pos] == "$"
            self.pos += 1
            steps = self.relative_steps()

            def walk(current: Any, root: Any) -> Any:
                value = root if absolute else current
                for step in steps:
                    if isinstance(step, int):
                        if not isinstance(value, list) or not -len(value) <= step < len(value):
                            return _MISSING
                        value = value[step]
                    else:
                        if not isinstance(value, dict) or step not in value:
                            return _MISSING
                        value = value[step]
                return value

            return walk, True
        if self.peek('"') or self.peek("'"):
            text = self.string()
            return (lambda c, r: text), False
        for word, constant in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.pos) and not _NAME.match(
                self.text, self.pos + len(word)
            ):
                self.pos += len(word)
                return (lambda c, r, v=constant: v), False
        match = _NUMBER.match(self.text, self.pos)
        if match:
            self.pos = match.end()
            raw = match.group()
            number = float(raw) if any(ch in raw for ch in ".eE") else int(raw)
            return (lambda c, r: number), False
        found = self.text[self.pos : self.pos + 1] or "the end"
        raise self.error(f"expected @, $, a number, a string, true, false or null, found {found!r}")

    def relative_steps(self) -> list[str | int]:
        steps: list[str | int] = []
        while True:
            if self.peek(".."):
                raise self.error("'..' is not allowed inside a filter")
            if self.eat("."):
                match = _NAME.match(self.text, self.pos)
                if not match:
                    raise self.error("expected a member name after '.'")
                self.pos = match.end()
                steps.append(match.group())
            elif self.eat("["):
                self.skip_ws()
                if self.peek('"') or self.peek("'"):
                    steps.append(self.string())
                else:
                    index = self.integer()
                    if index is None:
                        raise self.error("expected an index or a quoted name inside a filter path")
                    steps.append(index)
                self.skip_ws()
                self.expect("]")
            else:
                return steps


def compile_path(text: str) -> CompiledPath:
    """Parse ``text``; :class:`PathSyntaxError` names what is wrong and where."""
    if len(text) > _MAX_QUERY_CHARS:
        raise PathSyntaxError(f"query longer than {_MAX_QUERY_CHARS} characters")
    parser = _Parser(text)
    selectors = parser.path()
    return CompiledPath(text, selectors)
