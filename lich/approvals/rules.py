"""Approval rules: what ``terminal(git status*)`` means, and which rules a call meets.

Pure and fast: no I/O beyond resolving paths (``realpath``), no state. The
builtin ``approvals`` plugin decides with :func:`decide`; the core shows the
person :func:`suggest_rules` and remembers ``session`` approvals with
:func:`rules_cover`.

**A rule** is ``tool`` (every call of the tool) or ``tool(pattern)`` (the calls
whose primary argument the pattern matches). The name may use ``*``
(``mcp__git__*``, ``mcp__*__delete_*``). ``*`` is the only wildcard, in names
and patterns: it matches any run of characters, ``/`` and spaces included
(``write_file(src/*)`` covers ``src/a/b.py``); everything else is literal and
case-sensitive.

**The primary argument** of a tool is the one it declares
(:attr:`lich.tools.Tool.primary_arg`/``primary_kind``), else its first required
string parameter, its kind following the parameter's name: ``command``/``cmd``
→ shell, ``path``/``file``/``file_path``/``filename``/``dir``/``directory`` →
path, ``url``/``uri`` → url, anything else text. A pattern reads it by kind:

* **shell** — the line is read with a bash grammar (:mod:`lich.approvals.shell`).
  An allow pattern decides only a *plain* line: a list of simple commands of
  literal words (plain quoting, no expansion, substitution, glob, here-doc,
  ANSI-C or locale quoting, comment, compound command, evaluating builtin, or
  redirection but to ``/dev/null``) joined by ``;``, ``&&``, ``||``, ``|``,
  ``|&``, ``&`` or newlines; the allow rules must then cover **every** command
  (several rules may share the work: ``git status && git diff`` needs ``git
  status*`` and ``git diff*``). Any other line is never allowed by a pattern
  (only by a bare ``terminal`` rule): it is asked about. Whitespace is
  normalised; an absolute path to the program is matched by its basename
  (``/usr/bin/git status`` is ``git status``; ``./git`` stays ``./git``).
  Leading assignments are part of the text: ``PAGER=x git log`` is not allowed
  by ``git log*``. A deny or ask rule meets the line if it *could* match any
  simple command found anywhere in it — in substitutions, subshells, the text
  given to ``eval``/``bash -c``/``trap``, here-documents — read as written,
  unquoted, with assignments and wrappers (``env``, ``sudo``, ``xargs``,
  ``find -exec``…) peeled off, with every part not known before the line runs
  standing for any text (``$x -rf /`` meets ``rm -rf *``); a line the grammar
  cannot read whole is also met from any word boundary on. Deny rules are a
  guard rail, not a sandbox: a program can always run another (``python3
  -c``, ``make``, a script), which is why the default asks.
* **path** — the argument resolved against the work dir (``..`` and symlinks
  resolved): a relative pattern matches the path relative to the work dir
  (``src/../.github/x`` is ``.github/x``; ``.`` is the work dir itself); a
  path outside the work dir is matched only by an absolute pattern
  (``/tmp/*``; ``~/`` is expanded), which matches the absolute resolved path.
* **url** — ``scheme://host[:port]/path?query`` with the scheme and host
  lower-cased and any user info dropped; a URL without a host is never
  matched by a pattern.
* **text** — the argument as given.

A call whose primary argument is missing or not a string is matched by no
pattern (only by a bare ``tool`` rule).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias
from urllib.parse import urlsplit

from attrs import field, frozen

from lich.approvals.shell import Shape, could_match, read_line

if TYPE_CHECKING:
    from lich.tools import PrimaryKind, Tool

__all__ = [
    "MODES",
    "Action",
    "Mode",
    "Primary",
    "Rule",
    "RuleSet",
    "Verdict",
    "decide",
    "parse_rule",
    "primary_of",
    "rules_cover",
    "suggest_rules",
]

Mode: TypeAlias = Literal["ask", "allow", "deny-unlisted"]
MODES: tuple[Mode, ...] = ("ask", "allow", "deny-unlisted")
Action: TypeAlias = Literal["allow", "ask", "deny"]

_NAME = re.compile(r"[A-Za-z0-9_.*-]+")
_KIND_BY_NAME: dict[str, PrimaryKind] = {
    "command": "shell", "cmd": "shell",
    "path": "path", "file": "path", "file_path": "path", "filename": "path",
    "dir": "path", "directory": "path",
    "url": "url", "uri": "url",
}


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str) -> re.Pattern[str]:
    # Only `*` is special; DOTALL so that it also spans a newline in a text argument.
    return re.compile(".*".join(re.escape(p) for p in pattern.split("*")), re.DOTALL)


@frozen
class Rule:
    """One parsed rule: ``tool`` or ``tool(pattern)``. ``text`` is as written."""

    text: str
    tool: str
    pattern: str | None = None
    _name_re: re.Pattern[str] = field(init=False, eq=False, repr=False)
    _pattern_re: re.Pattern[str] | None = field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_name_re", _glob(self.tool))
        object.__setattr__(self, "_pattern_re",
                           None if self.pattern is None else _glob(self.pattern))

    def names(self, tool_name: str) -> bool:
        """Whether the rule's name (a glob) is ``tool_name``."""
        return self._name_re.fullmatch(tool_name) is not None

    def matches_text(self, value: str) -> bool:
        """Whether the pattern matches ``value`` whole (a bare rule matches anything)."""
        return self._pattern_re is None or self._pattern_re.fullmatch(value) is not None

    def __str__(self) -> str:
        return self.text


