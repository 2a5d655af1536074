"""The TUI on the postgres session store: a conversation, then ``/resume latest`` in a
new app, continued in the same session (Pilot at 80×24, the scripted model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tui_support import make_agent, send, wait_for

from lich.tui.app import LichApp
from lich.types import UserMessage

SIZE = (80, 24)
DSN_VAR = "LICH_TEST_POSTGRES_DSN"


async def test_resume_latest_from_postgres(tmp_path: Path, lich_postgres_dsn: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DSN_VAR, lich_postgres_dsn)
    store_config = {"plugins": ("postgres",),
                    "session_store": {"kind": "postgres", "dsn_env": DSN_VAR}}
    agent, _ = make_agent(tmp_path, ["I will remember PLUM."], **store_config)
    first = LichApp(agent)
    async with first.run_test(size=SIZE) as pilot:
        await send(pilot, "remember the word plum")
        await wait_for(pilot, lambda: not first.busy, "first run")
        first_session = first.session_id
    await agent.aclose()

    agent2, scripted2 = make_agent(tmp_path, ["The word was PLUM."], **store_config)
    app = LichApp(agent2)
    async with app.run_test(size=SIZE) as pilot:
        await send(pilot, "/resume latest")
        await wait_for(pilot, lambda: app.session_id == first_session, "resume")
        assert "I will remember PLUM." in app.transcript_text()
        await send(pilot, "what was the word?")
        await wait_for(pilot, lambda: not app.busy, "continued run")
    sent = scripted2.requests[0].messages
    assert UserMessage("remember the word plum") in sent
    stored = agent2.sessions.history(first_session)
    assert [m.content for m in stored if isinstance(m, UserMessage)] == [
        "remember the word plum", "what was the word?"]
    assert not list((tmp_path / ".lich" / "sessions").glob("*.jsonl"))
    await agent2.aclose()
