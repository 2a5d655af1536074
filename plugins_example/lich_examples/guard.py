"""A policy guard for tool calls (plugin ``guard``).

The policy lives in ``[plugin_settings.guard]``; everything is optional::

    [plugin_settings.guard]
    deny_tools = ["http_request", "web_*"]   # names or globs
    allow_tools = ["read_file", "list_dir"]  # if given, every other tool is denied
    deny_commands = ['\\bsudo\\b']           # regular expressions (re.search), added to defaults
    default_command_rules = true             # true, false, or a list of default rules to keep
    command_args = ["command"]               # arguments that hold shell commands
    deny_paths = ["secrets/**"]              # globs, added to the defaults
    default_path_rules = true                # true or false
    path_args = ["path", "file_path"]        # arguments that hold paths (default: a common set)
    check_command_paths = true               # also check each word of a command against deny_paths
    directory_tools = ["grep_files", "list_dir", "disk_usage"]  # tools that read a whole tree
    docs_tools = ["docs_read", "docs_search"]  # tools whose paths are in the docs dir
    walk_limit = 20000                       # entries looked at under such a tree; more: refused

    [[plugin_settings.guard.rewrite]]
    tool = "terminal"                        # name or glob
    arg = "timeout_ms"
    max = 60000                              # cap a number; also: min, default (when absent), set

The default command rules refuse ``rm -rf /`` and its variants, piping a
download into a shell (``curl … | sh``), fork bombs, ``mkfs``, writes to raw
disks, ``chmod -R`` of ``/`` and shutting the machine down; see
:data:`DEFAULT_COMMAND_RULES`. The default path rules refuse ``.env`` files,
private keys and credentials anywhere (:data:`DEFAULT_PATH_RULES`).

Path globs: ``*`` and ``?`` stay inside one path segment, ``**`` spans any
number of segments (``**/`` also none), ``[abc]`` is a class. A pattern
without ``/`` matches the file name in any directory (``*.pem`` is
``**/*.pem``); a pattern with ``/`` matches the path relative to the work dir
(``secrets/**``), or the absolute path if it starts with ``/`` (``/etc/**``).
A path is checked as written, with ``~`` expanded, and with symlinks
resolved, so a link to ``.env`` is refused too.

Order: the ``trylast`` before-hook applies the rewrite rules (and already
refuses what it can without walking a tree); ``lich_check_tool_call`` then runs every
check on the final arguments, after every plugin's rewrites — being
``trylast`` alone would not do, since a later ``trylast`` plugin may rewrite
after it. A rewrite rule that no longer holds there (another plugin undid
it) blocks the call.

Tools that read a whole tree (``directory_tools``: ``grep_files``,
``list_dir``, ``disk_usage`` by default) are judged by what they will touch,
not by their argument: the guard walks the directory (links followed, at
most ``walk_limit`` entries, else it refuses) and blocks if a denied
path is anywhere under it.

The docs tools (``docs_tools``: ``docs_read``, ``docs_search``) read the docs
dir (``LICH_DOCS_DIR``, ``<work_dir>/docs``, or lich's own), not the work dir:
their ``path`` is judged relative to that dir (as ``<docs>/<path>`` and
``<docs>/<path>.md``), and ``docs_search``, which reads every doc, has the whole
docs dir walked, so ``deny_paths = ["docs/private/**"]`` holds for them too.

Command rules are matched against the command as written and against
normalised forms of it (:func:`command_forms`: quotes dropped, ``/bin/rm``
read as ``rm``, ``env``/``command``/``exec``/``sudo`` wrappers removed,
``sh -c`` and ``eval`` scripts unwrapped, ``//`` read as ``/``).

An invalid policy is refused before anything runs (``lich_check_config``
raises :class:`GuardPolicyError`, listing every problem with its ``$.path``):
``lich config validate`` reports it and a run does not start, so a typo in
the policy never leaves a run unguarded. At run time any error blocks the
call (fail closed). Command checks are a tripwire against mistakes, not a sandbox: a
determined shell command can always hide what it does (``a=r; ${a}m -rf /``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich import Block, Rewrite, hookimpl
from lich.settings import (
    ConfigError,
    at_least,
    each,
    json_type_name,
    non_empty,
    one_of,
    setting,
    structure_settings,
)

if TYPE_CHECKING:
    from lich import LichConfig, RunInfo, ToolCall

__all__ = [
    "ABSENT",
    "DEFAULT_COMMAND_RULES",
    "DEFAULT_DIRECTORY_TOOLS",
    "DEFAULT_PATH_ARGS",
    "DEFAULT_PATH_RULES",
    "CommandRule",
    "GuardPolicyError",
    "GuardSettings",
    "PathRule",
    "Policy",
    "RewriteRule",
    "check",
    "command_forms",
    "decide",
    "lich_before_tool_call",
    "lich_check_config",
    "lich_check_tool_call",
    "parse_policy",
]

PLUGIN_NAME = "guard"

# name -> (what it refuses, pattern). Patterns look within one simple command
# (up to ; & |) so that "rm -rf ./build; ls /" is not mistaken for "rm -rf /".
DEFAULT_COMMAND_RULES: dict[str, tuple[str, str]] = {
    "rm_root": (
        "recursive rm of /, /* or the home directory",
        r"\brm\b(?=[^;&|\n]*\s(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)\b)"
        r"(?=[^;&|\n]*\s(?:/\*?|~/?\*?|\$HOME/?\*?|\$\{HOME\}/?\*?)(?=\s|$|[;&|]))",
    ),
    "rm_no_preserve_root": ("rm --no-preserve-root", r"\brm\b[^;&|\n]*--no-preserve-root"),
    "pipe_to_shell": (
        "a download piped into a shell or interpreter (curl … | sh)",
        r"\b(?:curl|wget|fetch)\b[^;&\n]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:env\s+)?"
        r"(?:(?:ba|z|k|da|fi)?sh|python[0-9.]*|perl|ruby|node)\b",
    ),
    "shell_fetch_substitution": (
        "a shell running a download (sh -c \"$(curl …)\", bash <(curl …))",
        r"\b(?:(?:ba|z|k|da)?sh|source|\.)\s[^;&|\n]*(?:<\(|\$\(|`)\s*(?:curl|wget)\b",
    ),
    "fork_bomb": (
        "a fork bomb (a function that pipes into or backgrounds itself)",
        # Any function name, both definition forms: `f(){ f|f& };f`, `:(){ :|:& };:`,
        # `function f { f & }`. The body calls the function itself before a lone
        # `|` or `&` (not `||` / `&&`).
        r"(?:\bfunction\s+(?P<a>[^\s(){}|&;<>]+)\s*(?:\(\s*\))?"
        r"|(?<![^\s;&|(])(?P<b>[^\s(){}|&;<>]+)\s*\(\s*\))"
        r"\s*\{[^}]*?(?<![^\s{;&|])(?:(?P=a)|(?P=b))\s*(?:\|(?!\|)|&(?!&))",
    ),
    "mkfs": ("formatting a file system", r"\bmkfs(?:\.\w+)?\b"),
    "dd_to_device": (
        "dd onto a device",
        r"\bdd\b[^;&|\n]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)",
    ),
    "write_to_disk": (
        "redirecting output onto a raw disk",
        r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk)\w*",
    ),
    "chmod_root": (
        "recursive chmod or chown of /",
        r"\b(?:chmod|chown)\b(?=[^;&|\n]*\s-[a-zA-Z]*R)(?=[^;&|\n]*\s/(?=\s|$|[;&|]))",
    ),
    "shutdown": (
        "shutting down or rebooting the machine",
        r"(?:^\s*|[;&|]\s*|\bsudo\s+)(?:(?:systemctl\s+)?(?:shutdown|reboot|poweroff|halt)\b"
        r"|init\s+[06]\b)",
    ),
}

DEFAULT_PATH_RULES: tuple[str, ...] = (
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa",
    "**/id_dsa",
    "**/id_ecdsa",
    "**/id_ed25519",
    "**/.ssh/**",
    "**/.aws/credentials",
    "**/.netrc",
)

DEFAULT_PATH_ARGS: tuple[str, ...] = (
    "path", "paths", "file", "file_path", "filename", "dir", "directory", "cwd",
    "src", "dst", "source", "destination", "target",
)

DEFAULT_DIRECTORY_TOOLS: tuple[str, ...] = ("grep_files", "list_dir", "disk_usage")
"""Tools that read a whole directory tree (contents, names or sizes); their path
arguments default to the work dir."""

DEFAULT_DOCS_TOOLS: tuple[str, ...] = ("docs_read", "docs_search")
"""Tools whose paths are relative to the docs dir; ``docs_search`` reads all of it."""
_WALKS_ALL_DOCS = ("docs_search",)

_WHERE = f"$.plugin_settings.{PLUGIN_NAME}"


class GuardPolicyError(ConfigError):
    """The guard policy is invalid. ``problems`` are ``"$.path: message"`` strings.

    A :class:`lich.settings.ConfigError`, so ``lich config validate`` reports it
    and a run refuses to start.
    """

    def __str__(self) -> str:
        return "invalid guard policy: " + "; ".join(self.problems)


@frozen
class CommandRule:
    """A command pattern; ``reason`` is what a blocked call is told."""

    name: str
    reason: str
    regex: re.Pattern[str]


@frozen
class PathRule:
    """A path glob and its compiled form."""

    pattern: str
    regex: re.Pattern[str]


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()
"""The value of :attr:`RewriteRule.set` and :attr:`RewriteRule.default` when not given."""


@frozen
class RewriteRule:
    """Rewrite ``arg`` of the tools matching ``tool``: one ``[[plugin_settings.guard.rewrite]]``.

    ``set`` and ``default`` are :data:`ABSENT` when not given.
    """

    tool: str = setting(check=non_empty, help="a tool name or glob")
    arg: str = setting(check=non_empty, help="the argument to rewrite")
    set: Any = ABSENT  # always this value
    default: Any = ABSENT  # this value when the argument is absent
    max: float | None = setting(None, help="cap a number")
    min: float | None = setting(None, help="raise a number")

    def __attrs_post_init__(self) -> None:
        actions = [k for k in ("set", "default", "max", "min")
                   if getattr(self, k) not in (ABSENT, None)]
        if not actions:
            raise ValueError("give at least one of set, default, max, min")
        if self.has_set and len(actions) > 1:
            others = ", ".join(a for a in actions if a != "set")
            raise ValueError(f"set cannot be combined with {others}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min:g}) is greater than max ({self.max:g})")

    @property
    def has_set(self) -> bool:
        """Whether ``set`` was given."""
        return self.set is not ABSENT

    @property
    def has_default(self) -> bool:
        """Whether ``default`` was given."""
        return self.default is not ABSENT

    def apply(self, args: dict[str, Any]) -> None:
        """Change ``args`` in place."""
        if self.has_set:
            args[self.arg] = self.set
            return
        if self.arg not in args and self.has_default:
            args[self.arg] = self.default
        value = args.get(self.arg)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        if self.max is not None and value > self.max:
            args[self.arg] = _same_kind(self.max, value)
        elif self.min is not None and value < self.min:
            args[self.arg] = _same_kind(self.min, value)


def _same_kind(bound: float, value: float) -> float:
    # Keep integers integers: a capped timeout_ms stays an int for the tool's schema.
    return int(bound) if isinstance(value, int) and float(bound).is_integer() else bound


@frozen
class Policy:
    """A checked guard policy."""

    deny_tools: tuple[str, ...] = ()
    allow_tools: tuple[str, ...] | None = None
    command_rules: tuple[CommandRule, ...] = ()
    command_args: tuple[str, ...] = ("command",)
    path_rules: tuple[PathRule, ...] = ()
    path_args: tuple[str, ...] = DEFAULT_PATH_ARGS
    check_command_paths: bool = True
    rewrites: tuple[RewriteRule, ...] = ()
    directory_tools: tuple[str, ...] = DEFAULT_DIRECTORY_TOOLS
    docs_tools: tuple[str, ...] = DEFAULT_DOCS_TOOLS
    walk_limit: int = 20_000


# --------------------------------------------------------------------------- parsing


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob (see the module docs) to an anchored regular expression."""
    body = pattern.strip()
    if body.endswith("/") and len(body) > 1:
        body = body.rstrip("/") + "/**"
    if "/" not in body:
        body = "**/" + body
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("/**", i) and i + 3 == n:
            out.append("(?:/.*)?")
            i += 3
        elif body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] == "*":
            out.append("[^/]*")
            i += 1
        elif body[i] == "?":
            out.append("[^/]")
            i += 1
        elif body[i] == "[":
            end = body.find("]", i + 2)
            if end < 0:
                out.append(re.escape("["))
                i += 1
                continue
            inner = body[i + 1 : end]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    return re.compile("".join(out), re.S)


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {json_type_name(value)}")
    non_empty(value)
    return value


