"""Testing kit for plugin authors (a pytest plugin, loaded through ``pytest11``).

What it gives you:

* :class:`ScriptedChat` — an in-process chat function answering from a script;
* :class:`ScriptedServer` — the same script served over HTTP on 127.0.0.1
  (OpenAI chat-completions dialect, streaming or not), for end-to-end runs
  through a real provider;
* :class:`HookRecorder` — a plugin that records every run-time hook call;
* fixtures ``lich_scripted_server``, ``lich_agent_factory`` and
  ``lich_hook_recorder``.

See ``docs/testing.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lich.testing.scripted import (
    DIALECTS,
    Fail,
    Reply,
    ScriptedChat,
    ScriptedModel,
    ScriptedServer,
    ScriptRequest,
    Step,
    demo_responder,
    tool_loop_responder,
)
from lich.hooks import hookimpl

__all__ = [
    "DIALECTS",
    "Fail",
    "HookRecorder",
    "Reply",
    "ScriptRequest",
    "ScriptedChat",
    "ScriptedModel",
    "ScriptedServer",
    "Step",
    "demo_responder",
    "lich_agent_factory",
    "lich_hook_recorder",
    "lich_scripted_server",
    "make_test_config",
    "tool_loop_responder",
]


class HookRecorder:
    """A plugin that records run-time hook calls as ``(hook_name, kwargs)`` in :attr:`calls`.

    Register it as an in-process plugin: ``Agent(config, plugins=[("recorder", rec)])``.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def names(self) -> list[str]:
        """The hook names in call order."""
        return [name for name, _ in self.calls]

    def events(self) -> list[str]:
        """The types of the events seen by ``lich_event``."""
        return [kw["event"].type for name, kw in self.calls if name == "lich_event"]

    @hookimpl
    def lich_run_start(self, run: Any) -> None:
        self.calls.append(("lich_run_start", {"run": run}))

    @hookimpl
    def lich_before_tool_call(self, call: Any, run: Any) -> None:
        self.calls.append(("lich_before_tool_call", {"call": call, "run": run}))

    @hookimpl
    def lich_after_tool_call(self, call: Any, result: Any, run: Any) -> None:
        self.calls.append(("lich_after_tool_call", {"call": call, "result": result, "run": run}))

    @hookimpl
    def lich_run_end(self, run: Any, outcome: Any) -> None:
        self.calls.append(("lich_run_end", {"run": run, "outcome": outcome}))

    @hookimpl
    def lich_event(self, event: Any) -> None:
        self.calls.append(("lich_event", {"event": event}))


def make_test_config(work_dir: Path, **overrides: Any) -> Any:
    """A :class:`lich.config.LichConfig` rooted in ``work_dir`` (sessions under ``.lich``).

    ``plugins`` defaults to none: name the ones the test needs.
    """
    from lich.config import LichConfig

    values: dict[str, Any] = {"work_dir": str(work_dir), "plugins": (), "stream": False}
    values.update(overrides)
    return LichConfig(**values)


@pytest.fixture
def lich_scripted_server() -> Iterator[Callable[..., ScriptedServer]]:
    """Factory: ``lich_scripted_server(steps, responder=None, dialects=("openai",))``
    returns a started :class:`ScriptedServer`; every server is stopped after the test."""
    servers: list[ScriptedServer] = []

    def start(
        steps: Sequence[Step | str] = (),
        responder: Callable[[ScriptRequest], Step] | None = None,
        dialects: Sequence[str] = ("openai",),
    ) -> ScriptedServer:
        server = ScriptedServer(ScriptedModel(steps, responder), dialects=dialects).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def lich_agent_factory(tmp_path: Path) -> Callable[..., Any]:
    """Factory: ``lich_agent_factory(script, plugins=(), objects=(), **config)`` returns
    an :class:`lich.Agent` in ``tmp_path`` answering from ``script`` (a list of
    steps, a :class:`ScriptedChat`, or any chat function), with the named
    plugin entries loaded and the ``(name, object)`` plugins registered."""
    from lich.agent import Agent

    def build(
        script: Any = (),
        *,
        plugins: Sequence[str] = (),
        objects: Sequence[tuple[str, object]] = (),
        **config: Any,
    ) -> Agent:
        chat = script if callable(script) else ScriptedChat(script)
        cfg = make_test_config(tmp_path, plugins=tuple(plugins), **config)
        return Agent(cfg, plugins=objects, chat=chat)

    return build


@pytest.fixture
def lich_hook_recorder() -> HookRecorder:
    """A fresh :class:`HookRecorder`."""
    return HookRecorder()
