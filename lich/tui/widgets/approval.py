"""The approval dialog: one tool call waiting for a person's yes or no.

A :class:`ApprovalScreen` is a modal pushed by the TUI's approver
(:mod:`lich.tui.approval`) for one :class:`~lich.hooks.ApprovalRequest`. It
shows the request in the wording every front end shares
(:func:`lich.approvals.present.describe_sections`), the preview coloured as a
diff, and takes the answers of :data:`lich.approvals.present.CHOICES` from the
keyboard alone:

- ``y`` approves this call, ``s`` this call and the request's rules for the
  rest of the session, ``Esc`` denies;
- ``n`` asks for an optional message for the model, then denies (``Enter``);
- ``a`` shows the rules and the config files they can be written to; ``Enter``
  on one approves with scope ``always`` and names that file (the approver
  writes it);
- ``e`` opens the arguments as JSON; ``Ctrl+S`` or ``Enter`` runs the call with
  the edited ones (invalid JSON is shown in place and the dialog stays);
- ``Ctrl+C`` denies the call and cancels the run.

In a sub-view (message, always, edit) ``Esc`` goes back to the choices. The
answer is delivered through a future the approver awaits; when the approver
stops waiting (the approval timed out, the run was cancelled) it closes the
dialog itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeAlias

from attrs import frozen
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from lich.approvals.present import CHOICES, args_text, describe_sections
from lich.hooks import Approval, ApprovalRequest
from lich.tui.widgets.text import plain
from lich.visible import visible

__all__ = [
    "APPROVER",
    "ApprovalAnswer",
    "ApprovalScreen",
    "ArgsEditor",
    "Mode",
    "diff_text",
    "parse_edited_args",
]

APPROVER = "tui"
"""Who the TUI's answers name as approver (``approval_resolved``'s ``approver``)."""

Mode: TypeAlias = Literal["ask", "deny", "always", "edit"]

_CHOICE = dict(CHOICES)


@frozen
class ApprovalAnswer:
    """What the person chose: the approval, and for ``always`` the config file the
    rules go to, as ``(label, path)`` (the approver writes it)."""

    approval: Approval
    write_to: tuple[str, Path] | None = None


def diff_text(lines: Sequence[str]) -> Text:
    """Preview lines coloured as a unified diff: additions green, removals red,
    hunk headers cyan, file headers bold. Lines that are not diff lines (a tool's
    plain-text preview) stay plain."""
    text = Text(no_wrap=False)
    in_hunk = False  # inside a hunk, "---x" is the removal of "--x", not a file header
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        body = line[2:] if line.startswith("  ") else line
        if body.startswith("@@"):
            in_hunk = True
        if not in_hunk and body.startswith(("+++", "---")):
            style = "bold"
        elif body.startswith("+"):
            style = "green"
        elif body.startswith("-"):
            style = "red"
        elif body.startswith("@@"):
            style = "cyan"
        else:
            style = ""
        text.append(visible(line), style=style)
    return text


def parse_edited_args(text: str) -> dict[str, Any]:
    """The edited arguments: ``text`` read as a JSON object.

    :raises ValueError: not JSON, or JSON that is not an object; the message says
        where (``line 2, column 5: Expecting ',' delimiter``) or what was found.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"the arguments must be a JSON object ({{...}}), not "
                         f"{type(value).__name__}")
    return value


