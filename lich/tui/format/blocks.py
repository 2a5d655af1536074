"""Transcript blocks: what the transcript shows, as data, and the blocks of a resumed history."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

from attrs import frozen

from lich.tui.format.tools import parse_tool_message_content
from lich.types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    UserMessage,
)

__all__ = [
    "HISTORY_BLOCK_CAP",
    "AssistantBlock",
    "Block",
    "NoticeBlock",
    "NoticeLevel",
    "ToolBlock",
    "UserBlock",
    "history_blocks",
]

HISTORY_BLOCK_CAP = 50


@frozen
class UserBlock:
    """Something the user said."""

    text: str


@frozen
class AssistantBlock:
    """The assistant's text, rendered as markdown."""

    text: str


@frozen
class ToolBlock:
    """One tool call and, once it finished, its result."""

    call: ToolCall
    result: ToolResult | None = None


NoticeLevel: TypeAlias = Literal["info", "warn", "error"]


@frozen
class NoticeBlock:
    """A one-line notice (compression, retry, failover, budget, errors, commands)."""

    text: str
    level: NoticeLevel = "info"


Block: TypeAlias = UserBlock | AssistantBlock | ToolBlock | NoticeBlock


def history_blocks(messages: Iterable[Message], cap: int = HISTORY_BLOCK_CAP) -> list[Block]:
    """The blocks that show ``messages``: the newest ``cap`` of them, system messages left out.

    Each tool call is paired with its result message; a result whose call is
    not in the history (cut by compression) still gets a block.
    """
    blocks: list[Block] = []
    open_calls: dict[str, int] = {}
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        if isinstance(message, UserMessage):
            blocks.append(UserBlock(message.content))
        elif isinstance(message, AssistantMessage):
            if message.content.strip():
                blocks.append(AssistantBlock(message.content))
            for call in message.tool_calls:
                open_calls[call.id] = len(blocks)
                blocks.append(ToolBlock(call))
        elif isinstance(message, ToolMessage):
            result = parse_tool_message_content(message.content, message.is_error)
            index = open_calls.pop(message.tool_call_id, None)
            if index is None:
                blocks.append(ToolBlock(ToolCall(message.tool_call_id, message.name), result))
            else:
                pending = blocks[index]
                assert isinstance(pending, ToolBlock)
                blocks[index] = ToolBlock(pending.call, result)
    if cap <= 0:
        return []
    return blocks[-cap:]