_names = each(_name, what="an array of strings")


def _names_or(default: tuple[str, ...]) -> Callable[[Any], tuple[str, ...]]:
    # An empty list keeps the default: `path_args = []` must not turn path checks off.
    def parse(value: Any) -> tuple[str, ...]:
        names: tuple[str, ...] = _names(value)
        return names or default

    return parse


def _command_rule(value: Any) -> CommandRule:
    pattern = _name(value)
    try:
        return CommandRule(pattern, f"matches {pattern!r}", re.compile(pattern))
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None


def _path_rule(value: Any) -> PathRule:
    pattern = _name(value)
    try:
        return PathRule(pattern, glob_to_regex(pattern))
    except re.error as exc:
        raise ValueError(f"invalid glob {pattern!r}: {exc}") from None


_default_rule_name = one_of(*DEFAULT_COMMAND_RULES)


def _checked_rule_name(value: Any) -> str:
    name = _name(value)
    _default_rule_name(name)
    return name


_rule_names = each(_checked_rule_name, what="true, false or an array of default rule names")


_ALL: bool | tuple[str, ...] = True  # every default rule (typed as the field is)


def _default_rules(value: Any) -> bool | tuple[str, ...]:
    if isinstance(value, bool):
        return value
    names: tuple[str, ...] = _rule_names(value)
    return names