def parse_rule(text: Any) -> Rule:
    """Parse ``tool`` or ``tool(pattern)``.

    :raises ValueError: naming the rule and what is wrong with it.
    :raises TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"a rule is a string like \"terminal(git status*)\", got "
                        f"{type(text).__name__}")
    stripped = text.strip()
    if "(" in stripped:
        name, _, rest = stripped.partition("(")
        if not rest.endswith(")"):
            raise ValueError(f"bad rule {text!r}: a pattern ends with ')': "
                             f"write {name.strip() or 'tool'}(pattern)")
        pattern: str | None = rest[:-1]
        if not pattern:
            raise ValueError(f"bad rule {text!r}: empty pattern; write {name!r} alone for "
                             "every call of the tool")
    else:
        name, pattern = stripped, None
        if ")" in name:
            raise ValueError(f"bad rule {text!r}: ')' without '('")
    if not name:
        raise ValueError(f"bad rule {text!r}: no tool name")
    if not _NAME.fullmatch(name):
        raise ValueError(f"bad rule {text!r}: {name!r} is not a tool name (letters, digits, "
                         "'_', '-', '.', and '*' as a wildcard)")
    return Rule(stripped, name, pattern)


# ------------------------------------------------------------ the primary argument


@frozen
class Primary:
    """The argument a rule's pattern matches: its name and kind (``None`` name: none)."""

    name: str | None
    kind: PrimaryKind = "text"


def _kind_for(name: str) -> PrimaryKind:
    return _KIND_BY_NAME.get(name.lower(), "text")


def primary_of(tool: Tool | None, args: Mapping[str, Any] | None = None) -> Primary:
    """The primary argument of ``tool``: declared, else its first required string
    parameter (see the module docs).

    Without a tool (a call no registry knows), or for a tool with no required string
    parameter, the first argument of ``args`` named like a command, path or URL, so
    that a deny rule still applies.
    """
    if tool is None:
        return _named_like_a_primary(args)
    name: str | None = tool.primary_arg
    if name is None:
        params = tool.parameters
        properties = params.get("properties")
        required = params.get("required")
        if isinstance(properties, Mapping) and isinstance(required, list | tuple):
            for candidate in required:
                spec = properties.get(candidate)
                if isinstance(spec, Mapping) and spec.get("type") == "string":
                    name = candidate
                    break
    if name is None:
        # No required string parameter (many MCP servers mark nothing required): a
        # deny rule must still meet `command`, `path` or `url`, as for an unknown tool.
        return _named_like_a_primary(args)
    return Primary(name, tool.primary_kind or _kind_for(name))


