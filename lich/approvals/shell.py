"""Reading a shell command line the way bash does, for the approval rules.

The line is parsed with a real bash grammar (tree-sitter-bash), not a scanner of
our own, and what a rule may conclude from it is kept structural:

* **Plain lines.** An allow rule decides only a line that is a list of *simple
  commands made of literal words*: words of unquoted safe characters, single
  quotes, double quotes without ``$``/`````, and backslash escapes, joined by
  ``;``, ``&&``, ``||``, ``|``, ``|&``, ``&`` or newlines, with no redirection but
  to ``/dev/null`` (or a descriptor, ``2>&1``). :attr:`ShellLine.problem` says
  why any other line is not plain: an expansion or substitution of any kind, a
  glob or brace or tilde, ANSI-C ``$'…'`` or locale ``$"…"`` quoting, a here-doc
  or here-string, a comment, a compound command (subshell, ``if``, ``{ }``,
  function…), an assignment that is not literal, a builtin that evaluates its
  arguments (``eval``, ``source``, ``exec``, ``trap``, ``let``, ``declare``…) or a
  syntax error. Such a line is never allowed by a pattern.
* **Every command, for deny rules.** :attr:`ShellLine.commands` holds every simple
  command found anywhere — in substitutions, subshells, process substitutions,
  subscripts, compound commands, and in the text given to ``eval``, ``bash -c``,
  ``trap`` or a here-document — each word with the parts that cannot be known
  before the line runs marked unknown (:attr:`Word.shape`). A deny rule meets the
  line if it *could* match one of them (:func:`could_match`), so ``$x -rf /``
  meets ``rm -rf *``. A line the grammar cannot read whole
  (:attr:`ShellLine.complete` false) is also matched from every word boundary of
  its raw text on.

The reader is a guard rail for rules, not a sandbox: a program can always run
another one (``python3 -c``, ``make``, a script), which is why the default asks.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterator, Sequence

import tree_sitter_bash
from attrs import frozen
from tree_sitter import Language, Node, Parser

__all__ = ["Shape", "ShellLine", "SimpleCommand", "Word", "could_match", "read_line"]

#: A word's value as bash will see it: literal text, and ``None`` for a part only
#: known when the line runs (an expansion, a substitution, a glob...).
Shape = tuple[str | None, ...]

# Unquoted characters that mean nothing to bash but themselves (in a word that is not
# the first of an assignment). Globs (`*?[`), braces, `~`, `#`, `!`, `$`, `` ` `` and
# the operators are not among them.
_SAFE = re.compile(r"(?:[A-Za-z0-9_\-./:=@%+,]|\\[^\n]|[^\x00-\x7f])+")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
# What can make a word of a text other than its letters: quotes, escapes, expansions.
_SPELLING = re.compile(r"[\\'\"`$]")
_IN_DOUBLE_QUOTES = re.compile(r"\\([\"\\$`\n])")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")

# Builtins (and keywords bash may see as commands) that evaluate their arguments as
# code, arithmetic (which runs the substitutions of array subscripts), variable
# names (which may hold a subscript) or change how later words are read: a line
# using one is not plain. `printf` only with `-v`.
_EVALUATING = frozenset({
    "eval", "source", ".", "exec", "command", "builtin", "trap", "alias", "unalias",
    "enable", "let", "declare", "typeset", "local", "export", "readonly", "unset",
    "read", "mapfile", "readarray", "test", "[", "getopts", "wait", "fc", "hash",
    "set", "shopt", "complete", "compgen", "compopt", "bind", "history", "jobs",
})
# Reserved words: bash reads them as syntax where the grammar may see a command name.
_RESERVED = frozenset({"if", "then", "else", "elif", "fi", "case", "esac", "for", "while",
                       "until", "do", "done", "in", "function", "select", "time", "coproc",
                       "{", "}", "!", "[[", "]]"})
# Programs that run their later words as a command (a deny rule sees through them).
_WRAPPERS = frozenset({"command", "builtin", "exec", "nohup", "env", "sudo", "doas", "nice",
                       "time", "xargs", "timeout", "stdbuf", "ionice", "chrt", "setsid",
                       "flock", "nsenter", "unshare", "chroot", "su", "runuser", "taskset",
                       "strace", "ltrace", "watch", "script", "busybox", "coproc",
                       # ... and more of them: a deny rule sees through each (a remote
                       # shell's command is read as a line too: _REMOTE).
                       "ssh", "rsh", "autossh", "sshpass", "mosh", "sg", "pkexec",
                       "setpriv", "prlimit", "runcon", "capsh", "cgexec", "aa-exec",
                       "unbuffer", "rlwrap", "caffeinate", "faketime", "eatmydata",
                       "proxychains", "proxychains4", "torsocks", "tsocks", "catchsegv",
                       "valgrind", "gdb", "lldb", "perf", "cpulimit", "numactl", "schedtool",
                       "firejail", "bwrap", "fakeroot", "fakechroot", "systemd-run",
                       "dbus-launch", "dbus-run-session", "xvfb-run", "chronic", "parallel",
                       "sem", "nq", "tsp", "daemonize", "start-stop-daemon", "entr",
                       "direnv", "op", "aws-vault", "doppler", "uv", "uvx", "pipx", "npx",
                       "poetry", "pdm", "hatch", "pixi", "conda", "mamba", "micromamba",
                       "bundle", "pyenv", "rbenv", "nix-shell", "tmux", "screen", "expect"})
# Programs that hand their later words, joined, to a shell to run as a line (the
# remote one of `ssh host 'a; b'`, `sg group 'a; b'`), and the ssh options whose
# value is a command line run locally.
_REMOTE = frozenset({"ssh", "rsh", "autossh", "sg"})
_SSH_COMMAND_OPTION = re.compile(
    r"(?i)^(?:-o)?\s*(?:proxycommand|localcommand|knownhostscommand|remotecommand)[=\s]\s*(.*)",
    re.DOTALL)
# Shells whose `-c` argument is a command line, and `find`'s actions that run one.
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "su",
                     "runuser", "script", "fish"})
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# How deep text handed to eval / bash -c is read as a line of its own.
_MAX_NESTING = 4
# Bounds on the deny readings of long lines (each only ever widens a reading):
# the words after a wrapper a command is read from, the text of one reading, and of
# one fragment of a line not read whole (a rule's literal start is what it meets).
_MAX_FORMS = 64
_MAX_SHAPE_CHARS = 2048
_MAX_FRAGMENT_CHARS = 256
# A line longer than this is not parsed (a pathological line would hold the event
# loop for seconds): asked about, and met by every deny rule.
_MAX_LINE_BYTES = 65_536
# All the text one line's reading parses, the line and every text nested in it (a
# here-document, eval's words, bash -c's script, a variable's value) together.
_MAX_READ_BYTES = 4 * _MAX_LINE_BYTES


# A value that could run a command when evaluated (a substitution in it), and the
# expansion that evaluates a value as a prompt string.
_CODE_IN_VALUE = re.compile(r"\$[({\[]|`|[<>]\(")
_PROMPT_EXPANSION = re.compile(r"@P\}\Z")

_LANGUAGE = Language(tree_sitter_bash.language())
_local = threading.local()


def _parser() -> Parser:
    """This thread's parser (a tree-sitter parser is not to be shared between threads)."""
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = Parser(_LANGUAGE)
    return parser


