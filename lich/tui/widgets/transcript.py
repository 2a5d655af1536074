"""The scrolling transcript: what was said, the streamed answer, tool blocks and notices.

It keeps the newest :data:`TRANSCRIPT_CAP` widgets (the session file keeps
everything). The answer being streamed and the tool calls still running are
tracked here, so the app only says what happened and the transcript decides
which widget shows it.
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from lich.tui.format.blocks import (
    AssistantBlock,
    Block,
    NoticeBlock,
    NoticeLevel,
    ToolBlock,
    UserBlock,
)
from lich.tui.widgets.text import plain
from lich.tui.widgets.tool_view import ToolView
from lich.types import ToolCall, ToolResult
from lich.visible import visible

__all__ = ["TRANSCRIPT_CAP", "Transcript"]

TRANSCRIPT_CAP = 300
"""Widgets kept in the transcript; older ones are dropped (the session file keeps all)."""


class Transcript(VerticalScroll):
    """The transcript; it stays scrolled to the end while new blocks arrive.

    :param cap: how many widgets to keep; the oldest go first.
    """

    def __init__(self, *, cap: int = TRANSCRIPT_CAP, id: str | None = None) -> None:
        super().__init__(id=id)
        self.cap = cap
        self._answer: Markdown | None = None
        self._stream: MarkdownStream | None = None
        self._streamed = ""
        self._tool_views: dict[str, ToolView] = {}

    def on_mount(self) -> None:
        """Follow the end of the transcript."""
        self.anchor()

    def text(self) -> str:
        """The transcript as plain text (tests, debugging)."""
        lines: list[str] = []
        for child in self.children:
            if isinstance(child, Markdown):
                lines.append(child.source)
            elif isinstance(child, ToolView):
                lines.append(child.summary)
            elif isinstance(child, Static):
                lines.append(str(child.render()))
        return "\n".join(lines)

    # ---------------------------------------------------------------- blocks

    async def add(self, widget: Widget) -> None:
        """Append ``widget``, dropping the oldest ones beyond the cap."""
        await self.mount(widget)
        extra = len(self.children) - self.cap
        if extra > 0:
            await self.remove_children(list(self.children[:extra]))

    async def add_before_tool(self, call_id: str, block: Block) -> None:
        """Put ``block`` just above the block of the running tool call ``call_id`` (an
        approval of that call: it happened before the result the tool block will show),
        or append it when that call has no block open."""
        view = self._tool_views.get(call_id)
        if view is None or not view.is_attached:
            await self.add_block(block)
            return
        await self.add_block(block, before=view)

    async def add_block(self, block: Block, *, before: Widget | None = None) -> None:
        """Append one block (or put it just before ``before``)."""
        if before is not None and isinstance(block, NoticeBlock):
            await self.mount(Static(plain(block.text), classes=f"notice {block.level}",
                                    markup=False), before=before)
            return
        if isinstance(block, UserBlock):
            text = Text("you › ", style="bold")
            text.append(visible(block.text))
            await self.add(Static(text, classes="user", markup=False))
        elif isinstance(block, AssistantBlock):
            await self.add(Markdown(visible(block.text), classes="assistant"))
        elif isinstance(block, ToolBlock):
            await self.add(ToolView(block.call, block.result))
        else:
            await self.add(
                Static(plain(block.text), classes=f"notice {block.level}", markup=False)
            )

    async def notice(self, text: str, level: NoticeLevel = "info") -> None:
        """Append a notice line."""
        await self.add_block(NoticeBlock(text, level))

    async def clear(self) -> None:
        """Remove every block (the conversation itself is kept)."""
        await self.end_answer(None)
        self._tool_views.clear()
        await self.remove_children()

    # ------------------------------------------------------- streamed answer

    async def stream_text(self, text: str) -> None:
        """Append ``text`` to the answer being streamed (starting one if needed)."""
        if not text:
            return
        if self._answer is None:
            self._answer = Markdown(classes="assistant")
            await self.add(self._answer)
            self._stream = Markdown.get_stream(self._answer)
        self._streamed += text
        assert self._stream is not None
        await self._stream.write(text)

    async def discard_answer(self) -> None:
        """Drop the answer being streamed (the provider started over)."""
        answer = self._answer
        await self.end_answer(None)
        if answer is not None:
            await answer.remove()

    async def end_answer(self, final_text: str | None) -> None:
        """Close the streamed answer; ``final_text`` is the answer as the model returned it
        (shown whole when nothing was streamed, e.g. a non-streaming provider)."""
        stream, answer, streamed = self._stream, self._answer, self._streamed
        self._stream, self._answer, self._streamed = None, None, ""
        if stream is not None:
            await stream.stop()
        if final_text is None or not final_text.strip():
            return
        if answer is None:
            await self.add(Markdown(final_text, classes="assistant"))
        elif streamed != final_text:
            await answer.update(final_text)

    # ------------------------------------------------------------ tool calls

    async def start_tool(self, call: ToolCall) -> None:
        """A tool call began: show it as running."""
        view = ToolView(call)
        self._tool_views[call.id] = view
        await self.add(view)

    def tool_output(self, call_id: str, text: str) -> None:
        """The running call ``call_id`` reported ``text``: show it in its block."""
        view = self._tool_views.get(call_id)
        if view is not None and view.is_attached:
            view.add_output(text)

    async def finish_tool(self, call: ToolCall, result: ToolResult) -> None:
        """A tool call ended: complete its block, or add one when it is gone (capped away)."""
        view = self._tool_views.pop(call.id, None)
        if view is None or not view.is_attached:
            await self.add(ToolView(call, result))
        else:
            view.finish(call, result)

    def forget_tools(self) -> None:
        """The run ended: no tool block waits for a result any more."""
        self._tool_views.clear()

    def toggle_last_tool(self) -> None:
        """Show or hide the newest tool block's full output."""
        views = list(self.query(ToolView))
        if views:
            views[-1].toggle()