def _named_like_a_primary(args: Mapping[str, Any] | None) -> Primary:
    """The first string argument named like a command, path or URL (else none)."""
    for key, value in (args or {}).items():
        if isinstance(value, str) and key.lower() in _KIND_BY_NAME:
            return Primary(key, _kind_for(key))
    return Primary(None)


# --------------------------------------------------------------------- subjects


@frozen
class _Subject:
    """What the patterns of one call are matched against.

    ``parts`` are the texts an allow rule must cover; ``deny`` every reading a deny
    or ask rule is tried on (:func:`lich.approvals.shell.could_match`: a ``None``
    part of a shape is not known before the call runs); ``None`` parts: no pattern
    can allow the call (no argument, a shell line that is not plain, no host).
    """

    parts: tuple[str, ...] | None
    deny: tuple[Shape, ...] = ()
    absolute: str | None = None
    problem: str | None = None


def _real_root(work_dir: str) -> str:
    return os.path.realpath(work_dir)


def _resolve_path(value: str, work_dir: str) -> tuple[str | None, str | None]:
    """``(relative, absolute)``: the resolved path, relative to the work dir when it is
    inside (``None`` when it is not); ``(None, None)`` for a path no file system takes
    (a NUL byte), which no pattern matches."""
    root = _real_root(work_dir)
    try:
        absolute = os.path.realpath(os.path.join(root, value))
    except (OSError, ValueError):
        return None, None
    try:
        inside = os.path.commonpath((root, absolute)) == root
    except ValueError:
        inside = False
    if not inside:
        return None, absolute
    rel = os.path.relpath(absolute, root)
    return rel.replace(os.sep, "/"), absolute


def _normal_url(value: str) -> str | None:
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if not parts.scheme or not host:
        return None
    netloc = host if port is None else f"{host}:{port}"
    if ":" in host:  # IPv6
        netloc = f"[{host}]" if port is None else f"[{host}]:{port}"
    url = f"{parts.scheme.lower()}://{netloc}{parts.path or '/'}"
    if parts.query:
        url += f"?{parts.query}"
    if parts.fragment:
        url += f"#{parts.fragment}"
    return url


def _subject(primary: Primary, args: Mapping[str, Any], work_dir: str) -> _Subject:
    value = args.get(primary.name) if primary.name is not None else None
    if not isinstance(value, str):
        return _Subject(None, problem="no primary argument")
    if primary.kind == "shell":
        line = read_line(value)
        shapes = tuple(dict.fromkeys(line.deny_shapes()))
        if not line.plain:
            return _Subject(None, shapes, problem=f"not a plain command line: {line.problem}")
        return _Subject(tuple(c.text for c in line.commands), shapes)
    if primary.kind == "path":
        rel, absolute = _resolve_path(value, work_dir)
        if absolute is None:
            return _Subject(None, problem="not a path")
        parts = () if rel is None else (rel,)
        return _Subject(parts, absolute=absolute)
    if primary.kind == "url":
        url = _normal_url(value)
        if url is None:
            return _Subject(None, ((value,),), problem="not a URL with a host")
        return _Subject((url,), ((url,), (value,)))
    return _Subject((value,), ((value,),))


def _absolute_pattern(rule: Rule) -> str | None:
    pattern = rule.pattern or ""
    if pattern.startswith("~"):
        pattern = os.path.expanduser(pattern)
    return pattern if os.path.isabs(pattern) else None


def _path_match(rule: Rule, subject: _Subject) -> bool:
    absolute = _absolute_pattern(rule)
    if absolute is not None:
        return subject.absolute is not None and _glob(absolute).fullmatch(
            subject.absolute) is not None
    pattern = rule.pattern or ""
    while pattern.startswith("./"):
        pattern = pattern[2:]
    return any(_glob(pattern).fullmatch(t) for t in subject.parts or ())


def _matches_any_part(rule: Rule, primary: Primary, subject: _Subject) -> bool:
    """Deny and ask rules: the rule meets the call if any reading of any part matches."""
    if rule.pattern is None:
        return True
    if primary.kind == "path":
        return _path_match(rule, subject)
    return any(could_match(rule.pattern, shape) for shape in subject.deny)


