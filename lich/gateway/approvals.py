"""Approvals in chat: a tool call that needs a person's yes is asked about in the chat
it came from, and answered there with ``/approve <id>`` or ``/deny <id>``.

The bus binds each run to its conversation and to the sender of the message that
started it (:meth:`ChatApprovals.conversation`); the approver
(:meth:`ChatApprovals.lich_request_approval`, an in-process plugin on the
agent's host) sends the request to that chat and waits. An ``/approve`` or
``/deny`` message is answered by :meth:`ChatApprovals.answer` *before* the
conversation's queue — the run it would wait behind is the one waiting for it.
Only the same sender in the same conversation resolves a request; anyone else
is told that there is no such request for them, which says nothing about other
people's. ``always`` is not offered: a chat user does not write the operator's
config. The core denies at ``approval_timeout_s``; a stopping gateway denies
every pending request, and the model is told why.

**Grants are the person's.** ``/approve ID session`` grants the request's rules
(exactly what the question showed) to its sender — the platform and sender id
— for as long as this gateway process runs, in every chat of theirs; not to the
conversation: in a group, another member's later calls are asked about again.
The core is answered ``once`` (so it grants nothing to the conversation's
session), and a later call of the same person that the grant covers is
approved here without a question.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from attrs import define

from lich.approvals.grants import ApprovalGrants
from lich.approvals.present import MAX_PREVIEW_CHARS, describe
from lich.gateway.formatting import log_event
from lich.guards import truncate_text
from lich.hooks import Approval, ApprovalRequest, RunInfo, hookimpl

if TYPE_CHECKING:
    from lich.gateway.bus import InboundMessage

__all__ = ["APPROVAL_COMMAND", "ChatApprovals", "Notify"]

log = logging.getLogger("lich.gateway")

Notify = Callable[[str], Awaitable[object]]
"""Sends one message to the conversation's chat (the platform's own send)."""

APPROVAL_COMMAND = re.compile(
    r"^/(approve|deny)(?:@[A-Za-z0-9_]+)?(?:\s+([0-9A-Fa-f]+))?(?:\s+(.*))?$", re.S | re.I)

# What a chat message may show of a diff: long enough to judge an edit, short enough
# for a chat (Telegram splits long messages, Twitch flattens them to one line).
_CHAT_PREVIEW_CHARS = min(MAX_PREVIEW_CHARS, 2_000)


@define
class _Binding:
    platform: str
    chat_id: str
    user_id: str
    notify: Notify | None

    @property
    def person(self) -> str:
        """Whose grants apply: the platform and the sender's id (``\x00`` cannot be in
        either as a platform gives them, so two people never share a key)."""
        return f"{self.platform}\x00{self.user_id}"


@define
class _Pending:
    request: ApprovalRequest
    binding: _Binding
    answer: asyncio.Future[Approval]


class ChatApprovals:
    """The gateway's approver and its pending requests."""

    def __init__(self) -> None:
        self._bindings: dict[str, _Binding] = {}  # session id -> the run's conversation
        self._pending: dict[str, _Pending] = {}  # request id -> its request
        # What `/approve ID session` granted, by person (not by conversation).
        self.grants = ApprovalGrants()
        self._closed_reason: str | None = None
        self._tasks: set[asyncio.Task[object]] = set()

    @property
    def pending_ids(self) -> list[str]:
        """The ids of the requests waiting for an answer."""
        return list(self._pending)

    @contextmanager
    def conversation(self, session_id: str, message: InboundMessage,
                     notify: Notify | None) -> Iterator[None]:
        """While a run of ``session_id`` handles ``message``: its requests go to that
        chat through ``notify``, and only ``message``'s sender may answer them; the
        sender's own grants cover its calls. Without ``notify`` (a client that cannot
        be sent anything but the final reply) a call their grants do not cover has no
        one to ask, and the core denies as for a run without a terminal."""
        self._bindings[session_id] = _Binding(message.platform, message.chat_id,
                                              message.user_id, notify)
        try:
            yield
        finally:
            self._bindings.pop(session_id, None)

    # ------------------------------------------------------------ the approver

    @hookimpl
    async def lich_request_approval(self, run: RunInfo,
                                    request: ApprovalRequest) -> Approval | None:
        """Approve a call the sender's grants cover; else ask the chat the run came
        from; ``None`` for a run no chat is bound to (or that cannot be asked)."""
        binding = self._bindings.get(run.session_id)
        if binding is None:
            return None
        if self.grants.covers(binding.person, request.call, request.tool, run.work_dir):
            log_event(log, logging.INFO, "approval_granted_before", platform=binding.platform,
                      chat=binding.chat_id, user=binding.user_id, id=request.id,
                      tool=request.call.name)
            return Approval(True, scope="once",
                            approver=f"{binding.platform}:{binding.user_id} (session grant)")
        if binding.notify is None:
            return None
        notify = binding.notify
        if self._closed_reason is not None:
            return Approval(False, message=self._closed_reason, approver="gateway")
        answer: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
        self._pending[request.id] = _Pending(request, binding, answer)
        log_event(log, logging.INFO, "approval_requested", platform=binding.platform,
                  chat=binding.chat_id, user=binding.user_id, id=request.id,
                  tool=request.call.name)
        try:
            await notify(self.request_text(request))
            return await answer
        except asyncio.CancelledError:
            # The core stopped waiting (approval_timeout_s, or the run was cancelled): say
            # so in the chat, without holding up the cancellation to send it.
            self._later(notify(
                f"Approval {request.id} is no longer pending: {request.call.name} was not run."))
            raise
        finally:
            self._pending.pop(request.id, None)

    @staticmethod
    def request_text(request: ApprovalRequest) -> str:
        """The chat message asking about ``request``."""
        # A chat has no `always` (it would write the operator's config): not offered.
        lines = describe(request, preview=False, always=False)
        if request.preview:
            lines.append("preview:")
            lines += truncate_text(request.preview, _CHAT_PREVIEW_CHARS).splitlines()
        lines.append(f"Approve with /approve {request.id} (or /approve {request.id} session: "
                     "also what the line above allows, for you only, in any chat, until the "
                     f"gateway restarts), or /deny {request.id} [reason].")
        return "\n".join(lines)

    # ------------------------------------------------------------- the answers

    def holds(self, request_id: str) -> bool:
        """Whether the request ``request_id`` (of an ``/approve`` or ``/deny``) waits here;
        who may answer it is :meth:`answer`'s to check."""
        return request_id.lower() in self._pending

    def answer(self, message: InboundMessage) -> str | None:
        """The reply to an ``/approve`` or ``/deny`` message, after resolving the request
        it names; ``None`` when ``message`` is not one."""
        match = APPROVAL_COMMAND.match(message.text.strip())
        if match is None:
            return None
        verb, request_id, rest = match.group(1).lower(), match.group(2), (match.group(3) or "")
        rest = rest.strip()
        if request_id is None:
            return f"usage: /{verb} <id>" + (" [session]" if verb == "approve" else " [reason]")
        request_id = request_id.lower()
        pending = self._pending.get(request_id)
        binding = pending.binding if pending is not None else None
        if (pending is None or pending.answer.done() or binding is None
                or (binding.platform, binding.chat_id, binding.user_id)
                != (message.platform, message.chat_id, message.user_id)):
            # The same words whether the id is unknown or someone else's: nothing about
            # another person's request leaks, and it stays theirs to answer.
            log_event(log, logging.INFO, "approval_ignored", platform=message.platform,
                      chat=message.chat_id, user=message.user_id, id=request_id)
            return f"There is no pending approval {request_id} for you."
        approver = f"{message.platform}:{message.user_id}"
        what = f"{pending.request.call.name} ({request_id})"
        if verb == "deny":
            pending.answer.set_result(Approval(False, message=rest or None, approver=approver))
            outcome, reply = "denied", f"Denied: {what}."
        else:
            scope = rest.lower() or "once"
            if scope == "always":
                return ("always is not available in a chat (it would change the gateway's "
                        f"config); use /approve {request_id} session.")
            if scope not in ("once", "session"):
                return f"usage: /approve {request_id} [session]"
            outcome, reply = "approved", f"Approved: {what}."
            if scope == "session" and pending.request.rules:
                # The person's grant, not the conversation's: the core is told "once".
                self.grants.grant(binding.person, pending.request.rules)
                outcome = "approved for the person"
                reply = (f"Approved: {what}; from now on, for you only (in any chat, until "
                         f"the gateway restarts), also: {', '.join(pending.request.rules)}.")
            elif scope == "session":
                reply = f"Approved: {what}, this call only (no rule can cover exactly it)."
            pending.answer.set_result(Approval(True, scope="once", approver=approver))
        log_event(log, logging.INFO, "approval_answered", platform=message.platform,
                  chat=message.chat_id, user=message.user_id, id=request_id, outcome=outcome)
        return reply

    def deny_all(self, reason: str) -> None:
        """Deny every pending request (the gateway is stopping) and every later one:
        the model is told ``reason``."""
        self._closed_reason = reason
        for pending in list(self._pending.values()):
            if not pending.answer.done():
                pending.answer.set_result(Approval(False, message=reason, approver="gateway"))

    def _later(self, awaitable: Awaitable[object]) -> None:
        async def send() -> None:
            try:
                await awaitable
            except Exception as exc:  # a chat that cannot be reached: logged, not raised
                log_event(log, logging.WARNING, "approval_notice_failed",
                          error=type(exc).__name__)

        task: asyncio.Task[object] = asyncio.ensure_future(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
