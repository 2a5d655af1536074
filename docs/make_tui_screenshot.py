"""Regenerate ``docs/tui.svg``: a real ``lich tui`` run with a tool call, at 80×24.

The run is real — a real :class:`lich.Agent`, its tool executor, the TUI's
streaming and tool blocks — but the model is lich's scripted model
(:class:`lich.testing.ScriptedChat`), so no network or API key is needed and
the picture is reproducible. The tool is a small in-process plugin that
reads a file in a temporary work dir.

    python docs/make_tui_screenshot.py            # writes docs/tui.svg
    python docs/make_tui_screenshot.py out.svg
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from lich import ToolContext, ToolRegistry, hookimpl, tool
from lich.agent import Agent
from lich.guards import resolve_in_root
from lich.testing import Reply, ScriptedChat, make_test_config
from lich.tui.app import LichApp
from lich.types import ToolCall

NOTES = """\
# Release notes

- streaming answers in the TUI
- tool blocks with expandable output
- Esc cancels a run; /resume continues one
"""

ANSWER = """\
`notes.md` lists **3 changes** for this release:

1. streaming answers in the TUI
2. tool blocks with expandable output
3. cancel with *Esc*, continue with `/resume`
"""


@tool
def count_words(path: str, ctx: ToolContext) -> str:
    """Count the lines and words of a text file in the work dir."""
    text = resolve_in_root(ctx.work_dir, path).read_text(encoding="utf-8")
    return f"{path}: {len(text.splitlines())} lines, {len(text.split())} words"


class DemoTools:
    """The screenshot's tool plugin."""

    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(count_words)


async def make_screenshot() -> str:
    """Run two exchanges (the second with a tool call) in the TUI; the screen as SVG."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "notes.md").write_text(NOTES, encoding="utf-8")
        chat = ScriptedChat(
            [
                Reply("Hi! I can read the files in this directory — ask me about one."),
                Reply(
                    "Let me look at the notes first.",
                    (ToolCall("call_1", "count_words", {"path": "notes.md"}),),
                ),
                Reply(ANSWER),
            ],
            name="scripted",
        )
        config = make_test_config(work, stream=True)
        agent = Agent(config, plugins=[("demo_tools", DemoTools())], chat=chat)
        app = LichApp(agent, model="demo-model", provider="scripted")
        async with app.run_test(size=(80, 24)) as pilot:
            for message in ("hello", "What changed in notes.md?"):
                app.prompt.value = message
                await pilot.press("enter")
                for _ in range(1000):  # ~10 s at most
                    await pilot.pause(0.01)
                    if not app.busy:
                        break
                else:
                    raise SystemExit("the run did not finish")
            await pilot.pause(0.2)
            return app.export_screenshot(title="lich tui")


def main() -> None:
    """Write the screenshot to the path given, or next to this script."""
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("tui.svg")
    out.write_text(asyncio.run(make_screenshot()), encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