def _covered(rules: Sequence[Rule], primary: Primary, subject: _Subject) -> Rule | None:
    """Allow rules: the first rule that covers the call whole, or (shell) one of the
    rules that together cover every part; ``None`` when they do not."""
    bare = next((r for r in rules if r.pattern is None), None)
    if bare is not None:
        return bare
    if subject.parts is None or not rules:
        return None
    if primary.kind == "path":
        if subject.absolute is None:
            return None
        return next((r for r in rules if _path_match(r, subject)), None)
    if not subject.parts:
        return None
    first: Rule | None = None
    for text in subject.parts:
        rule = next((r for r in rules if r.matches_text(text)), None)
        if rule is None:
            return None
        first = first or rule
    return first


# --------------------------------------------------------------------- deciding


# How many tool names a RuleSet remembers its rules for: the names of the tools an agent
# has, and a few a model made up; past that, the rules are filtered on each call.
_NAMES_CACHED = 256


@frozen
class RuleSet:
    """The ``[approvals]`` rules, parsed."""

    allow: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()
    # tool name -> (deny, ask, allow) rules naming it: every call of a tool is judged
    # with the same rules, so the glob matching of the names is done once per name.
    _by_name: dict[str, tuple[tuple[Rule, ...], tuple[Rule, ...], tuple[Rule, ...]]] = field(
        init=False, factory=dict, eq=False, repr=False)

    @classmethod
    def parse(cls, allow: Iterable[str] = (), ask: Iterable[str] = (),
              deny: Iterable[str] = ()) -> RuleSet:
        """Parse each list (:func:`parse_rule`; the first bad rule raises)."""
        return cls(tuple(map(parse_rule, allow)), tuple(map(parse_rule, ask)),
                   tuple(map(parse_rule, deny)))

    def for_tool(self, name: str) -> tuple[tuple[Rule, ...], tuple[Rule, ...], tuple[Rule, ...]]:
        """The deny, ask and allow rules whose name matches ``name``, in order."""
        found = self._by_name.get(name)
        if found is None:
            found = (tuple(_for_tool(self.deny, name)), tuple(_for_tool(self.ask, name)),
                     tuple(_for_tool(self.allow, name)))
            if len(self._by_name) < _NAMES_CACHED:
                # A plain dict store: threads judging calls at once at worst compute the
                # same entry twice.
                self._by_name[name] = found
        return found


@frozen
class Verdict:
    """What the rules say about one call: ``action`` and why (``rule`` that decided,
    else ``None`` and the mode or the tool's declaration in ``reason``)."""

    action: Action
    reason: str
    rule: Rule | None = None


def _for_tool(rules: Iterable[Rule], name: str) -> list[Rule]:
    return [r for r in rules if r.names(name)]


def denying_rule(rules: RuleSet, name: str, args: Mapping[str, Any], tool: Tool | None,
                 work_dir: str) -> Rule | None:
    """The first deny rule that meets the call, or ``None``."""
    deny = rules.for_tool(name)[0]
    if not deny:
        return None
    primary = primary_of(tool, args)
    subject = _subject(primary, args, work_dir)
    return next((r for r in deny if _matches_any_part(r, primary, subject)), None)


def decide(rules: RuleSet, mode: Mode, name: str, args: Mapping[str, Any],
           tool: Tool | None, work_dir: str) -> Verdict:
    """Judge one call: deny > ask > allow > the default.

    The default, for a call no rule meets: a read-only tool
    (:attr:`~lich.tools.Tool.read_only`) is allowed; any other follows ``mode``
    (``ask`` asks, ``allow`` allows, ``deny-unlisted`` denies) — except that a
    tool declaring ``requires_approval`` is asked about where ``mode`` would
    allow it. An explicit allow rule allows such a tool too: the declaration
    tightens the default, it does not override the person's rules.
    """
    deny, ask, allow = rules.for_tool(name)
    if not (deny or ask or allow):
        # No rule names the tool: only its declarations and the mode decide, so its
        # arguments are not read (no path resolved, no command line parsed).
        return _default(mode, name, tool, "")
    primary = primary_of(tool, args)
    subject = _subject(primary, args, work_dir)
    for rule in deny:
        if _matches_any_part(rule, primary, subject):
            return Verdict("deny", f"denied by deny rule {rule}", rule)
    for rule in ask:
        if _matches_any_part(rule, primary, subject):
            return Verdict("ask", f"{name} needs approval (rule {rule})", rule)
    covering = _covered(allow, primary, subject)
    if covering is not None:
        return Verdict("allow", f"allowed by rule {covering}", covering)
    return _default(mode, name, tool, f"; {subject.problem}" if subject.problem and allow else "")