class ArgsEditor(TextArea):
    """The arguments as editable JSON. ``Ctrl+S`` and ``Enter`` confirm (JSON needs
    no line breaks: a newline inside a string is written ``\\n``)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # Priority: TextArea inserts a newline for Enter before any ordinary binding runs.
        Binding("ctrl+s", "screen.confirm_edit", "run with these arguments", priority=True),
        Binding("enter", "screen.confirm_edit", "run with these arguments", priority=True),
    ]


class ApprovalScreen(ModalScreen[None]):
    """The dialog for one approval request.

    :param request: what is asked.
    :param answer: resolved with the person's :class:`ApprovalAnswer`; the screen
        dismisses itself when it is.
    :param targets: where an ``always`` answer can write its rules, as
        ``(label, path)``; empty when there is nowhere (``a`` then says so).
    """

    DEFAULT_CSS = """
    ApprovalScreen { align: center middle; }
    ApprovalScreen > #dialog {
        width: 90%; height: 85%; padding: 0 1;
        border: thick $warning; background: $surface;
    }
    ApprovalScreen #details { height: 1fr; }
    ApprovalScreen #details:focus { background-tint: $foreground 3%; }
    ApprovalScreen .headline { text-style: bold; }
    ApprovalScreen .view { height: 1fr; display: none; }
    ApprovalScreen .view.shown { display: block; }
    ApprovalScreen .hint { color: $text-muted; height: auto; }
    ApprovalScreen .problem { color: $error; height: auto; }
    ApprovalScreen #edit-args { height: 1fr; }
    ApprovalScreen #targets { height: auto; max-height: 8; }
    ApprovalScreen #legend { height: auto; color: $text-muted; padding: 1 0 0 0; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "choose('y')", _CHOICE["y"]),
        Binding("n", "choose('n')", _CHOICE["n"]),
        Binding("s", "choose('s')", _CHOICE["s"]),
        Binding("a", "choose('a')", _CHOICE["a"]),
        Binding("e", "choose('e')", _CHOICE["e"]),
        Binding("escape", "back", "no (in a sub-view: back to the choices)"),
        # Priority: a focused input would take Ctrl+C for copying.
        Binding("ctrl+c", "cancel_run", "deny and cancel the run", priority=True),
    ]

    def __init__(
        self,
        request: ApprovalRequest,
        answer: asyncio.Future[ApprovalAnswer],
        targets: Sequence[tuple[str, Path]] = (),
    ) -> None:
        super().__init__()
        self.request = request
        self.answer = answer
        self.targets = list(targets)
        self.mode: Mode = "ask"

    # ----------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        request = self.request
        with Vertical(id="dialog") as dialog:
            dialog.border_title = f"approval {request.id}"
            with VerticalScroll(id="details", classes="view shown"):
                for kind, lines in describe_sections(request):
                    if kind == "preview":
                        yield Static(diff_text(lines), id="preview", markup=False)
                    else:
                        yield Static(plain("\n".join(lines)), id=kind, markup=False,
                                     classes="headline" if kind == "headline" else "")
            with Vertical(id="deny", classes="view"):
                yield Static(plain("Deny: a message for the model (optional). Enter denies, "
                                   "Esc goes back."), classes="hint", markup=False)
                yield Input(placeholder="why not / what to do instead", id="deny-message")
            with Vertical(id="always", classes="view"):
                yield Static(plain(self._always_text()), id="always-rules", markup=False)
                # Plain text: a path may hold "[...]", which a str prompt reads as markup.
                yield OptionList(*(Option(plain(f"{label}: {path}"), id=str(i))
                                   for i, (label, path) in enumerate(self.targets)),
                                 id="targets")
                yield Static(plain("Up/Down choose the file, Enter writes the rules there and "
                                   "approves, Esc goes back."), classes="hint", markup=False)
            with Vertical(id="edit", classes="view"):
                yield Static(plain("Edit the arguments (JSON). Ctrl+S or Enter runs the call "
                                   "with them, Esc goes back."), classes="hint", markup=False)
                yield ArgsEditor(args_text(dict(request.call.args), limit=10**9),
                                 id="edit-args", soft_wrap=True)
                yield Static("", id="edit-error", classes="problem", markup=False)
            yield Static(plain(self.legend()), id="legend", markup=False)

    def on_mount(self) -> None:
        """Keyboard focus on the details, so the arrow keys scroll them."""
        self.query_one("#details").focus()

    def on_screen_resume(self) -> None:
        """Uncovered after lich stopped waiting (the approver could not pop it): close."""
        if self.answer.cancelled() and self.app.screen is self:
            self.dismiss()

    def legend(self) -> str:
        """The keys of the choices view, as offered for this request."""
        keys = [f"[{key}] {text}" for key, text in CHOICES if self._offered(key)]
        return "  ".join([*keys, "[Esc] no", "[Ctrl+C] deny and cancel the run"])

    def _offered(self, key: str) -> bool:
        # Without rules a session/always answer would grant nothing beyond this call.
        return key not in ("s", "a") or bool(self.request.rules)

    def _always_text(self) -> str:
        rules = "\n".join(f"  {rule}" for rule in self.request.rules)
        if not self.targets:
            return f"Always allow:\n{rules}\nThere is no config file to write them to."
        return f"Always allow — these rules are added to [approvals] allow:\n{rules}"

    def show(self, mode: Mode) -> None:
        """Switch to ``mode``'s view and focus what it is typed into."""
        self.mode = mode
        views = {"ask": "#details", "deny": "#deny", "always": "#always", "edit": "#edit"}
        for name, selector in views.items():
            self.query_one(selector).set_class(name == mode, "shown")
        # The sub-views say their own keys; the choices' legend would only mislead there.
        self.query_one("#legend").display = mode == "ask"
        focus = {"ask": "#details", "deny": "#deny-message", "always": "#targets",
                 "edit": "#edit-args"}[mode]
        self.query_one(focus).focus()

    # ---------------------------------------------------------------- answers

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The choice keys act in the choices view only (elsewhere they are typed)."""
        if action == "choose":
            return self.mode == "ask" and self._offered(str(parameters[0]))
        return True

    def action_choose(self, key: str) -> None:
        """One of the choice keys."""
        if key == "y":
            self.settle(Approval(True, approver=APPROVER))
        elif key == "s":
            self.settle(Approval(True, scope="session", approver=APPROVER))
        elif key == "n":
            self.show("deny")
        elif key == "a":
            self.show("always")
        elif key == "e":
            self.show("edit")

    def action_back(self) -> None:
        """Esc: deny from the choices, go back to them from a sub-view."""
        if self.mode == "ask":
            self.settle(Approval(False, approver=APPROVER))
        else:
            self.show("ask")

    def action_cancel_run(self) -> None:
        """Ctrl+C: cancel the run; the approver then stops waiting and closes this dialog."""
        cancel = getattr(self.app, "action_cancel_run", None)
        if callable(cancel):
            cancel()

    @on(Input.Submitted, "#deny-message")
    def _deny(self, event: Input.Submitted) -> None:
        event.stop()
        message = event.value.strip() or None
        self.settle(Approval(False, message=message, approver=APPROVER))

    @on(OptionList.OptionSelected, "#targets")
    def _always(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        target = self.targets[int(event.option_id or 0)]
        self.settle(Approval(True, scope="always", approver=APPROVER), write_to=target)

    def action_confirm_edit(self) -> None:
        """Ctrl+S / Enter in the editor: approve with the edited arguments, if they parse."""
        editor = self.query_one("#edit-args", ArgsEditor)
        error = self.query_one("#edit-error", Static)
        try:
            args = parse_edited_args(editor.text)
        except ValueError as exc:
            error.update(plain(str(exc)))
            return
        error.update("")
        self.settle(Approval(True, args=args, approver=APPROVER))

    @property
    def settled(self) -> bool:
        """Whether an answer was given (or the approver stopped waiting)."""
        return self.answer.done()

    def settle(self, approval: Approval, *, write_to: tuple[str, Path] | None = None) -> None:
        """Deliver the answer and close the dialog (once; later keys do nothing)."""
        if self.answer.done():
            return
        self.answer.set_result(ApprovalAnswer(approval, write_to))
        self.dismiss()
