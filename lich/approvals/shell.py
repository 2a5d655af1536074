"""Splitting a shell command line into the simple commands an approval rule judges.

Not a shell: a scanner that knows exactly as much bash syntax as a rule needs to
be safe. :func:`split_command` cuts a line on ``;``, ``&&``, ``||``, ``|``,
``|&``, ``&`` and newlines, and lifts out every command that runs inside it —
``$(...)``, backticks, ``<(...)``/``>(...)`` and ``( ... )`` subshells, also
inside double quotes — as commands of their own. Quotes and backslashes are
respected; whitespace outside quotes is normalised to one space. A line it
cannot read (an unbalanced quote, parenthesis or backtick) raises
:class:`ShellSyntaxError`: the rules then never allow it by a pattern.

Deliberately conservative where bash is subtle: ``#`` starts no comment and a
heredoc body is read as commands, so text bash would ignore can only make a
line *less* allowed (and match a deny rule), never more.
"""

from __future__ import annotations

import os
import re

from attrs import frozen

__all__ = ["ShellSyntaxError", "SimpleCommand", "Word", "split_command"]

# Leading words that are shell syntax, not the command: `if git status; then rm x; fi`
# is judged as `git status` and `rm x`.
_KEYWORDS = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done",
                       "while", "until", "time"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
# A second word that names a subcommand (`git status`, `npm test`), not an option,
# a path or anything expanded.
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Wrappers that run their arguments as a command: a deny rule sees through them.
_CLOSERS = frozenset({"}", "fi", "done"})
_WRAPPERS = frozenset({"command", "builtin", "exec", "nohup", "env", "sudo", "doas", "nice",
                       "time", "xargs", "timeout", "stdbuf"})


class ShellSyntaxError(ValueError):
    """The line is not one the scanner can read (unbalanced quotes or brackets)."""


@frozen
class Word:
    """One word of a simple command.

    :param raw: as written (quotes and backslashes kept, whitespace inside quotes kept).
    :param value: with the quoting removed (what the program receives, expansions aside).
    :param plain: written without quotes, escapes or expansions.
    """

    raw: str
    value: str
    plain: bool


@frozen
class SimpleCommand:
    """One command of a line, with what a rule needs to know about it.

    :param words: the words, redirections and their targets included, leading
        shell keywords (``then``, ``do``, ``{``…) left out.
    :param writes_file: it redirects output to a file (``>``, ``>>``, ``>|``,
        ``&>``, ``<>``, ``>&file``); not ``2>&1``, ``>&-`` or ``>/dev/null``.
    """

    words: tuple[Word, ...]
    writes_file: bool = False

    @property
    def text(self) -> str:
        """The command as rules match it: words as written, one space apart, an
        absolute path to the program replaced by its basename (``/usr/bin/git`` →
        ``git``; a relative ``./git`` stays)."""
        raws = [w.raw for w in self.words]
        i = self.command_index
        if i is not None and self.words[i].plain and self.words[i].raw.startswith("/"):
            raws[i] = os.path.basename(self.words[i].raw.rstrip("/")) or raws[i]
        return " ".join(raws)

    @property
    def command_index(self) -> int | None:
        """The index of the program's word: the first after ``NAME=value`` assignments."""
        for i, word in enumerate(self.words):
            if not _ASSIGNMENT.match(word.raw):
                return i
        return None

    def deny_forms(self) -> set[str]:
        """Every reading a deny rule is matched against: as written, unquoted, with
        leading assignments peeled off, programs by basename, and — after a wrapper
        that runs its arguments (``env``, ``sudo``, ``xargs``, ``timeout``…) — from
        every later word on, whatever options the wrapper took (``sudo -u root rm``).
        A deny rule matching any of them denies."""
        forms = {self.text}
        values = [w.value for w in self.words]
        start = self.command_index
        if start is None:
            return forms
        forms.add(" ".join(values))
        wrapped = False
        for i in range(start, len(values)):
            if i > start and not wrapped:
                break
            head = os.path.basename(values[i]) if values[i].startswith("/") else values[i]
            forms.add(" ".join([head, *values[i + 1:]]))
            if i == start:
                forms.add(" ".join([*values[:start], head, *values[i + 1:]]))
            wrapped = wrapped or head in _WRAPPERS
        return {f for f in forms if f}

    def suggestion(self) -> str:
        """The tight pattern a ``session``/``always`` approval of this command grants:
        the program and its subcommand word (when the second word is a plain word),
        then ``*`` — ``git status*``, ``ls*``; leading assignments are spelled out."""
        i = self.command_index
        if i is None:
            return self.text
        words = list(self.words)
        prefix = [w.raw for w in words[:i]]
        head = SimpleCommand((words[i],)).text
        parts = [*prefix, head]
        if i + 1 < len(words) and words[i + 1].plain and _PLAIN.fullmatch(words[i + 1].raw):
            parts.append(words[i + 1].raw)
        return " ".join(parts) + "*"