# Every byte of a non-ASCII character. The grammar's scanner corrupts memory on some
# of them (a crash after enough lines); to bash they are plain word characters, as
# `%` is: the grammar reads a copy with each such byte made `%`, so every offset is
# the same and the words are taken from the line itself.
_NON_ASCII = re.compile(rb"[\x80-\xff]")


@frozen
class Word:
    """One word of a simple command.

    :param raw: as written (quotes and backslashes kept).
    :param shape: the value bash passes on, quoting removed; ``None`` parts are only
        known when the line runs.
    """

    raw: str
    shape: Shape

    @property
    def literal(self) -> bool:
        """Whether the word is fully known before the line runs."""
        return None not in self.shape

    @property
    def value(self) -> str:
        """The value, with each unknown part written ``*``."""
        return "".join("*" if p is None else p for p in self.shape)


@frozen
class SimpleCommand:
    """One simple command: its words (leading assignments included), in order."""

    words: tuple[Word, ...]

    @property
    def text(self) -> str:
        """The command as allow rules match it: words as written, one space apart, an
        absolute path to the program replaced by its basename (``/usr/bin/git`` →
        ``git``; a relative ``./git`` stays)."""
        raws = [w.raw for w in self.words]
        i = self.command_index
        if i is not None and self.words[i].literal and self.words[i].raw.startswith("/"):
            raws[i] = os.path.basename(self.words[i].raw.rstrip("/")) or raws[i]
        return " ".join(raws)

    @property
    def command_index(self) -> int | None:
        """The index of the program's word: the first after ``NAME=value`` assignments."""
        for i, word in enumerate(self.words):
            if not _ASSIGNMENT.match(word.raw):
                return i
        return None

    @property
    def program(self) -> str | None:
        """The program's name as bash looks it up (quoting removed), when literal."""
        i = self.command_index
        if i is None or not self.words[i].literal:
            return None
        return self.words[i].value

    def deny_shapes(self) -> set[Shape]:
        """Every reading a deny rule is tried on: as written, unquoted, with leading
        assignments peeled off, programs by basename, and — after a wrapper that runs
        its arguments (``env``, ``sudo``, ``xargs``, ``timeout``…) or ``find -exec`` —
        from every later word on, whatever options the wrapper took."""
        shapes: set[Shape] = set()
        if all(w.literal for w in self.words):
            shapes.add((self.text,))
        start = self.command_index
        values = [w.shape for w in self.words]
        if start is None:
            shapes.add(_join(values))
            return {s for s in shapes if s}
        shapes.add(_join(values))
        wrapped = False
        starts = 0
        for i in range(start, len(values)):
            word = self.words[i]
            if i > start and not wrapped and word.value not in _FIND_ACTIONS:
                continue
            if (word.literal and word.value.startswith("-") and i > start
                    and word.value not in _FIND_ACTIONS):
                continue  # an option names no program
            starts += 1
            if starts > _MAX_FORMS:
                # Too many words that could each start the command run: this one is
                # met by every deny rule rather than read in quadratic time.
                shapes.add((None,))
                break
            if word.value in _FIND_ACTIONS:
                if i + 1 < len(values):
                    shapes.add(_join([_basename(values[i + 1]), *values[i + 2:]]))
                continue
            head = _basename(values[i])
            shapes.add(_join([head, *values[i + 1:]]))
            if i == start:
                shapes.add(_join([*values[:start], head, *values[i + 1:]]))
            wrapped = wrapped or (word.literal and os.path.basename(word.value) in _WRAPPERS)
            if not word.literal:
                # An unknown program could be any wrapper: read on as if it were one.
                wrapped = True
        return {_bounded(s) for s in shapes if s}

    def nested_texts(self) -> list[str | None]:
        """The text this command hands to a shell to run as a line of its own —
        ``eval``'s words, ``bash -c``'s script, ``trap``'s action — through any
        wrappers; ``None`` for such a text that is not known before the line runs."""
        found: list[str | None] = []
        start = self.command_index
        if start is None:
            return found
        words = self.words
        for i in range(start, len(words)):
            name = os.path.basename(words[i].value) if words[i].literal else None
            rest = words[i + 1:]
            if name == "eval" and rest:
                found.append(" ".join(w.value for w in rest)
                             if all(w.literal for w in rest) else None)
            elif name == "trap" and rest:
                found.append(rest[0].value if rest[0].literal else None)
            elif name in _EVALUATING or (name == "printf" and any(
                    w.value.startswith("-") and "v" in w.value for w in rest)):
                # A variable name or an arithmetic argument runs the substitutions of
                # its subscript: `test -v 'x[$(cmd)]'`.
                found.extend(w.value if w.literal else None for w in rest)
            elif name in _REMOTE or name in ("scp", "sftp"):
                if name in _REMOTE and rest:
                    found.append(" ".join(w.value for w in rest)
                                 if all(w.literal for w in rest) else None)
                for w in rest:
                    option = _SSH_COMMAND_OPTION.match(w.value) if w.literal else None
                    if option:
                        found.append(option.group(1))
            elif (name in _SHELLS and any(_is_c_flag(w) for w in rest)) or name == "watch":
                for w in rest:
                    if not w.literal:
                        found.append(None)
                    elif not w.value.startswith("-"):
                        found.append(w.value)
            if i == start and (name is None or name not in _WRAPPERS):
                break  # not a wrapper: its later words are its own arguments
        return found