@frozen
class GuardSettings:
    """``[plugin_settings.guard]`` as written (see the module docstring);
    :func:`parse_policy` makes the :class:`Policy` from it."""

    deny_tools: tuple[str, ...] = setting((), parse=_names)
    allow_tools: tuple[str, ...] | None = setting(None, parse=_names)
    deny_commands: tuple[CommandRule, ...] = setting(
        (), parse=each(_command_rule, what="an array of regular expressions"))
    default_command_rules: bool | tuple[str, ...] = setting(_ALL, parse=_default_rules)
    command_args: tuple[str, ...] = setting(("command",), parse=_names_or(("command",)))
    deny_paths: tuple[PathRule, ...] = setting(
        (), parse=each(_path_rule, what="an array of globs"))
    default_path_rules: bool = True
    path_args: tuple[str, ...] = setting(DEFAULT_PATH_ARGS, parse=_names_or(DEFAULT_PATH_ARGS))
    check_command_paths: bool = True
    rewrite: tuple[RewriteRule, ...] = ()
    directory_tools: tuple[str, ...] = setting(DEFAULT_DIRECTORY_TOOLS, parse=_names)
    docs_tools: tuple[str, ...] = setting(DEFAULT_DOCS_TOOLS, parse=_names)
    walk_limit: int = setting(20_000, check=at_least(1),
                              help="entries the guard looks at under a walked directory")