class _Builder:
    """The simple command being read: its finished words and the word in progress."""

    def __init__(self, found: list[SimpleCommand]) -> None:
        self.found = found
        self.words: list[Word] = []
        self.raw: list[str] = []
        self.value: list[str] = []
        self.plain = True
        self.started = False
        self.writes = False
        # After an output redirection operator: the next word is the file it writes.
        self.target_pending = False

    def add(self, raw: str, value: str, plain: bool = True) -> None:
        self.raw.append(raw)
        self.value.append(value)
        self.plain = self.plain and plain
        self.started = True

    def end_word(self) -> None:
        if self.started:
            word = Word("".join(self.raw), "".join(self.value), self.plain)
            if self.target_pending:
                self.target_pending = False
                if word.value != "/dev/null":
                    self.writes = True
            self.words.append(word)
        self.raw.clear()
        self.value.clear()
        self.plain = True
        self.started = False

    def operator(self, op: str, *, writes_target: bool) -> None:
        """A redirection operator, as a word of its own (so ``>f`` and ``> f`` read alike)."""
        self.end_word()
        self.words.append(Word(op, op, False))
        self.target_pending = writes_target

    def end_command(self) -> None:
        self.end_word()
        if self.target_pending:
            self.writes = True  # `cmd >` with no target: bash refuses it; never allow it
            self.target_pending = False
        body = list(self.words)
        while body and body[0].plain and body[0].raw in _KEYWORDS:
            body.pop(0)
        while body and body[-1].plain and body[-1].raw in _CLOSERS:
            body.pop()
        if body:
            self.found.append(SimpleCommand(tuple(body), self.writes))
        self.words.clear()
        self.writes = False