def _default(mode: Mode, name: str, tool: Tool | None, unread: str) -> Verdict:
    """The verdict for a call no rule meets (``unread``: why the allow rules could not
    read its argument, for the reason)."""
    if tool is not None and tool.read_only:
        return Verdict("allow", f"{name} is read-only")
    if mode == "deny-unlisted":
        return Verdict("deny", f"{name} is not allowed by any rule (mode deny-unlisted{unread})")
    if mode == "allow":
        if tool is not None and tool.requires_approval:
            return Verdict("ask", f"{name} needs approval (the tool requires approval)")
        return Verdict("allow", "mode allow")
    return Verdict("ask", f"{name} needs approval (mode ask{unread})")


# ------------------------------------------------------------------ the core's API


def suggest_rules(name: str, args: Mapping[str, Any], tool: Tool | None,
                  work_dir: str) -> tuple[str, ...]:
    """The allow rules a ``session`` or ``always`` approval of this call grants, to show
    the person — each exactly the call, never a ``*`` it did not write:

    * a shell line: one rule per simple command of a plain line, the command exactly
      as written (``terminal(git status -s)``; ``cat README.md`` never becomes
      ``cat README.md*``, which would cover ``cat README.md ~/.ssh/id_rsa``, and
      ``bash -c 'ls'`` never ``bash*``);
    * a path tool: the resolved path relative to the work dir
      (``write_file(src/app.py)``; absolute outside it);
    * a URL tool: scheme and host (``http_request(https://example.com/*)``);
    * a text argument: the argument exactly; a tool without a primary argument (or
      a call that lacks it): the tool's name. Never a bare ``terminal``.

    Empty when no rule can cover exactly this call — a shell line that is not
    plain (:mod:`lich.approvals.shell`: no pattern ever allows one), an argument
    holding a ``*`` (a rule has no escape for it: it would be a wildcard), an
    empty argument, a URL without a host, a path no file system takes: the
    approval then covers this call only.
    """
    primary = primary_of(tool, args)
    value = args.get(primary.name) if primary.name is not None else None
    if not isinstance(value, str):
        return (name,)
    if not value.strip() and primary.kind != "path":
        return ()
    rules: tuple[str, ...]
    if primary.kind == "shell":
        line = read_line(value)
        if not line.plain:
            return ()
        rules = tuple(dict.fromkeys(f"{name}({c.text})" for c in line.commands))
        texts = [c.text for c in line.commands]
    elif primary.kind == "path":
        rel, absolute = _resolve_path(value, work_dir)
        if absolute is None:
            return ()
        texts = [rel if rel is not None else absolute]
        rules = (f"{name}({texts[0]})",)
    elif primary.kind == "url":
        url = _normal_url(value)
        if url is None:
            return ()
        scheme, _, rest = url.partition("://")
        host = rest.split("/", 1)[0]
        texts = [host]
        rules = (f"{name}({scheme}://{host}/*)",)
    else:
        texts = [value]
        rules = (f"{name}({value})",)
    if any("*" in t or "\n" in t for t in texts):
        return ()
    return rules


def rules_cover(rules: Sequence[str], name: str, args: Mapping[str, Any], tool: Tool | None,
                work_dir: str) -> bool:
    """Whether these allow rules cover the call (for a shell line, every simple command
    of it, as :func:`decide` reads allow rules).

    :raises ValueError: a rule does not parse.
    """
    parsed = _for_tool(map(parse_rule, rules), name)
    if not parsed:
        return False
    primary = primary_of(tool, args)
    return _covered(parsed, primary, _subject(primary, args, work_dir)) is not None