def _default_command_rule(name: str) -> CommandRule:
    description, pattern = DEFAULT_COMMAND_RULES[name]
    return CommandRule(name, f"{name} ({description})", re.compile(pattern))


def parse_policy(raw: Mapping[str, Any] | None) -> Policy:
    """Check ``[plugin_settings.guard]`` and build the :class:`Policy`.

    :raises GuardPolicyError: listing every problem with its ``$.path``.
    """
    try:
        settings = structure_settings(raw, GuardSettings, _WHERE)
    except ConfigError as exc:
        raise GuardPolicyError(exc.problems) from None
    defaults = settings.default_command_rules
    keep = DEFAULT_COMMAND_RULES if defaults is True else (defaults or ())
    path_defaults = DEFAULT_PATH_RULES if settings.default_path_rules else ()
    return Policy(
        deny_tools=settings.deny_tools,
        allow_tools=settings.allow_tools,
        command_rules=(*(_default_command_rule(n) for n in keep), *settings.deny_commands),
        command_args=settings.command_args,
        path_rules=(*(PathRule(p, glob_to_regex(p)) for p in path_defaults),
                    *settings.deny_paths),
        path_args=settings.path_args,
        check_command_paths=settings.check_command_paths,
        rewrites=settings.rewrite,
        directory_tools=settings.directory_tools,
        docs_tools=settings.docs_tools,
        walk_limit=settings.walk_limit,
    )