class _Scanner:
    """A recursive scanner over one line; commands found at any depth go to :attr:`found`."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.found: list[SimpleCommand] = []

    def error(self, message: str) -> ShellSyntaxError:
        return ShellSyntaxError(f"{message} at character {self.i + 1}")

    def peek(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.s[j] if j < len(self.s) else ""

    def parse_list(self, stop: str | None) -> None:
        """Commands up to the ``)`` that closes them (``stop``) or the end of the text."""
        cmd = _Builder(self.found)
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r":
                cmd.end_word()
                self.i += 1
            elif c in "\n;":
                cmd.end_command()
                self.i += 1
            elif c == "&" and self.peek(1) == ">":  # &> file, &>> file
                length = 3 if self.peek(2) == ">" else 2
                cmd.operator(self.s[self.i:self.i + length], writes_target=True)
                self.i += length
            elif c == "&":
                cmd.end_command()
                self.i += 2 if self.peek(1) == "&" else 1
            elif c == "|":
                cmd.end_command()
                self.i += 2 if self.peek(1) in ("|", "&") else 1
            elif c == "(":
                # A subshell, or `f()`/`a(b` (bash rejects or defines): its contents are
                # commands either way.
                cmd.end_word()
                self.i += 1
                self.parse_list(")")
            elif c == ")":
                if stop != ")":
                    raise self.error("unbalanced ')'")
                cmd.end_command()
                self.i += 1
                return
            elif c in "<>" and self.peek(1) == "(":  # process substitution <(...) >(...)
                start = self.i
                self.i += 2
                self.parse_list(")")
                cmd.add(self.s[start:self.i], self.s[start:self.i], False)
            elif c in "<>":
                self.redirect(cmd)
            elif c == "'":
                end = self.s.find("'", self.i + 1)
                if end < 0:
                    raise self.error("unbalanced single quote")
                cmd.add(self.s[self.i:end + 1], self.s[self.i + 1:end], False)
                self.i = end + 1
            elif c == '"':
                cmd.add(*self.double_quoted(), False)
            elif c == "\\":
                nxt = self.peek(1)
                if not nxt:
                    raise self.error("a backslash ends the line")
                if nxt != "\n":  # a line continuation joins the lines
                    cmd.add(c + nxt, nxt, False)
                self.i += 2
            elif c == "`":
                text = self.backtick()
                cmd.add(text, text, False)
            elif c == "$":
                text = self.dollar()
                cmd.add(text, text, text == "$")
            else:
                cmd.add(c, c)
                self.i += 1
        if stop is not None:
            raise self.error("unbalanced '('")
        cmd.end_command()

    def redirect(self, cmd: _Builder) -> None:
        """A redirection: ``<``, ``>``, ``>>``, ``>|``, ``<>``, ``<<``, ``<<-``, ``<<<``,
        ``<&``/``>&`` (with a descriptor number written just before it taken in, ``2>``)."""
        fd = ""
        if cmd.started and cmd.plain and "".join(cmd.raw).isdigit():
            fd = "".join(cmd.raw)
            cmd.raw.clear()
            cmd.value.clear()
            cmd.started = False
        op = self.s[self.i]
        self.i += 1
        if op == "<" and self.s.startswith("<<", self.i):
            op += "<<"
        elif op == "<" and self.peek() == "<":
            op += "<" + ("-" if self.peek(1) == "-" else "")
        elif self.peek() in (">", "|", "&") and not (op == "<" and self.peek() == "|"):
            op += self.peek()
        elif op == "<" and self.peek() == ">":
            op += ">"
        self.i += len(op) - 1
        if op.endswith("&"):
            # 2>&1, >&-, <&3: a descriptor, not a file. `>&word` writes the file `word`.
            j = self.i
            while j < len(self.s) and self.s[j].isdigit():
                j += 1
            if j < len(self.s) and self.s[j] == "-":
                j += 1
            if j > self.i:
                cmd.operator(fd + op + self.s[self.i:j], writes_target=False)
                self.i = j
                return
        cmd.operator(fd + op, writes_target=">" in op)

    def double_quoted(self) -> tuple[str, str]:
        """A ``"..."`` string: substitutions inside still run, so they are lifted out."""
        start = self.i
        self.i += 1
        value: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return self.s[start:self.i], "".join(value)
            if c == "\\" and self.peek(1) in ('"', "\\", "$", "`", "\n"):
                if self.peek(1) != "\n":
                    value.append(self.peek(1))
                self.i += 2
            elif c == "`":
                value.append(self.backtick())
            elif c == "$":
                value.append(self.dollar())
            else:
                value.append(c)
                self.i += 1
        raise self.error("unbalanced double quote")

    def backtick(self) -> str:
        """A `` `...` `` substitution: its text is a command line of its own."""
        start = self.i
        self.i += 1
        inner: list[str] = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "\\" and self.peek(1) in ("`", "\\", "$"):
                inner.append(self.peek(1))
                self.i += 2
            elif c == "`":
                self.i += 1
                nested = _Scanner("".join(inner))
                nested.parse_list(None)
                self.found.extend(nested.found)
                return self.s[start:self.i]
            else:
                inner.append(c)
                self.i += 1
        raise self.error("unbalanced backtick")

    def dollar(self) -> str:
        """``$(...)`` (lifted out), ``${...}`` (scanned for substitutions inside) or a
        plain ``$``-expansion; returns the text as written."""
        start = self.i
        nxt = self.peek(1)
        if nxt == "(":
            self.i += 2
            self.parse_list(")")
        elif nxt == "{":
            self.i += 2
            depth = 1
            while self.i < len(self.s) and depth:
                c = self.s[self.i]
                if c == "\\":
                    self.i += 2
                    continue
                if c == "}":
                    depth -= 1
                    self.i += 1
                elif c == "{":
                    depth += 1
                    self.i += 1
                elif c == "$":
                    self.dollar()
                elif c == "`":
                    self.backtick()
                elif c == "'":
                    end = self.s.find("'", self.i + 1)
                    if end < 0:
                        raise self.error("unbalanced single quote")
                    self.i = end + 1
                elif c == '"':
                    self.double_quoted()
                else:
                    self.i += 1
            if depth:
                raise self.error("unbalanced '${'")
        else:
            self.i += 1
        return self.s[start:self.i]


def split_command(line: str) -> tuple[SimpleCommand, ...]:
    """The simple commands of ``line``, each substitution's before the command it is in.

    :raises ShellSyntaxError: the line cannot be read (unbalanced quotes,
        parentheses or backticks).
    """
    scanner = _Scanner(line)
    scanner.parse_list(None)
    return tuple(scanner.found)
