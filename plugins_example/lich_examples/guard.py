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

Order: rewrite rules run first, then the tool, command and path checks on
the final arguments. The guard's before-hook is ``trylast``, so it judges
the arguments every other plugin's rewrites produced.

An invalid policy is refused before anything runs (``lich_check_config``
raises :class:`GuardPolicyError`, listing every problem with its ``$.path``):
``lich config validate`` reports it and a run does not start, so a typo in
the policy never leaves a run unguarded. At run time any error blocks the
call (fail closed). Command checks are a tripwire against mistakes, not a sandbox: a
determined shell command can always hide what it does.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich import Block, Rewrite, hookimpl
from lich.settings import (
    ConfigError,
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
    "DEFAULT_PATH_ARGS",
    "DEFAULT_PATH_RULES",
    "CommandRule",
    "GuardPolicyError",
    "GuardSettings",
    "PathRule",
    "Policy",
    "RewriteRule",
    "decide",
    "lich_before_tool_call",
    "lich_check_config",
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
    "fork_bomb": ("a fork bomb", r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"),
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
        r"(?:^\s*|[;&|]\s*|\bsudo\s+)(?:shutdown|reboot|poweroff|halt)\b",
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
    )


# --------------------------------------------------------------------------- deciding


def _path_forms(value: str, work_dir: str) -> Iterator[str]:
    """The forms a path is matched in: relative to the work dir and absolute, as
    written and with symlinks resolved."""
    root = os.path.realpath(work_dir)
    expanded = os.path.expanduser(os.path.expandvars(value))
    lexical = os.path.normpath(os.path.join(root, expanded))
    seen = set()
    for absolute in (lexical, os.path.realpath(lexical)):
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


def decide(policy: Policy, call: ToolCall, work_dir: str) -> Block | Rewrite | None:
    """The guard's answer for ``call``: a :class:`Block`, a :class:`Rewrite` or ``None``."""
    name = call.name
    for pattern in policy.deny_tools:
        if fnmatch.fnmatchcase(name, pattern):
            shown = "" if pattern == name else f" (matches {pattern!r})"
            return Block(f"denied_tool: {name}{shown}")
    if policy.allow_tools is not None and not any(
        fnmatch.fnmatchcase(name, p) for p in policy.allow_tools
    ):
        return Block(f"denied_tool: {name} is not in allow_tools")

    args = dict(call.args)
    for rule in policy.rewrites:
        if fnmatch.fnmatchcase(name, rule.tool):
            rule.apply(args)

    for key in policy.command_args:
        command = args.get(key)
        if not isinstance(command, str):
            continue
        for command_rule in policy.command_rules:
            if command_rule.regex.search(command):
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

    return Rewrite(args) if args != dict(call.args) else None


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
    """Apply the policy; an error here propagates, and lich then blocks the call."""
    return decide(_policy_for(run.settings_for(PLUGIN_NAME)), call, run.work_dir)