# --------------------------------------------------------------------------- deciding


def _path_forms(value: str, work_dir: str) -> Iterator[str]:
    """The forms a path is matched in: relative to the work dir and absolute, as
    written and with symlinks resolved."""
    root = os.path.realpath(work_dir)
    literal = os.path.join(root, value)  # as the tools take it: no ~ or $VAR expansion
    expanded = os.path.join(root, os.path.expanduser(os.path.expandvars(value)))
    # realpath of the joined path, not of its normpath: "link/../x" goes where the
    # link's parent is, as the tool's own walk goes, not where the text suggests.
    candidates = (os.path.normpath(literal), os.path.realpath(literal),
                  os.path.normpath(expanded), os.path.realpath(expanded))
    seen = set()
    for absolute in candidates:
        if absolute in seen:
            continue
        seen.add(absolute)
        yield absolute.replace(os.sep, "/")
        if absolute == root or absolute.startswith(root.rstrip(os.sep) + os.sep):
            yield os.path.relpath(absolute, root).replace(os.sep, "/")


def _denied_path(value: str, policy: Policy, work_dir: str) -> tuple[str, str] | None:
    if not value or "\x00" in value:
        return None
    for form in _path_forms(value, work_dir):
        for rule in policy.path_rules:
            if rule.regex.fullmatch(form):
                return value, rule.pattern
    return None


# Commands that run their arguments as a command: `env rm …`, `sudo -u root rm …`.
# name -> its options that take a value (skipped with it).
_WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "command": frozenset(),
    "exec": frozenset({"-a"}),
    "builtin": frozenset(),
    "nohup": frozenset(),
    "setsid": frozenset(),
    "busybox": frozenset(),
    "time": frozenset({"-f", "-o"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "sudo": frozenset({"-u", "-g", "-C", "-h", "-p", "-U", "-r", "-t", "-D", "-R"}),
    "doas": frozenset({"-u", "-C"}),
}
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)
_OPERATOR_CHARS = "();<>|&\n"
_NESTING_LIMIT = 3  # sh -c "bash -c 'eval …'": deeper than this is not unwrapped


def command_forms(command: str) -> list[str]:
    """The forms of ``command`` the command rules are matched against.

    A rule is a regular expression written for the plain spelling (``rm -rf /``,
    ``curl … | sh``); these forms spell the common disguises plainly:

    * the command as written;
    * flattened: quotes and backslashes dropped (``"r"m -rf "/"``), ``${IFS}``
      read as a space, ``$( ) ` ( ) { }`` as command separators, and
      ``/bin/``, ``/usr/bin/`` … dropped before a program name (``/bin/rm``);
    * tokenised as the shell would (:mod:`shlex`), each simple command with its
      wrappers removed (``env``, ``command``, ``exec``, ``sudo -u root``,
      ``nice -n 5``, variable assignments …), its program reduced to a base name,
      path words normalised (``//``, ``/.``, ``/usr/..`` are ``/``), and the
      script of ``sh -c``/``bash -c``/``eval`` unwrapped and tokenised in turn;
      each of these also flattened.

    A tripwire, not a parser of the shell language: see the module docs.
    """
    forms: list[str] = []

    def add(form: str) -> None:
        if form not in forms:
            forms.append(form)

    add(command)
    add(_flat(command))
    for form in _normalised(command, 0):
        add(form)
        add(_flat(form))
    return forms


