"""Write the hook reference of docs/plugins.md from the hook specifications' docstrings.

The docstrings are the reference (DESIGN.md); this renders them, so the page cannot
say something else. Run it after changing a hook specification::

    python docs/make_hook_reference.py          # rewrite the section in docs/plugins.md
    python docs/make_hook_reference.py --check  # exit 1 if the section is stale

``tests/test_meta.py`` runs the check. The specifications are those of
:mod:`lich.hookspecs` and of every plugin package of lich that adds its own (a
``hookspecs`` module of a package under ``lich/``, as the gateway's).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

DOCS = Path(__file__).resolve().parent / "plugins.md"
BEGIN = ("<!-- The hook reference below is generated from the hook specifications' "
         "docstrings by docs/make_hook_reference.py: edit those, then run it. -->")
END = "<!-- End of the generated hook reference. -->"

_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj|ref):`~?([^`]+)`")
_FIELD = re.compile(r"^:(param|return|returns|raises?)(?:\s+([^:]+))?:\s*(.*)$")
_REGISTRATION = re.compile(r"^lich_(register_|make_|add_|check_config)")


def spec_modules() -> list[ModuleType]:
    """:mod:`lich.hookspecs`, then each ``lich.<package>.hookspecs`` in name order."""
    import lich

    found = [importlib.import_module("lich.hookspecs")]
    for info in sorted(pkgutil.iter_modules(lich.__path__), key=lambda i: i.name):
        if info.ispkg and (Path(lich.__path__[0]) / info.name / "hookspecs.py").is_file():
            found.append(importlib.import_module(f"lich.{info.name}.hookspecs"))
    return found


def specs(module: ModuleType) -> Iterator[tuple[str, Callable[..., Any]]]:
    """The ``lich_*`` specifications a module defines, in source order."""
    members = [(name, fn) for name, fn in vars(module).items()
               if name.startswith("lich_") and inspect.isfunction(fn)
               and hasattr(fn, "lich_spec") and fn.__module__ == module.__name__]
    yield from sorted(members, key=lambda item: item[1].__code__.co_firstlineno)


def spec_signature(name: str, fn: Callable[..., Any]) -> str:
    """``lich_x(a: A, b: B) -> R`` with the annotations as written."""
    sig = inspect.signature(fn)

    def shown(annotation: Any) -> str:
        return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)

    params = ", ".join(
        f"{p.name}: {shown(p.annotation)}" if p.annotation is not p.empty else p.name
        for p in sig.parameters.values()
    )
    returns = "" if sig.return_annotation is sig.empty else f" -> {shown(sig.return_annotation)}"
    return f"{name}({params}){returns}"


def _inline(text: str) -> str:
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def docstring_markdown(doc: str) -> str:
    """A reST-flavoured docstring as Markdown: roles and double backquotes become code,
    ``:param x:`` / ``:return:`` / ``:raises E:`` fields a list, ``::`` blocks fenced."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        field = _FIELD.match(line)
        if field:
            kind, arg, rest = field.groups()
            parts = [rest]
            i += 1
            while i < len(lines) and lines[i].startswith(" ") and lines[i].strip():
                parts.append(lines[i].strip())
                i += 1
            label = {"param": f"`{arg}`", "return": "Returns", "returns": "Returns"}.get(
                kind, f"Raises `{arg}`" if arg else "Raises")
            out.append(f"- **{label}:** {_inline(' '.join(p for p in parts if p))}")
            continue
        if line.rstrip().endswith("::"):
            lead = line.rstrip()[:-2].rstrip()
            if lead:
                out.append(_inline(lead + ":"))
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            indent = min((len(b) - len(b.lstrip()) for b in block if b.strip()), default=0)
            out += ["", "```python", *(b[indent:] for b in block), "```", ""]
            continue
        out.append(_inline(line))
        i += 1
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


_ACTIONS = {"stop": "ends the chain: it is the answer",
            "collect": "is kept, and the next implementation is asked",
            "chain": "replaces what the next implementation is given"}
