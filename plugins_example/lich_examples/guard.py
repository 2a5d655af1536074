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

An invalid policy is refused when the plugin is registered
(:class:`GuardPolicyError`, listing every problem with its ``$.path``): the
plugin then shows as failed in ``lich plugins`` and guards nothing, and
strict mode refuses to start. At run time any error blocks the call (fail
closed). Command checks are a tripwire against mistakes, not a sandbox: a
determined shell command can always hide what it does.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
import re
import shlex
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich import Block, Rewrite, hookimpl

if TYPE_CHECKING:
    from lich import LichConfig, RunInfo, ToolCall, ToolRegistry

__all__ = [
    "DEFAULT_COMMAND_RULES",
    "DEFAULT_PATH_ARGS",
    "DEFAULT_PATH_RULES",
    "CommandRule",
    "GuardPolicyError",
    "PathRule",
    "Policy",
    "RewriteRule",
    "decide",
    "lich_before_tool_call",
    "lich_register_tools",
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

_KEYS = (
    "deny_tools", "allow_tools", "deny_commands", "default_command_rules", "command_args",
    "deny_paths", "default_path_rules", "path_args", "check_command_paths", "rewrite",
)
_REWRITE_KEYS = ("tool", "arg", "set", "default", "max", "min")
_WHERE = f"$.plugin_settings.{PLUGIN_NAME}"


class GuardPolicyError(ValueError):
    """The guard policy is invalid. ``problems`` are ``"$.path: message"`` strings."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid guard policy: " + "; ".join(self.problems))


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


@frozen
class RewriteRule:
    """Rewrite ``arg`` of the tools matching ``tool``."""

    tool: str
    arg: str
    set: Any = None
    has_set: bool = False
    default: Any = None
    has_default: bool = False
    max: float | None = None
    min: float | None = None

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


def _string_list(raw: Mapping[str, Any], key: str, problems: list[str]) -> tuple[str, ...] | None:
    if key not in raw:
        return None
    value = raw[key]
    if not isinstance(value, list):
        problems.append(f"{_WHERE}.{key}: expected a list of strings, got {type(value).__name__}")
        return None
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            problems.append(f"{_WHERE}.{key}[{i}]: expected a non-empty string, got {item!r}")
        else:
            out.append(item)
    return tuple(out)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_rewrite(index: int, raw: Any, problems: list[str]) -> RewriteRule | None:
    where = f"{_WHERE}.rewrite[{index}]"
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected a table with tool, arg and max/min/default/set")
        return None
    before = len(problems)
    for key in raw:
        if key not in _REWRITE_KEYS:
            problems.append(f"{where}.{key}: unknown key{_suggest(key, _REWRITE_KEYS)}")
    for key in ("tool", "arg"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            problems.append(f"{where}.{key}: required, a non-empty string")
    actions = [k for k in ("set", "default", "max", "min") if k in raw]
    if not actions:
        problems.append(f"{where}: give at least one of set, default, max, min")
    if "set" in raw and len(actions) > 1:
        others = ", ".join(a for a in actions if a != "set")
        problems.append(f"{where}: set cannot be combined with {others}")
    for key in ("max", "min"):
        if key in raw and not _number(raw[key]):
            problems.append(f"{where}.{key}: expected a number, got {raw[key]!r}")
    if _number(raw.get("min")) and _number(raw.get("max")) and raw["min"] > raw["max"]:
        problems.append(f"{where}: min ({raw['min']}) is greater than max ({raw['max']})")
    if len(problems) > before:
        return None
    return RewriteRule(
        tool=raw["tool"],
        arg=raw["arg"],
        set=raw.get("set"),
        has_set="set" in raw,
        default=raw.get("default"),
        has_default="default" in raw,
        max=raw.get("max"),
        min=raw.get("min"),
    )


def _suggest(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(known)})"


def parse_policy(raw: Mapping[str, Any] | None) -> Policy:
    """Check ``[plugin_settings.guard]`` and build the :class:`Policy`.

    :raises GuardPolicyError: listing every problem with its ``$.path``.
    """
    raw = raw or {}
    problems: list[str] = []
    if not isinstance(raw, Mapping):
        raise GuardPolicyError([f"{_WHERE}: expected a table"])
    for key in raw:
        if key not in _KEYS:
            problems.append(f"{_WHERE}.{key}: unknown setting{_suggest(key, _KEYS)}")

    deny_tools = _string_list(raw, "deny_tools", problems) or ()
    allow_tools = _string_list(raw, "allow_tools", problems)
    command_args = _string_list(raw, "command_args", problems) or ("command",)
    path_args = _string_list(raw, "path_args", problems) or DEFAULT_PATH_ARGS

    command_rules: list[CommandRule] = []
    defaults = raw.get("default_command_rules", True)
    if defaults is True:
        keep: Iterable[str] = DEFAULT_COMMAND_RULES
    elif defaults is False:
        keep = ()
    elif isinstance(defaults, list) and all(isinstance(d, str) for d in defaults):
        keep = defaults
        for i, name in enumerate(defaults):
            if name not in DEFAULT_COMMAND_RULES:
                problems.append(
                    f"{_WHERE}.default_command_rules[{i}]: no default rule named {name!r}"
                    f"{_suggest(name, DEFAULT_COMMAND_RULES)}"
                )
    else:
        problems.append(
            f"{_WHERE}.default_command_rules: expected true, false or a list of rule names"
        )
        keep = ()
    for name in keep:
        if name in DEFAULT_COMMAND_RULES:
            description, pattern = DEFAULT_COMMAND_RULES[name]
            command_rules.append(
                CommandRule(name, f"{name} ({description})", re.compile(pattern))
            )
    for i, pattern in enumerate(_string_list(raw, "deny_commands", problems) or ()):
        try:
            command_rules.append(
                CommandRule(pattern, f"matches {pattern!r}", re.compile(pattern))
            )
        except re.error as exc:
            problems.append(
                f"{_WHERE}.deny_commands[{i}]: invalid regular expression {pattern!r}: {exc}"
            )

    path_defaults = raw.get("default_path_rules", True)
    if not isinstance(path_defaults, bool):
        problems.append(
            f"{_WHERE}.default_path_rules: expected true or false, got {path_defaults!r}"
        )
        path_defaults = True
    patterns = [*(DEFAULT_PATH_RULES if path_defaults else ()),
                *(_string_list(raw, "deny_paths", problems) or ())]
    path_rules = []
    for pattern in patterns:
        try:
            path_rules.append(PathRule(pattern, glob_to_regex(pattern)))
        except re.error as exc:
            index = patterns.index(pattern) - (len(DEFAULT_PATH_RULES) if path_defaults else 0)
            problems.append(f"{_WHERE}.deny_paths[{index}]: invalid glob {pattern!r}: {exc}")

    check_paths = raw.get("check_command_paths", True)
    if not isinstance(check_paths, bool):
        problems.append(
            f"{_WHERE}.check_command_paths: expected true or false, got {check_paths!r}"
        )

    rewrites = []
    raw_rewrites = raw.get("rewrite", [])
    if not isinstance(raw_rewrites, list):
        problems.append(
            f"{_WHERE}.rewrite: expected a list of tables ([[plugin_settings.guard.rewrite]])"
        )
        raw_rewrites = []
    for i, item in enumerate(raw_rewrites):
        rule = _parse_rewrite(i, item, problems)
        if rule is not None:
            rewrites.append(rule)

    if problems:
        raise GuardPolicyError(problems)
    return Policy(
        deny_tools=deny_tools,
        allow_tools=allow_tools,
        command_rules=tuple(command_rules),
        command_args=command_args,
        path_rules=tuple(path_rules),
        path_args=path_args,
        check_command_paths=bool(check_paths),
        rewrites=tuple(rewrites),
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
def lich_register_tools(registry: ToolRegistry, config: LichConfig) -> None:
    """Registers no tool: checks the policy, so an invalid one fails the plugin's load."""
    _policy_for(config.plugin_settings.get(PLUGIN_NAME, {}))


@hookimpl(trylast=True)
def lich_before_tool_call(call: ToolCall, run: RunInfo) -> Block | Rewrite | None:
    """Apply the policy; an error here propagates, and lich then blocks the call."""
    return decide(_policy_for(run.settings_for(PLUGIN_NAME)), call, run.work_dir)
