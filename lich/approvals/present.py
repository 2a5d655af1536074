"""How an approval request is shown to a person — one wording for every front end
(``lich chat``, a one-shot run on a terminal, the TUI, a gateway chat).

Plain text only: each front end styles it its own way (rich markup, a Textual
modal, a chat message). Nothing here reads files or asks anything.
"""

from __future__ import annotations

import json
from typing import Any

from lich.guards import truncate_text
from lich.hooks import ApprovalRequest
from lich.visible import visible

__all__ = [
    "CHOICES",
    "CHOICE_WORDS",
    "MAX_ARGS_CHARS",
    "MAX_PREVIEW_CHARS",
    "args_text",
    "choice_prompt",
    "describe",
    "describe_sections",
    "grant_text",
    "headline",
]

#: The answers a person can give, by key, as every interactive front end offers them.
CHOICES: tuple[tuple[str, str], ...] = (
    ("y", "yes, this call"),
    ("n", "no"),
    ("s", "yes, and for the rest of the session"),
    ("a", "always: add an allow rule to a config file"),
    ("e", "edit the arguments, then run"),
)

#: The one word each answer is offered as (``[s]ession``), by the keys of :data:`CHOICES`.
CHOICE_WORDS: tuple[tuple[str, str], ...] = (
    ("y", "yes"),
    ("n", "no"),
    ("s", "session"),
    ("a", "always"),
    ("e", "edit"),
)

MAX_ARGS_CHARS = 4_000
MAX_PREVIEW_CHARS = 8_000


def headline(request: ApprovalRequest) -> str:
    """One line: which tool wants to run, and why it asks (``terminal needs approval``)."""
    return f"{request.call.name} wants to run — {request.reason}"


def args_text(args: Any, limit: int = MAX_ARGS_CHARS) -> str:
    """The arguments as indented JSON, capped at ``limit`` characters (a huge
    ``write_file`` content must not flood a terminal or a chat)."""
    try:
        text = json.dumps(args, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(args)
    return truncate_text(text, limit)


#: The unindented lines of :func:`describe` after the headline, and the part each
#: begins (indented lines belong to the part above them).
_SECTION_STARTS: tuple[tuple[str, str], ...] = (
    ("arguments:", "arguments"),
    ("preview:", "preview"),
    ("a session or always answer allows", "rules"),
    ("denied if there is no answer within ", "timeout"),
)


def describe_sections(
    request: ApprovalRequest, *, preview: bool = True
) -> list[tuple[str, list[str]]]:
    """:func:`describe`'s lines grouped by what they show, as ``(kind, lines)`` pairs,
    for a front end that styles each part its own way (the TUI colours the preview
    as a diff). ``kind`` is ``headline``, ``arguments``, ``preview``, ``rules`` or
    ``timeout``; a part with nothing to show is left out.

    Made from :func:`describe`'s own lines, so the wording (and anything done to
    make them safe to show) is the same in every front end.
    """
    lines = describe(request, preview=preview)
    sections: list[tuple[str, list[str]]] = [("headline", lines[:1])]
    for line in lines[1:]:
        kind = next((k for start, k in _SECTION_STARTS
                     if not line.startswith(" ") and line.startswith(start)), None)
        if kind is None:
            sections[-1][1].append(line)  # an indented line of the part above
        else:
            sections.append((kind, [line]))
    return sections


def grant_text(rules: tuple[str, ...] | list[str], *, always: bool = True) -> str:
    """What a ``session``/``always`` answer would grant, said exactly: the rules, and
    what a ``*`` in them stands for; or that it covers only this call. ``always=False``
    where only ``session`` is offered (a gateway's chat)."""
    answers = "a session or always answer" if always else "a session answer"
    if not rules:
        return f"{answers} allows only this call (no rule can cover exactly it)"
    text = f"{answers} allows exactly: " + ", ".join(rules)
    if any("*" in rule for rule in rules):
        text += " (each * stands for any text)"
    return text


def describe(request: ApprovalRequest, *, preview: bool = True,
             always: bool = True) -> list[str]:
    """The request as lines of text: the headline, the arguments, the preview (a diff
    for a file write) and what a ``session``/``always`` answer would allow (a
    ``session`` answer only, with ``always=False``)."""
    lines = [headline(request), "arguments:"]
    lines += [f"  {line}" for line in args_text(dict(request.call.args)).splitlines()]
    if preview and request.preview:
        lines.append("preview:")
        lines += [f"  {line}" for line in
                  truncate_text(request.preview, MAX_PREVIEW_CHARS).splitlines()]
    lines.append(grant_text(request.rules, always=always))
    if request.timeout_s is not None:
        lines.append(f"denied if there is no answer within {request.timeout_s:g}s")
    return [visible(line) for line in lines]


def choice_prompt() -> str:
    """``[y]es / [n]o / [s]ession / [a]lways / [e]dit``: the answers on one line."""
    return " / ".join(f"[{key}]{word[len(key):]}" for key, word in CHOICE_WORDS)