_FAILURES = {"report": "is logged and the plugin skipped (fail open)",
             "block": "blocks, with a reason naming the plugin (fail closed)",
             "unload": "fails the plugin (phase `{phase}`), which is unloaded whole",
             "raise": "is a configuration error: nothing starts",
             "ignore": "is ignored"}
_TIME = {"hook": "`hook_timeout_s` for each implementation",
         "given": "one deadline for all implementations together (`approval_timeout_s`)",
         "none": "none"}
_SYNC = {"run": "called inline; an `async def` is run to its end",
         "schedule": "called inline, as it happens; an `async def` is scheduled on the loop",
         "refuse": "called inline: it must be a fast plain `def` (an `async def` fails)"}


def policy_lines(row: Any) -> list[str]:
    """How the host calls a hook, from its row of the policy table
    (:mod:`lich.plugins.policy`): the table is what the caller obeys."""
    answers = [f"`{kind.__name__}` {_ACTIONS[action]}" for kind, action in row.answers.items()]
    lines = [
        "**How it is called** (its row in `lich.plugins.policy`):",
        "",
        "- **Answers:** " + ("; ".join(answers) + "; `None` asks the next implementation"
                              if answers else "none: every implementation is called") + ".",
        "- **An exception or a timeout** " + _FAILURES[row.on_error].format(phase=row.phase)
        + ".",
    ]
    if answers:
        lines.append("- **Another answer** " + _FAILURES[row.on_bad_answer].format(
            phase=row.phase) + ".")
    lines.append("- **Time limit:** " + _TIME[row.timeout] + ".")
    if row.sync:
        lines.append("- **Runs:** " + _SYNC[row.awaitable] + ".")
    else:
        lines.append("- **Runs:** an `async def` on the event loop, a plain `def` in a "
                     "worker thread (or inline, marked `runs_inline`).")
    return lines


def _rows() -> dict[str, Any]:
    from lich.plugins.policy import policy_table

    rows = dict(policy_table())
    for module in spec_modules()[1:]:
        for row in getattr(module, "HOOK_POLICIES", ()):
            rows[row.name] = row
    return rows


def _entry(name: str, fn: Callable[..., Any], rows: dict[str, Any]) -> str:
    body = docstring_markdown(fn.__doc__ or "(undocumented)")
    parts = [f"#### `{name}`", "", "```", spec_signature(name, fn), "```", "", body]
    if name in rows:
        parts += [*policy_lines(rows[name]), ""]
    return "\n".join(parts)


def reference() -> str:
    """The generated part of the hook reference, markers included."""
    rows = _rows()
    registration: list[str] = []
    run_time: list[str] = []
    owned: list[str] = []
    for module in spec_modules():
        owner = module.__name__.removesuffix(".hookspecs")
        entries = list(specs(module))
        if owner != "lich":
            if entries:
                package = owner.removeprefix("lich.")
                owned.append(f"### Hooks of the `{package}` plugin\n\n"
                             f"Added by `{module.__name__}` when the plugin is loaded.\n")
                owned += [_entry(name, fn, rows) for name, fn in entries]
            continue
        for name, fn in entries:
            (registration if _REGISTRATION.match(name) else run_time).append(
                _entry(name, fn, rows))
    sections = ["### Registration hooks\n", *registration, "### Run-time hooks\n", *run_time,
                *owned]
    return BEGIN + "\n\n" + "\n".join(sections).rstrip() + "\n\n" + END


def rendered(page: str) -> str:
    """``page`` with its generated section replaced by :func:`reference`."""
    start, end = page.index(BEGIN), page.index(END) + len(END)
    return page[:start] + reference() + page[end:]


def main(argv: list[str]) -> int:
    page = DOCS.read_text(encoding="utf-8")
    fresh = rendered(page)
    if "--check" in argv:
        if fresh != page:
            print("docs/plugins.md: the hook reference is stale; run "
                  "python docs/make_hook_reference.py", file=sys.stderr)
            return 1
        return 0
    if fresh != page:
        DOCS.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