def _is_c_flag(word: Word) -> bool:
    return word.literal and bool(re.fullmatch(r"-[a-zA-Z]*c[a-zA-Z]*", word.value))


def _bounded(shape: Shape) -> Shape:
    """``shape`` cut to :data:`_MAX_SHAPE_CHARS` characters of text, followed by anything
    (a wider shape: it meets every rule the whole one could), so that no reading of a
    long line costs more than a bounded match."""
    out: list[str | None] = []
    size = 0
    for part in shape:
        if part is None:
            out.append(None)
            continue
        if size + len(part) > _MAX_SHAPE_CHARS:
            out.extend((part[:_MAX_SHAPE_CHARS - size], None))
            return _merge(out)
        out.append(part)
        size += len(part)
    return shape


def _join(words: Sequence[Shape]) -> Shape:
    parts: list[str | None] = []
    for n, shape in enumerate(words):
        if n:
            parts.append(" ")
        parts.extend(shape)
    return tuple(parts)


def _basename(shape: Shape) -> Shape:
    """The part after the last literal ``/`` (an unknown part's own tail is unknown)."""
    for k in range(len(shape) - 1, -1, -1):
        part = shape[k]
        if part is not None and "/" in part.rstrip("/"):
            tail = part.rstrip("/")
            return (tail[tail.rindex("/") + 1:], *shape[k + 1:])
    return shape