_IFS = re.compile(r"\$(?:IFS\b|\{IFS\})")
_SEPARATORS = re.compile(r"\$\(|[`(){}]")
_BIN_DIR = re.compile(r"(?<![^\s;&|])(?:/usr)?(?:/local)?/s?bin/(?=[^\s/])")


def _flat(command: str) -> str:
    text = _IFS.sub(" ", command)
    text = text.replace("'", "").replace('"', "").replace("\\", "")
    text = _SEPARATORS.sub(" ; ", text)
    return _BIN_DIR.sub("", text)


def _normalised(command: str, depth: int) -> list[str]:
    """The shell-tokenised forms of ``command`` (see :func:`command_forms`)."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=_OPERATOR_CHARS)
        lexer.whitespace = " \t\r"
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: the shell would refuse it too
        return []
    out: list[str] = []
    inner: list[str] = []
    words: list[str] = []

    def flush() -> None:
        simple = _unwrapped(words)
        words.clear()
        if not simple:
            return
        out.append(" ".join(simple))
        if depth >= _NESTING_LIMIT:
            return
        script = _script_of(simple)
        if script is not None:
            inner.extend(_normalised(script, depth + 1))

    for token in tokens:
        if token and set(token) <= set(_OPERATOR_CHARS):
            flush()
            out.append(token.replace("\n", ";"))
        else:
            words.append(token)
    flush()
    return [" ".join(out), *inner]


def _unwrapped(words: list[str]) -> list[str]:
    """One simple command without its wrappers and assignments, its program as a
    base name and its path words normalised."""
    i = 0
    while i < len(words):
        word = words[i]
        if _ASSIGNMENT.fullmatch(word):
            i += 1
            continue
        takes = _WRAPPERS.get(word.rsplit("/", 1)[-1])
        if takes is None:
            break
        wrapper = word.rsplit("/", 1)[-1]
        i += 1
        while i < len(words) and words[i].startswith("-") and words[i] != "-":
            option = words[i]
            i += 1
            if option == "--":
                break
            if option in takes:
                i += 1
        if wrapper == "timeout" and i < len(words):
            i += 1  # the duration
    rest = [_normal_path(word) for word in words[i:]]
    if rest and "/" in rest[0].rstrip("/"):
        rest[0] = rest[0].rstrip("/").rsplit("/", 1)[-1]
    return rest


def _normal_path(word: str) -> str:
    if not word.startswith(("/", "~")):
        return word
    star = word.endswith("/*")
    body = re.sub("/+", "/", word[:-2] if star else word)
    body = posixpath.normpath(body) if body else "/"
    if star:
        return body.rstrip("/") + "/*"
    return body


def _script_of(words: list[str]) -> str | None:
    """The script ``sh -c SCRIPT`` or ``eval WORDS`` runs, if ``words`` is one."""
    if words[0] == "eval":
        return " ".join(words[1:])
    if words[0] not in _SHELLS:
        return None
    for i, word in enumerate(words[1:], 1):
        if not word.startswith("-") or word.startswith("--"):
            continue
        if "c" in word[1:]:
            after = [w for w in words[i + 1:] if not w.startswith("-")]
            return after[0] if after else None
    return None


def _command_words(command: str) -> list[str]:
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:  # unbalanced quotes: fall back to plain words
        words = command.split()
    out = []
    for word in words:
        if "=" in word:
            out.append(word.split("=", 1)[1])
        if not word.startswith("-"):
            out.append(word)
    return [w for w in out if w and not set(w) <= set("<>|&;()")]


def _path_values(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _denied_tool(policy: Policy, name: str) -> Block | None:
    for pattern in policy.deny_tools:
        if fnmatch.fnmatchcase(name, pattern):
            shown = "" if pattern == name else f" (matches {pattern!r})"
            return Block(f"denied_tool: {name}{shown}")
    if policy.allow_tools is not None and not any(
        fnmatch.fnmatchcase(name, p) for p in policy.allow_tools
    ):
        return Block(f"denied_tool: {name} is not in allow_tools")
    return None


def _denied_inside(value: str, policy: Policy, work_dir: str) -> Block | None:
    """Walk the directory ``value`` names (if it is one) as a tree-reading tool
    would, links followed; a denied path anywhere in it refuses the call.

    The guard cannot know from ``path="."`` which files ``grep_files`` will open,
    so it looks at every one; a tree of more than ``walk_limit`` entries is
    refused rather than half-checked (fail closed).
    """
    if not value or "\x00" in value:
        return None
    start = os.path.realpath(os.path.join(work_dir, value))  # literal, as the tools take it
    if not os.path.isdir(start):
        return None
    seen_dirs: set[str] = set()
    stack = [start]
    count = 0
    while stack:
        current = stack.pop()
        real = os.path.realpath(current)
        if real in seen_dirs:  # a link cycle, or two links to one directory
            continue
        seen_dirs.add(real)
        try:
            with os.scandir(current) as entries:
                children = list(entries)
        except OSError:
            continue  # unreadable for the guard is unreadable for the tool
        for entry in children:
            count += 1
            if count > policy.walk_limit:
                return Block(
                    f"denied_path: {value} holds more than {policy.walk_limit} entries, too many "
                    "for the guard to check; name a narrower path"
                )
            hit = _denied_path(entry.path, policy, work_dir)
            if hit:
                shown = os.path.relpath(entry.path, start).replace(os.sep, "/")
                return Block(f"denied_path: {value} contains {shown} (matches {hit[1]!r})")
            try:
                if entry.is_dir():  # follows links, as a walking tool may
                    stack.append(entry.path)
            except OSError:
                continue
    return None


def _docs_root(work_dir: str) -> str | None:
    """The docs dir the docs tools of this work dir read (None: they read nothing)."""
    from lich_builtin_tools import resolve_docs_root

    root = resolve_docs_root(work_dir, os.environ)
    return None if root is None else os.path.realpath(root)


def _docs_verdict(policy: Policy, name: str, args: Mapping[str, Any], work_dir: str, *,
                  walk: bool) -> Block | None:
    """A docs tool: its paths are in the docs dir, and docs_search reads all of it."""
    root = _docs_root(work_dir)
    if root is None:
        return None
    for key in policy.path_args:
        for value in _path_values(args.get(key)):
            for candidate in (value, f"{value}.md"):
                hit = _denied_path(os.path.join(root, candidate), policy, work_dir)
                if hit:
                    return Block(f"denied_path: {value} in the docs dir (matches {hit[1]!r})")
    if walk and name in _WALKS_ALL_DOCS:
        # Named as the model would name it: relative to the work dir when inside it.
        real_work = os.path.realpath(work_dir)
        inside = root == real_work or root.startswith(real_work.rstrip(os.sep) + os.sep)
        return _denied_inside(os.path.relpath(root, real_work) if inside else root,
                              policy, work_dir)
    return None


def _verdict(policy: Policy, name: str, args: Mapping[str, Any], work_dir: str, *,
             walk: bool = True) -> Block | None:
    """The command and path checks on ``args`` as they are; ``walk``: also walk
    the trees of the ``directory_tools`` (and the docs dir for ``docs_search``)."""
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in policy.docs_tools):
        return _docs_verdict(policy, name, args, work_dir, walk=walk)
    for key in policy.command_args:
        command = args.get(key)
        if not isinstance(command, str):
            continue
        forms = command_forms(command)
        for command_rule in policy.command_rules:
            if any(command_rule.regex.search(form) for form in forms):
                return Block(f"denied_command: {command_rule.reason}")
        if policy.check_command_paths:
            for word in _command_words(command):
                hit = _denied_path(word, policy, work_dir)
                if hit:
                    return Block(f"denied_path: {hit[0]} in the command (matches {hit[1]!r})")

    for key in policy.path_args:
        for value in _path_values(args.get(key)):
            hit = _denied_path(value, policy, work_dir)
            if hit:
                return Block(f"denied_path: {hit[0]} (matches {hit[1]!r})")

    if walk and any(fnmatch.fnmatchcase(name, pattern) for pattern in policy.directory_tools):
        roots = [v for key in policy.path_args for v in _path_values(args.get(key))]
        for root in roots or ["."]:  # no path: these tools walk the work dir
            blocked = _denied_inside(root, policy, work_dir)
            if blocked:
                return blocked
    return None


def decide(policy: Policy, call: ToolCall, work_dir: str, *,
           walk: bool = True) -> Block | Rewrite | None:
    """The guard's before-hook answer for ``call``: a :class:`Block`, a
    :class:`Rewrite` (the rewrite rules) or ``None``. ``walk=False`` leaves the
    directory walk to :func:`check` (the before-hook does; no tree is walked twice)."""
    blocked = _denied_tool(policy, call.name)
    if blocked:
        return blocked
    args = dict(call.args)
    for rule in policy.rewrites:
        if fnmatch.fnmatchcase(call.name, rule.tool):
            rule.apply(args)
    blocked = _verdict(policy, call.name, args, work_dir, walk=walk)
    if blocked:
        return blocked
    return Rewrite(args) if args != dict(call.args) else None


def check(policy: Policy, call: ToolCall, work_dir: str) -> Block | None:
    """The guard's final answer, on the arguments the tool will run with.

    Every check of :func:`decide` again, and one more: a rewrite rule that no
    longer holds (a later plugin raised a capped ``timeout_ms`` again) refuses
    the call, since the policy says what the argument must be.
    """
    blocked = _denied_tool(policy, call.name)
    if blocked:
        return blocked
    for rule in policy.rewrites:
        if not fnmatch.fnmatchcase(call.name, rule.tool):
            continue
        expected = dict(call.args)
        rule.apply(expected)
        if expected != dict(call.args):
            return Block(
                f"denied_rewrite: {rule.arg} of {call.name} was changed after the guard's "
                f"rewrite rule (the rule gives {expected.get(rule.arg)!r})"
            )
    return _verdict(policy, call.name, call.args, work_dir)


# --------------------------------------------------------------------------- hooks

_cache: dict[str, Policy] = {}
_cache_lock = threading.Lock()


def _policy_for(settings: Mapping[str, Any]) -> Policy:
    key = json.dumps(settings, sort_keys=True, default=repr)
    with _cache_lock:
        policy = _cache.get(key)
    if policy is None:
        policy = parse_policy(settings)
        with _cache_lock:
            if len(_cache) > 64:
                _cache.clear()
            _cache[key] = policy
    return policy


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check the policy: ``lich config validate`` and every run refuse an invalid one."""
    _policy_for(config.plugin_settings.get(PLUGIN_NAME, {}))


@hookimpl(trylast=True)
def lich_before_tool_call(call: ToolCall, run: RunInfo) -> Block | Rewrite | None:
    """Apply the rewrite rules (and refuse early what is already refused); an
    error here propagates, and lich then blocks the call."""
    return decide(_policy_for(run.settings_for(PLUGIN_NAME)), call, run.work_dir, walk=False)


@hookimpl
def lich_check_tool_call(call: ToolCall, run: RunInfo) -> Block | None:
    """The policy on the final arguments: after every plugin's rewrite, so none
    can step around it."""
    return check(_policy_for(run.settings_for(PLUGIN_NAME)), call, run.work_dir)
