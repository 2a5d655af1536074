"""The system test's plugin, loaded by path in the ingress and in every worker.

Self-contained (it imports only lich), so a ``lich worker`` process loads it from
``plugins = ["+…/system_plugin.py"]``. Everything it does is driven by files in
the probe directory (``[plugin_settings.systest] probe_dir``), which the test
writes and reads — the processes share nothing else with the test:

* The tool ``systest_effect`` is **not idempotent** (a payment, a sent e-mail):
  each execution appends its pid to ``effects/<call id>``, outside the
  transcript, so the test can count executions per call. A call whose id is in
  ``hold/`` waits, on its first execution, until ``release/<call id>`` exists
  (the test kills its worker meanwhile: "a worker killed in a tool").
* ``lich_before_model_call`` appends ``{"pid", "input", "session", "turn"}`` to
  ``model-calls/<pid>.jsonl``: which process is calling the model for which
  message (the test kills or stops that one).
* The session store (the postgres store, wrapped) freezes its process right
  after a ``turn_end`` record whose reply is ``reply to <tag>`` when
  ``freeze/<tag>`` exists: the event loop blocks, so the message is neither
  acknowledged nor answered, while the record itself goes to the database on the
  store's writer threads ("a worker killed after turn_end, before reply_sent").
  It marks ``frozen/<tag>`` (its pid) first, and freezes once per tag.
* The same store holds the first read of a session after ``hold-read/<session
  id>`` appears: it reads, marks ``read-held/<session id>`` (its pid), and returns
  what it read only once ``release/<session id>`` exists ("a consumer stalled
  between reading a transcript and writing to it").

A held call or a frozen process waits at most :data:`HOLD_S`, so a test that
fails before killing it cannot leave it hanging.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lich import hookimpl, tool
from lich.tools import Tool, ToolContext

__all__ = ["NAME", "TOOL", "lich_before_model_call", "lich_make_session_store",
           "lich_register_tools"]

NAME = "systest"
TOOL = "systest_effect"
#: The longest a held tool call or a frozen process waits for its release.
HOLD_S = 60.0

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe_name(text: str) -> str:
    """``text`` as a file name (the test and the plugin name probe files the same way)."""
    return _SAFE.sub("-", text)


def _probe_dir(config: Any) -> Path | None:
    settings = config.plugin_settings.get(NAME, {}) if config is not None else {}
    value = settings.get("probe_dir")
    return Path(value) if value else None


def _wait_for_file(path: Path) -> None:
    # Blocking on purpose: the held thread (or the frozen event loop) is the fault point.
    deadline = time.monotonic() + HOLD_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _append_line(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(text + "\n")


def make_effect_tool(probe: Path) -> Tool:
    """The non-idempotent tool, recording its executions under ``probe``."""

    def systest_effect(key: str, ctx: ToolContext) -> str:
        """Do something that must not happen twice for one call (the test counts them).

        :param key: what to do it for.
        """
        name = safe_name(ctx.call_id or key)
        record = probe / "effects" / name
        first = not record.exists()
        _append_line(record, str(os.getpid()))
        if first and (probe / "hold" / name).exists():
            _wait_for_file(probe / "release" / name)
        return f"effect {key} done"

    # Declared, not left to the default (``read_only``): this is what the test is about.
    return tool(name=TOOL, idempotent=False)(systest_effect)


@hookimpl
def lich_register_tools(registry: Any, config: Any) -> None:
    """Register ``systest_effect`` when the probe directory is configured."""
    probe = _probe_dir(config)
    if probe is not None:
        registry.register(make_effect_tool(probe))


@hookimpl
def lich_before_model_call(run: Any, turn: int, usage: Any, cost_usd: Any) -> None:
    """Note which process calls the model for which message."""
    probe = _probe_dir(run.config)
    if probe is not None:
        pid = os.getpid()
        _append_line(probe / "model-calls" / f"{pid}.jsonl",
                     json.dumps({"pid": pid, "input": run.input, "session": run.session_id,
                                 "turn": turn}))


class _FreezingWriter:
    """A session writer that freezes its process after a marked ``turn_end``."""

    def __init__(self, inner: Any, probe: Path) -> None:
        self._inner = inner
        self._probe = probe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def location(self) -> str:
        return str(self._inner.location)

    def append(self, kind: str, **fields: Any) -> None:
        self._inner.append(kind, **fields)
        if kind == "meta" and fields.get("event") == "turn_end":
            self._maybe_freeze(fields)

    def _maybe_freeze(self, fields: dict[str, Any]) -> None:
        reply = fields.get("reply")
        text = reply.get("text") if isinstance(reply, dict) else None
        if not isinstance(text, str) or not text.startswith("reply to "):
            return
        tag = safe_name(text.removeprefix("reply to "))
        if not (self._probe / "freeze" / tag).exists():
            return
        frozen = self._probe / "frozen" / tag
        frozen.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(frozen, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # frozen once already (this is a later delivery)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))
        _wait_for_file(self._probe / "release" / tag)

    def message(self, message: Any) -> None:
        self._inner.message(message)

    def compact(self, messages: Iterable[Any]) -> None:
        self._inner.compact(messages)

    def flush(self) -> None:
        self._inner.flush()

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()


class _FreezingStore:
    """The postgres store, whose writers are :class:`_FreezingWriter`."""

    def __init__(self, inner: Any, probe: Path) -> None:
        self._inner = inner
        self._probe = probe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open(self, session_id: str | None = None) -> _FreezingWriter:
        return _FreezingWriter(self._inner.open(session_id), self._probe)

    def new_id(self) -> str:
        return str(self._inner.new_id())

    def describe(self) -> str:
        return str(self._inner.describe())

    def location(self, session_id: str) -> str:
        return str(self._inner.location(session_id))

    def exists(self, session_id: str) -> bool:
        return bool(self._inner.exists(session_id))

    def ids(self) -> builtins.list[str]:
        return list(self._inner.ids())

    def list(self) -> Any:
        return self._inner.list()

    def resolve(self, ref: str) -> str:
        return str(self._inner.resolve(ref))

    def read(self, ref: str) -> Any:
        contents = self._inner.read(ref)
        self._maybe_hold_after_read(ref)
        return contents

    def _maybe_hold_after_read(self, ref: str) -> None:
        # What was read is returned only after the release: a reader that is stopped
        # meanwhile acts, when it continues, on the transcript as it was before.
        name = safe_name(ref)
        if not (self._probe / "hold-read" / name).exists():
            return
        held = self._probe / "read-held" / name
        held.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(held, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return  # held once already
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(str(os.getpid()))
        _wait_for_file(self._probe / "release" / name)

    def history(self, ref: str) -> Any:
        return self._inner.history(ref)

    def remove(self, session_id: str) -> object:
        return self._inner.remove(session_id)

    def prepare(self) -> None:
        self._inner.prepare()

    def close(self) -> None:
        self._inner.close()


@hookimpl(tryfirst=True)
def lich_make_session_store(config: Any) -> Any:
    """The postgres store, wrapped (see the module docstring); ``None`` otherwise."""
    probe = _probe_dir(config)
    if probe is None or config.table("session_store").get("kind") != "postgres":
        return None
    from lich.postgres.plugin import make_store

    return _FreezingStore(make_store(config), probe)