@frozen
class ShellLine:
    """A command line as read for the rules.

    :param commands: every simple command of the line, at any depth (see the module
        docs): when the line is plain, exactly its top-level commands.
    :param nested: the simple commands of the texts it hands a shell to run
        (``eval``, ``bash -c``, ``trap``, a here-document), for deny rules only.
    :param problem: why no pattern can allow the line (``None``: it is plain).
    :param complete: whether every part was read (no syntax error, no text run by
        ``eval``/``bash -c`` left unknown).
    """

    text: str
    commands: tuple[SimpleCommand, ...]
    nested: tuple[SimpleCommand, ...] = ()
    problem: str | None = None
    complete: bool = True

    @property
    def plain(self) -> bool:
        """Whether the line is a list of simple commands of literal words."""
        return self.problem is None

    def deny_shapes(self) -> Iterator[Shape]:
        """Every text a deny or ask rule is tried on (:func:`could_match`)."""
        for command in (*self.commands, *self.nested):
            yield from command.deny_shapes()
        yield (" ".join(self.text.split()),)
        if not self.complete:
            yield from _fragments(self.text)


# ------------------------------------------------------------------ reading


class _Reader:
    """One walk over a parse tree: commands at any depth, and what makes it not plain."""

    def __init__(self, source: bytes, depth: int) -> None:
        self.source = source
        self.depth = depth
        self.commands: list[SimpleCommand] = []
        self.nested_commands: list[SimpleCommand] = []
        self.problems: list[str] = []
        self.complete = True

    def text(self, node: Node) -> str:
        return self.source[node.start_byte:node.end_byte].decode("utf-8", "surrogateescape")

    def problem(self, why: str) -> None:
        if why not in self.problems:
            self.problems.append(why)

    # -- the plain structure

    def top(self, root: Node) -> None:
        """Check the line's structure; every node is then walked for commands."""
        # The root may not span the whole line (a leading `\r`): what lies outside
        # it must be blank as well.
        self.gap(self.source[:root.start_byte], " \t\n")
        self.gap(self.source[root.end_byte:], " \t\n")
        self.gaps(root, " \t\n")
        for child in root.children:
            self.statement(child)

    def statement(self, node: Node) -> None:
        # A loop, not recursion: `a && b && ...` nests one list per operator.
        stack = [node]
        while stack:
            node = stack.pop()
            kind = node.type
            if kind in (";", "&", "&&", "||", "|", "|&"):
                continue
            if kind in ("list", "pipeline"):
                self.gaps(node, " \t\n")
                stack.extend(reversed(node.children))
            elif kind == "command":
                self.plain_command(node)
            elif kind == "redirected_statement":
                self.redirected(node)
            else:
                self.problem(_describe(kind))

    def redirected(self, node: Node) -> None:
        self.gaps(node, " \t")
        body = node.child_by_field_name("body")
        if body is None:
            self.problem("a redirection without a command")
        for child in node.children:
            if body is not None and child.id == body.id:
                if child.type == "command":
                    self.plain_command(child)
                else:
                    self.problem(_describe(child.type))
            else:
                self.redirect(child)

    def gaps(self, node: Node, allowed: str) -> None:
        """What lies between a node's children must be blanks (or a line continuation):
        text the grammar skipped is text it did not read."""
        at = node.start_byte
        for child in node.children:
            self.gap(self.source[at:child.start_byte], allowed)
            at = child.end_byte
        self.gap(self.source[at:node.end_byte], allowed)

    def gap(self, raw: bytes, allowed: str) -> None:
        text = raw.decode("utf-8", "surrogateescape").replace("\\\n", "")
        if text.strip(allowed):
            self.problem(f"text the grammar skipped: {text.strip(allowed)!r}")
            self.complete = False

    def plain_command(self, node: Node) -> None:
        self.gaps(node, " \t")
        name: str | None = None
        args: list[str] = []
        for child in node.children:
            kind = child.type
            if kind == "variable_assignment":
                if not self.literal_assignment(child):
                    self.problem("an assignment that is not literal")
            elif kind == "command_name":
                word = self.word(child.children[0]) if child.children else None
                if word is None or not word.literal:
                    self.problem("a command name that is not literal")
                else:
                    name = word.value
            elif kind.endswith("_redirect"):
                self.redirect(child)
            else:
                word = self.word(child)
                if not word.literal:
                    self.problem(_describe(_first_unknown(child)))
                args.append(word.value)
        if name is not None:
            base = os.path.basename(name) if "/" in name.rstrip("/") else name
            if name in _RESERVED:
                self.problem(f"the reserved word {name!r} as a command")
            elif name in _EVALUATING or base in _EVALUATING:
                self.problem(f"the builtin {name!r}, which evaluates its arguments")
            elif base == "printf" and any(a.startswith("-") and "v" in a for a in args):
                self.problem("printf -v, which evaluates a variable name")

    def literal_assignment(self, node: Node) -> bool:
        names = [c for c in node.children if c.type not in ("=", "+=")]
        if len(names) > 2 or not names or names[0].type != "variable_name":
            return False
        return len(names) == 1 or self.word(names[1]).literal

    def redirect(self, node: Node) -> None:
        """Only ``>/dev/null``-like redirections and descriptor copies are plain."""
        if node.type != "file_redirect":
            self.problem(_describe(node.type))
            return
        for fd in (c for c in node.children if c.type == "file_descriptor"):
            if not self.text(fd).isdigit():
                # The grammar takes `-2>&1` for a descriptor; bash, for a word and `>&1`.
                self.problem("a word the grammar read as a file descriptor")
        kids = [c for c in node.children if c.type != "file_descriptor"]
        if not kids:
            self.problem("a redirection")
            return
        op, targets = kids[0].type, kids[1:]
        if len(targets) > 1:
            self.problem("words after a redirection")
        if op in (">&-", "<&-") and not targets:
            return
        if len(targets) != 1:
            self.problem("a redirection")
            return
        target = self.word(targets[0])
        if op in (">&", "<&") and target.literal and re.fullmatch(r"[0-9]+-?|-", target.value):
            return
        if op in (">", ">>", ">|", "&>", "&>>", "<", ">&") and target.raw == "/dev/null":
            return
        self.problem("a redirection to a file")

    # -- words

    def word(self, node: Node) -> Word:
        """A word node's raw text and what bash makes of it."""
        raw = self.text(node)
        kind = node.type
        if kind in ("word", "number"):
            if _SAFE.fullmatch(raw) and not raw.startswith("~"):
                return Word(raw, (_ESCAPE.sub(r"\1", raw.replace("\\\n", "")),))
            return Word(raw, (None,))
        if kind == "raw_string":
            return Word(raw, (raw[1:-1],))
        if kind == "string":
            inner = raw[1:-1]
            if all(c.type in ('"', "string_content") for c in node.children) and not (
                    set(_ESCAPE.sub("", inner)) & {"$", "`"}):
                return Word(raw, (_IN_DOUBLE_QUOTES.sub(
                    lambda m: "" if m.group(1) == "\n" else m.group(1), inner),))
            return Word(raw, (None,))
        if kind == "concatenation":
            parts: list[str | None] = []
            for child in node.children:
                parts.extend(self.word(child).shape)
            return Word(raw, _merge(parts))
        return Word(raw, (None,))

    # -- every command, at any depth

    def collect(self, node: Node) -> None:
        """Every ``command`` node under ``node``, with the texts it hands a shell."""
        stack = [node]
        while stack:
            current = stack.pop()
            if current.is_error or current.is_missing:
                self.complete = False
                self.problem("a syntax error")
            kind = current.type
            if kind == "command":
                self.add_command(current)
            elif kind in ("heredoc_body", "herestring_redirect"):
                # Data to most programs, a script to a shell: read as one, so that a
                # deny rule can only meet more.
                body = self.text(current)
                if kind == "herestring_redirect":
                    body = body.lstrip("<").strip()
                    body = _unquote_guess(body)
                self.nested(body)
            elif kind == "variable_assignment":
                value = current.child_by_field_name("value")
                if value is not None:
                    self.maybe_code(value)
            elif kind == "for_statement":
                for value in current.children_by_field_name("value"):
                    self.maybe_code(value)
            elif kind == "expansion" and _PROMPT_EXPANSION.search(self.text(current)):
                # `${p@P}` expands p's value as a prompt string: its substitutions
                # run, whatever set p (a file, a command's output).
                self.nested(None)
            elif kind == "comment":
                self.problem("a comment")
            elif kind == "file_descriptor" and not self.text(current).isdigit():
                # Not a descriptor to bash: a word of a command the grammar did not see.
                self.complete = False
                self.problem("a word the grammar read as a file descriptor")
            elif kind in ("test_command", "declaration_command", "unset_command"):
                # `[ -v 'x[$(cmd)]' ]`, `declare 'x=([0]=$(cmd))'`: their words are
                # evaluated (names, arithmetic, array values): read as code too.
                for word in _words_under(current):
                    shape = self.word(word)
                    self.nested(shape.value if shape.literal else None)
            stack.extend(reversed(current.children))

    def add_command(self, node: Node) -> None:
        words: list[Word] = []
        for child in node.children:
            kind = child.type
            if kind == "variable_assignment":
                words.append(self.word_of_assignment(child))
            elif kind == "command_name":
                if child.children:
                    words.append(self.word(child.children[0]))
            elif kind.endswith("_redirect"):
                continue
            else:
                words.append(self.word(child))
        parent = node.parent
        if parent is not None and parent.type == "redirected_statement":
            # `cmd >/dev/null more words`: the grammar hangs the words on the
            # redirection; they are the command's.
            for redirect in parent.children:
                if redirect.type == "file_redirect":
                    extra = [c for c in redirect.children
                             if c.type not in ("file_descriptor",) and c.is_named][1:]
                    words.extend(self.word(c) for c in extra)
        if not words:
            return
        command = SimpleCommand(tuple(words))
        self.commands.append(command)
        for text in command.nested_texts():
            self.nested(text)

    def word_of_assignment(self, node: Node) -> Word:
        raw = self.text(node)
        if not self.literal_assignment(node):
            return Word(raw, (None,))
        names = [c for c in node.children if c.is_named]
        head = raw[: (names[1].start_byte - node.start_byte)] if len(names) > 1 else raw
        value = self.word(names[1]).shape if len(names) > 1 else ()
        return Word(raw, _merge([head, *value]))

    def maybe_code(self, node: Node) -> None:
        """A literal value a variable gets (an assignment, a ``for`` word) that holds a
        substitution: bash runs it when the variable is evaluated — in arithmetic
        (``$((x))`` with ``x='a[$(cmd)]'``), by ``${x@P}`` — so deny rules read it as
        a line too. Only widens the deny readings: the line stays as plain as it was."""
        word = self.word(node)
        if not word.literal or not _CODE_IN_VALUE.search(word.value):
            return
        if self.depth >= _MAX_NESTING:
            self.nested_commands.append(SimpleCommand((Word(word.value, (None,)),)))
            return
        inner = _read(word.value, self.depth + 1)
        self.nested_commands.extend((*inner.commands, *inner.nested))
        if not inner.complete:
            self.nested_commands.extend(SimpleCommand((Word(word.value, shape),))
                                        for shape in _fragments(word.value))

    def nested(self, text: str | None) -> None:
        """A text run as a command line of its own (``None``: not known before)."""
        if text is None or self.depth >= _MAX_NESTING:
            self.nested_commands.append(SimpleCommand((Word(text or "*", (None,)),)))
            self.complete = self.complete and text is not None
            return
        inner = _read(text, self.depth + 1)
        self.nested_commands.extend((*inner.commands, *inner.nested))
        if not inner.complete:
            self.complete = False
            self.nested_commands.extend(SimpleCommand((Word(text, shape),))
                                        for shape in _fragments(text))


