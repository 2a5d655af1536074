"""The notices a run's events produce: compression, retries, failovers, budget, errors, the end."""

from __future__ import annotations

from lich.events import (
    ApprovalRequested,
    ApprovalResolved,
    CompressEnd,
    CompressSkipped,
    Failover,
    InstructionsCut,
    PromptBlocked,
    Retry,
    RunContinued,
    RunEnd,
)
from lich.tui.format.blocks import NoticeBlock
from lich.tui.format.text import format_usage, preview

__all__ = [
    "ERROR_PREVIEW_CHARS",
    "approval_requested_notice",
    "approval_resolved_notice",
    "budget_notice",
    "compress_notice",
    "error_notice",
    "failover_notice",
    "hook_notice",
    "retry_notice",
    "run_end_notice",
]

ERROR_PREVIEW_CHARS = 300


def compress_notice(event: CompressEnd) -> NoticeBlock:
    """What a finished compression looks like."""
    if event.ok and event.summary_chars:
        return NoticeBlock(
            f"· context compressed (summary {format_usage(event.summary_chars)} chars, "
            f"~{format_usage(event.estimated_tokens)} tokens now)"
        )
    return NoticeBlock("· context compression did not help; continuing", "warn")


def hook_notice(
    event: InstructionsCut | PromptBlocked | CompressSkipped | RunContinued,
) -> NoticeBlock:
    """What a plugin's say in the run looks like: a cut instruction (never silent), a
    refused message, a vetoed compression, a run continued after its answer."""
    if isinstance(event, InstructionsCut):
        return NoticeBlock(f"· instructions cut: {event.source} (~{event.tokens} tokens, "
                           f"over the {event.budget_tokens}-token budget)", "warn")
    if isinstance(event, PromptBlocked):
        return NoticeBlock(f"· message refused by {event.blocked_by}: "
                           f"{preview(event.reason, ERROR_PREVIEW_CHARS)}", "error")
    if isinstance(event, CompressSkipped):
        return NoticeBlock(f"· compression skipped by {event.skipped_by}: {event.reason}",
                           "warn")
    return NoticeBlock(f"· {event.continued_by} asks for more: "
                       f"{preview(event.prompt, ERROR_PREVIEW_CHARS)}")


def retry_notice(event: Retry) -> NoticeBlock:
    """A provider is retried in place."""
    why = f": {preview(event.message, ERROR_PREVIEW_CHARS)}" if event.message else ""
    return NoticeBlock(
        f"· retrying {event.provider} in {event.delay_s:.1f}s "
        f"(attempt {event.attempt}, {event.kind}{why})",
        "warn",
    )


def failover_notice(event: Failover) -> NoticeBlock:
    """The router moved to the next provider."""
    why = f": {preview(event.message, ERROR_PREVIEW_CHARS)}" if event.message else ""
    return NoticeBlock(
        f"· {event.from_provider} failed ({event.kind}{why}); failing over to {event.to_provider}",
        "warn",
    )


def budget_notice(reason: str | None = None) -> NoticeBlock:
    """The run used all its turns, or (``reason``) a budget plugin stopped it."""
    if reason:
        return NoticeBlock(f"· budget exhausted: {reason}", "warn")
    return NoticeBlock("· budget exhausted (turn cap reached)", "warn")


def error_notice(message: str) -> NoticeBlock:
    """An error, cut to a readable length."""
    return NoticeBlock(f"· error: {preview(message, ERROR_PREVIEW_CHARS)}", "error")


def run_end_notice(event: RunEnd, budget_reason: str | None = None) -> NoticeBlock | None:
    """The notice closing a run that did not simply answer (``None`` for ``final``);
    ``budget_reason`` says which budget stopped it, when it was not the turn cap."""
    if event.stopped_reason == "aborted":
        return NoticeBlock(
            "· cancelled — the run was stopped; the conversation is kept up to this point", "warn"
        )
    if event.stopped_reason == "budget":
        return budget_notice(budget_reason)
    if event.stopped_reason == "error":
        return error_notice(event.error or "run failed")
    return None


def approval_requested_notice(event: ApprovalRequested) -> NoticeBlock:
    """A tool call waits for a person (``⏸ terminal waits for approval``)."""
    return NoticeBlock(f"⏸ {event.call.name} waits for approval", "warn")


def approval_resolved_notice(event: ApprovalResolved) -> NoticeBlock:
    """How the request ended: ``✓ approved by tui (session)``, ``✗ denied by tui:
    approval_denied: …``, or ``✗ not approved: approval_timeout: …`` when no one
    answered."""
    if event.approved:
        if event.approver == "session":
            return NoticeBlock("✓ allowed by an earlier session approval")
        detail = event.scope + (", edited arguments" if event.args is not None else "")
        return NoticeBlock(f"✓ approved by {event.approver} ({detail})")
    why = preview(event.message or "denied", ERROR_PREVIEW_CHARS)
    if event.approver is None:
        return NoticeBlock(f"✗ not approved: {why}", "warn")
    return NoticeBlock(f"✗ denied by {event.approver}: {why}", "warn")
