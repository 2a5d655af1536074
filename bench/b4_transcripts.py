"""B4 — transcripts: what the JSONL session files cost to write, list and read back.

* **append** — R records through :class:`lich.sessions.SessionWriter`, the way a
  run writes them (each serialised, written and flushed on its own): a repeating
  mix of user messages, assistant tool calls, ``tool_call_end`` events,
  200-character tool results and final answers;
* **list** — :meth:`JsonlSessionStore.list` over S session files (a few records each,
  titled by their first user message);
* **resume** — :meth:`JsonlSessionStore.history` of one conversation of H messages
  (what ``Agent.run(session_id=…)`` reads to resume).
"""

from __future__ import annotations

import gc
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import fmt_ms, markdown_table, summary

__all__ = ["run", "tables"]


def _messages(count: int) -> list[Any]:
    from lich.types import AssistantMessage, ToolCall, ToolMessage, UserMessage

    out: list[Any] = []
    i = 0
    while len(out) < count:
        out.append(UserMessage(f"question {i}: what is in file_{i}.txt?"))
        call = ToolCall(f"call_{i}", "read_file", {"path": f"file_{i}.txt"})
        out.append(AssistantMessage("Let me look.", (call,)))
        out.append(ToolMessage(f"call_{i}", "read_file", ("lorem ipsum dolor sit amet " * 8)[:200]))
        out.append(AssistantMessage(f"file_{i}.txt holds some lorem ipsum."))
        i += 1
    return out[:count]


def _append(directory: Path, records: int) -> tuple[float, int]:
    """Write ``records`` records; returns (seconds, records written)."""
    from lich.events import ToolCallEnd
    from lich.serialization import event_to_dict
    from lich.sessions import JsonlSessionStore
    from lich.types import AssistantMessage, ToolResult

    writer = JsonlSessionStore(directory).open()
    messages = _messages(records)
    written = 0
    started = time.perf_counter()
    for message in messages:
        if written == records:
            break
        writer.message(message)
        written += 1
        if written < records and isinstance(message, AssistantMessage) and message.tool_calls:
            # What the agent's event recorder adds after a tool call.
            writer.append("event", seq=1, event=event_to_dict(
                ToolCallEnd(1, message.tool_calls[0], ToolResult(True, "x"), duration_ms=0.1)))
            written += 1
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed, written


def _write_session(store: Any, session_id: str, messages: list[Any]) -> None:
    writer = store.open(session_id)
    writer.append("meta", event="run_start", run_id="bench", input="question 0")
    for message in messages:
        writer.message(message)
    writer.append("meta", event="run_end", run_id="bench", stopped_reason="final")
    writer.close()


def run(records: int = 10_000, sessions: int = 1_000, resume_messages: int = 10_000,
        reps: int = 5) -> dict[str, Any]:
    """Run B4 and return its results (JSON-able)."""
    from lich.sessions import JsonlSessionStore, repair_dangling_tool_calls

    out: dict[str, Any] = {"params": {"records": records, "sessions": sessions,
                                      "resume_messages": resume_messages, "reps": reps},
                           "checks": []}
    append_s: list[float] = []
    list_s: list[float] = []
    resume_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lich-bench-b4-") as tmp:
        root = Path(tmp)
        listing = JsonlSessionStore(root / "many")
        few = _messages(4)
        for i in range(sessions):
            _write_session(listing, f"s{i:05d}", few)
        resumed = JsonlSessionStore(root / "long")
        long = _messages(resume_messages)
        _write_session(resumed, "long", long)
        # A conversation cut mid-turn is resumed with its dangling tool call closed.
        expected = len(repair_dangling_tool_calls(long))
        for rep in range(reps):
            gc.collect()
            elapsed, written = _append(root / f"append{rep}", records)
            append_s.append(elapsed)
            if written != records:
                out["checks"].append(f"append: wrote {written} records, expected {records}")
            started = time.perf_counter()
            found = listing.list()
            list_s.append(time.perf_counter() - started)
            started = time.perf_counter()
            history = resumed.history("long")
            resume_s.append(time.perf_counter() - started)
        if len(found) != sessions or not all(s.title.startswith("question 0") for s in found):
            out["checks"].append(f"list: {len(found)} sessions, titles {found[0].title!r}…")
        if len(history) != expected:
            out["checks"].append(f"resume: {len(history)} messages, expected {expected}")
    out["append_s"] = summary(append_s)
    out["append_us_per_record"] = summary([s / records * 1e6 for s in append_s])
    out["list_s"] = summary(list_s)
    out["list_us_per_session"] = summary([s / sessions * 1e6 for s in list_s])
    out["resume_s"] = summary(resume_s)
    out["resume_us_per_message"] = summary([s / resume_messages * 1e6 for s in resume_s])
    out["targets"] = []  # the issue sets no target for B4: it reports the costs
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    p = result["params"]
    head = ["operation", "size", "ms per operation", "µs per record"]
    body = [
        ["append (write + flush each)", f"{p['records']} records",
         fmt_ms(result["append_s"]["median"], 1),
         f"{result['append_us_per_record']['median']:.1f}"],
        ["list sessions", f"{p['sessions']} sessions", fmt_ms(result["list_s"]["median"], 1),
         f"{result['list_us_per_session']['median']:.1f}"],
        ["resume (read + parse + repair)", f"{p['resume_messages']} messages",
         fmt_ms(result["resume_s"]["median"], 1),
         f"{result['resume_us_per_message']['median']:.1f}"],
    ]
    title = f"B4 transcripts — medians of {p['reps']} runs"
    return [(title, markdown_table(head, body))]