def _words_under(node: Node) -> Iterator[Node]:
    """The word-like nodes under ``node``, outermost only."""
    stack = list(reversed(node.children))
    while stack:
        child = stack.pop()
        if child.type in ("word", "raw_string", "string", "concatenation", "number"):
            yield child
        else:
            stack.extend(reversed(child.children))


def _fragments(text: str) -> Iterator[Shape]:
    """A text not read whole, from every word boundary on, followed by anything: a
    rule that could match a part of it meets it. One with quoting or an expansion
    could spell any word (``'i'd``, ``$'\\x69d'``): every rule meets it."""
    if _SPELLING.search(text.replace("\\\n", "")):
        yield (None,)
        return
    for source in {text, text.replace("\\\n", "")}:
        normal = " ".join(source.split())
        for m in re.finditer(r"(?:^|(?<=[\s;&|()<>`$'\"{}=\\]))[^\s]", normal):
            yield (normal[m.start():m.start() + _MAX_FRAGMENT_CHARS], None)


def _unquote_guess(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _merge(parts: Sequence[str | None]) -> Shape:
    """Adjacent literal parts joined, adjacent unknown ones made one."""
    merged: list[str | None] = []
    for part in parts:
        last = merged[-1] if merged else ""
        if part is None and merged and last is None:
            continue
        if part is not None and last is not None and merged:
            merged[-1] = last + part
            continue
        merged.append(part)
    return tuple(p for p in merged if p != "")


def _first_unknown(node: Node) -> str:
    """The kind of the first part of a word that makes it unknown."""
    if node.type in ("concatenation", "string"):
        for child in node.children:
            if child.type not in ('"', "string_content", "raw_string") and not (
                    child.type in ("word", "number") and _SAFE.fullmatch(
                        child.text.decode("utf-8", "surrogateescape") if child.text else "")):
                return _first_unknown(child)
    return node.type


_DESCRIPTIONS = {
    "command_substitution": "a command substitution",
    "process_substitution": "a process substitution",
    "simple_expansion": "a parameter expansion",
    "expansion": "a parameter expansion",
    "arithmetic_expansion": "an arithmetic expansion",
    "ansi_c_string": "ANSI-C quoting $'...'",
    "translated_string": "locale quoting $\"...\"",
    "heredoc_redirect": "a here-document",
    "herestring_redirect": "a here-string",
    "subshell": "a subshell",
    "compound_statement": "a { ... } group",
    "function_definition": "a function definition",
    "negated_command": "a negated command",
    "test_command": "a [[ ... ]] test",
    "declaration_command": "a declaration (declare, export, local...)",
    "unset_command": "unset",
    "variable_assignment": "an assignment alone",
    "variable_assignments": "an assignment alone",
    "comment": "a comment",
    "ERROR": "a syntax error",
    "brace_expression": "a brace expansion",
    "$": "a lone '$' (locale quoting $\"...\")",
}


def _describe(kind: str) -> str:
    if kind in _DESCRIPTIONS:
        return _DESCRIPTIONS[kind]
    if kind in ("word", "number"):
        return "a word with a glob, brace, tilde or other special character"
    if kind.endswith("_statement") or kind in ("c_style_for_statement",):
        return f"a compound command ({kind.removesuffix('_statement').replace('_', ' ')})"
    return kind.replace("_", " ")


def _read(line: str, depth: int) -> ShellLine:
    try:
        source = line.encode("utf-8")
    except UnicodeEncodeError:
        return ShellLine(line, (), problem="text that is not UTF-8", complete=False)
    if "\x00" in line:
        return ShellLine(line, (), problem="a NUL character", complete=False)
    budget: list[int] | None = getattr(_local, "budget", None)
    if budget is not None:
        budget[0] -= len(source)
        if budget[0] < 0:
            # Texts within texts (here-documents in substitutions in here-documents…)
            # would be read again at every level: a few hundred bytes could hold the
            # reader for hours. Past the budget the text is unknown, as a long line is.
            return ShellLine(line, (SimpleCommand((Word(line[:64], (None,)),)),),
                             problem="too much nested text to read", complete=False)
    if len(source) > _MAX_LINE_BYTES:
        # Not read at all: what it runs is unknown, so every deny rule meets it.
        return ShellLine(line, (SimpleCommand((Word(line[:64], (None,)),)),),
                         problem=f"longer than {_MAX_LINE_BYTES} bytes", complete=False)
    if "\\\n" in line:
        # bash joins the lines before it reads words; a grammar that joined them
        # anywhere else would read other words: never plain, and read both ways.
        joined = _read(line.replace("\\\n", ""), depth)
        return ShellLine(line, joined.commands, joined.nested,
                         "a line continuation (backslash-newline)", complete=False)
    tree = _parser().parse(_NON_ASCII.sub(b"%", source))
    reader = _Reader(source, depth)
    reader.top(tree.root_node)
    reader.collect(tree.root_node)
    if tree.root_node.has_error:
        reader.complete = False
        reader.problem("a syntax error")
    if not reader.commands and not reader.problems:
        reader.problem("no command")
    problem = "; ".join(reader.problems) if reader.problems else None
    return ShellLine(line, tuple(reader.commands), tuple(reader.nested_commands), problem,
                     reader.complete)


@functools.lru_cache(maxsize=512)
def read_line(line: str) -> ShellLine:
    """Read ``line`` as bash would (see the module docs). Never raises."""
    _local.budget = [_MAX_READ_BYTES]
    try:
        return _read(line, 0)
    except RecursionError:
        return ShellLine(line, (), problem="nesting too deep to read", complete=False)
    finally:
        _local.budget = None


def could_match(pattern: str, shape: Shape) -> bool:
    """Whether the rule pattern ``pattern`` (``*`` any run of characters) matches some
    text of the shape ``shape`` (``None`` parts any run of characters): whether two
    star patterns share a text."""
    if None not in shape:
        return _pattern_re(pattern).fullmatch("".join(shape)) is not None  # type: ignore[arg-type]
    if len(shape) == 2 and shape[1] is None and shape[0] is not None:
        # Text, then anything (a fragment, a cut reading): the rule could match iff the
        # text can begin a string the rule matches — with a `*` in the rule, iff the
        # text and the rule's literal start agree as far as both go.
        text, head = shape[0], pattern.split("*", 1)[0]
        if "*" not in pattern:
            return pattern.startswith(text)
        return text.startswith(head) or head.startswith(text)
    p: list[str | None] = [None if c == "*" else c for c in pattern]
    s: list[str | None] = []
    for part in shape:
        if part is None:
            s.append(None)
        else:
            s.extend(part)
    seen: set[tuple[int, int]] = set()
    stack = [(0, 0)]
    while stack:
        i, j = stack.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(p) and j == len(s):
            return True
        moves: list[tuple[int, int]] = []
        a = p[i] if i < len(p) else ""
        b = s[j] if j < len(s) else ""
        if a is None:
            moves.append((i + 1, j))  # the rule's star matches nothing more
            if j < len(s):
                moves.append((i, j + 1))  # it takes the next character (or unknown part)
        if b is None:
            moves.append((i, j + 1))
            if i < len(p):
                moves.append((i + 1, j))  # the unknown part makes the rule's character
        if a and b and a == b:
            moves.append((i + 1, j + 1))
        stack.extend(moves)
    return False


@functools.lru_cache(maxsize=1024)
def _pattern_re(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(p) for p in pattern.split("*")), re.DOTALL)
