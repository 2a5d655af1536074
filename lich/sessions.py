"""Append-only JSONL transcripts: one file per conversation under ``session_dir``.

Every line is one record ``{"v": 2, "ts": …, "kind": …}``:

* ``message`` — ``{"message": {...}}``, one per message as it is produced;
* ``compact`` — ``{"messages": [...]}``, the history as compression left it;
* ``event`` — ``{"event": {...}}``, events worth keeping (tool call provenance,
  retries and failovers, compression, errors);
* ``meta`` — ``{"event": "run_start" | "run_end", ...}`` with the input,
  usage, cost (``cost_usd``, ``null`` when unknown) and stopped reason.

Version 2 (this one) added the cache and reasoning token counts to every
usage and ``cost_usd`` to ``run_end`` and to the recorded events; version 1
files are read as they are (the missing counts are 0, the cost unknown).

Each record is written and flushed on its own, so a killed process leaves
every finished record readable. The reader tolerates a torn last line and
reports — without hiding or stopping at — a corrupt line in the middle.
"""

from __future__ import annotations

import builtins
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from attrs import field, frozen

from lich import serialization
from lich._private import open_private_append
from lich.dotlich import make_dirs
from lich.types import AssistantMessage, Message, ToolMessage, ToolResult

__all__ = [
    "RECORD_VERSION",
    "SessionAmbiguous",
    "SessionContents",
    "SessionInfo",
    "SessionNotFound",
    "SessionStore",
    "SessionWriter",
    "repair_dangling_tool_calls",
    "run_cost",
    "sanitize",
    "session_cost",
]

RECORD_VERSION = 2
#: Record versions this reader understands: version 1 lacks only fields that have defaults.
READABLE_VERSIONS = frozenset({1, 2})
_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SURROGATE = re.compile("[\ud800-\udfff]")


class SessionNotFound(LookupError):
    """No session with that id (or no sessions at all, for ``latest``)."""


class SessionAmbiguous(SessionNotFound):
    """An id prefix that more than one session starts with; ``candidates`` are their ids.

    A subclass of :class:`SessionNotFound`, so every caller that reports an unknown
    session reports this one too, with the candidates in the message.
    """

    def __init__(self, message: str, candidates: tuple[str, ...]) -> None:
        super().__init__(message)
        self.candidates = candidates


def sanitize(value: Any) -> Any:
    """Replace NUL characters and lone surrogates in every string of ``value``."""
    if isinstance(value, str):
        if "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # U+FFFD like the NUL above (the codec's "replace" would write a plain "?").
            value = _SURROGATE.sub("\ufffd", value)
        return value
    if isinstance(value, dict):
        return {sanitize(k): sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [sanitize(v) for v in value]
    return value


def _encode(record: Mapping[str, Any]) -> bytes:
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    try:
        data = line.encode("utf-8")
    except UnicodeEncodeError:
        return _encode(sanitize(record))
    if "\\u0000" in line:
        return _encode_clean(record)
    return data + b"\n"


def _encode_clean(record: Mapping[str, Any]) -> bytes:
    line = json.dumps(sanitize(record), ensure_ascii=False, separators=(",", ":"))
    return line.encode("utf-8") + b"\n"


class SessionWriter:
    """Appends records to one session file; each record is flushed as it is written."""

    def __init__(self, session_id: str, path: Path) -> None:
        self.session_id = session_id
        self.path = path
        self._file: IO[bytes] | None = None

    def _open(self) -> IO[bytes]:
        if self._file is None:
            # A transcript is what was said and done: private to its user (0700 / 0600);
            # a new .lich/ gets its .gitignore.
            make_dirs(self.path.parent)
            self._file = open_private_append(self.path)
            self._heal_torn_tail()
        return self._file

    def _heal_torn_tail(self) -> None:
        # A previous crash may have left a line without its newline; start ours on a fresh line
        # so that the torn record stays the only casualty.
        assert self._file is not None
        if self._file.tell() == 0:
            return
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                self._file.write(b"\n")

    def append(self, kind: str, **fields: Any) -> None:
        """Write one record of ``kind`` with ``fields``."""
        record = {"v": RECORD_VERSION, "ts": time.time(), "kind": kind, **fields}
        f = self._open()
        f.write(_encode(record))
        f.flush()

    def message(self, message: Message) -> None:
        """Record one message."""
        self.append("message", message=serialization.message_to_dict(message))

    def compact(self, messages: Iterable[Message]) -> None:
        """Record the history as compression left it."""
        self.append("compact", messages=[serialization.message_to_dict(m) for m in messages])

    def close(self) -> None:
        """Close the file (a later append reopens it)."""
        if self._file is not None:
            self._file.close()
            self._file = None


@frozen
class SessionContents:
    """A session file read back.

    ``messages`` is the history (``compact`` records applied); ``problems``
    lists corrupt lines by number; ``torn_tail`` says the last line was cut
    off (a crash mid-write) and skipped.
    """

    session_id: str
    path: Path
    records: tuple[dict[str, Any], ...]
    messages: tuple[Message, ...]
    problems: tuple[str, ...] = field(factory=tuple)
    torn_tail: bool = False


@frozen
class SessionInfo:
    """One entry of :meth:`SessionStore.list`.

    ``status`` is how the session's last run ended: its ``stopped_reason``
    (``final``, ``budget``, ``aborted``, ``error``), ``open`` when the last run
    has no ``run_end`` (still running, or the process died), or ``""`` when the
    file records no run. ``answered`` says whether that last run got a model
    answer: a run that failed before its first answer is ``status == "error"``
    and ``answered == False`` (see :attr:`failed_unanswered`). ``cost_usd`` sums
    the runs' costs.
    """

    session_id: str
    path: Path
    title: str
    modified: float
    size: int
    status: str = ""
    answered: bool = False
    #: What the session's runs cost together, in US dollars; ``None`` when a run's cost
    #: is unknown (not priced, or recorded before costs were).
    cost_usd: float | None = None

    @property
    def failed(self) -> bool:
        """The last run ended in an error."""
        return self.status == "error"

    @property
    def failed_unanswered(self) -> bool:
        """The last run failed before the model answered it once."""
        return self.failed and not self.answered


class SessionStore:
    """The session files under one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    @staticmethod
    def new_id() -> str:
        """A new, time-sortable, unguessable session id."""
        return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)

    def path_for(self, session_id: str) -> Path:
        """The file of ``session_id``; refuses ids that are not plain names."""
        if not _ID_PATTERN.match(session_id):
            raise ValueError(f"invalid session id: {session_id!r}")
        return self.directory / f"{session_id}.jsonl"

    def open(self, session_id: str | None = None) -> SessionWriter:
        """A writer appending to ``session_id`` (a new session when ``None``)."""
        sid = session_id or self.new_id()
        return SessionWriter(sid, self.path_for(sid))

    def exists(self, session_id: str) -> bool:
        """Whether the session has a file."""
        try:
            return self.path_for(session_id).is_file()
        except ValueError:
            return False

    def list(self) -> list[SessionInfo]:
        """Every session, newest first, titled by its first user message."""
        if not self.directory.is_dir():
            return []
        entries = []
        for path in self.directory.glob("*.jsonl"):
            try:
                info = path.stat()
            except OSError:
                continue
            entries.append((info.st_mtime, path, info.st_size))
        entries.sort(key=lambda e: (e[0], e[1].name), reverse=True)
        return [
            SessionInfo(path.stem, path, _title(path), mtime, size, *_last_run(path))
            for mtime, path, size in entries
        ]

    def ids(self) -> builtins.list[str]:
        """The ids of every session file, sorted (cheaper than :meth:`list`)."""
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.jsonl") if _ID_PATTERN.match(p.stem))

    def resolve(self, ref: str) -> str:
        """A session id from ``ref``: an id, a path, ``latest``, or the start of one id.

        :raises SessionAmbiguous: ``ref`` is the start of several ids (they are listed).
        :raises SessionNotFound: nothing matches.
        """
        if ref == "latest":
            sessions = self.list()
            if not sessions:
                raise SessionNotFound(f"no sessions in {self.directory}")
            return sessions[0].session_id
        if ref.endswith(".jsonl"):
            ref = Path(ref).stem
        if self.exists(ref):
            return ref
        # An exact id wins over a prefix; the prefix must pick exactly one.
        candidates = tuple(i for i in self.ids() if ref and i.startswith(ref))
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            shown = ", ".join(candidates[:10]) + (", …" if len(candidates) > 10 else "")
            raise SessionAmbiguous(
                f"{ref!r} is the start of {len(candidates)} sessions in {self.directory}: "
                f"{shown}; give more of the id", candidates)
        raise SessionNotFound(f"no session {ref!r} in {self.directory}")

    def remove(self, session_id: str) -> Path:
        """Delete the file of ``session_id``; the path it had.

        Only the store's own file is removed: the id is a plain name (no path
        separator), and a session file that is a symbolic link loses the link,
        never what it points to. The store writes no other file per session.
        """
        path = self.path_for(session_id)
        # unlink never follows a link in the last component; lstat refuses a directory
        # (or anything else) named like a session.
        mode = path.lstat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise ValueError(f"not a session file: {path}")
        path.unlink()
        return path

    def read(self, ref: str) -> SessionContents:
        """Read a session back (see :class:`SessionContents`)."""
        sid = self.resolve(ref)
        return read_session_file(self.path_for(sid), sid)

    def history(self, ref: str) -> builtins.list[Message]:
        """The conversation to resume: messages, with dangling tool calls closed."""
        return repair_dangling_tool_calls(self.read(ref).messages)


def read_session_file(path: Path, session_id: str | None = None) -> SessionContents:
    """Parse one JSONL session file leniently (see :class:`SessionContents`)."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    ends_clean = data.endswith(b"\n") or not data
    if ends_clean:
        lines = lines[:-1]
    records: list[dict[str, Any]] = []
    messages: list[Message] = []
    problems: list[str] = []
    torn = False
    last = len(lines) - 1
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
            if not isinstance(record, dict):
                raise ValueError("not a JSON object")
            version = record.get("v")
            if version not in READABLE_VERSIONS or isinstance(version, bool):
                raise ValueError(f"unsupported record version {version!r}")
            kind = record.get("kind")
            if kind == "message":
                messages.append(serialization.message_from_dict(record.get("message")))
            elif kind == "compact":
                messages = serialization.messages_from_dicts(record.get("messages"))
        except (ValueError, serialization.SerializationError, UnicodeDecodeError) as exc:
            if number - 1 == last and not ends_clean:
                torn = True  # the process died mid-write; everything before is intact
                continue
            problems.append(f"line {number}: corrupt record skipped: {exc}")
            continue
        records.append(record)
    return SessionContents(
        session_id=session_id or path.stem,
        path=path,
        records=tuple(records),
        messages=tuple(messages),
        problems=tuple(problems),
        torn_tail=torn,
    )


def repair_dangling_tool_calls(messages: Iterable[Message]) -> list[Message]:
    """Give every tool call without a result a ``cancelled`` result, right after its turn.

    Providers reject a history in which a tool call has no answer; a run
    killed mid-tool leaves exactly that.
    """
    out: list[Message] = []
    pending: list[tuple[str, str]] = []
    # The same content the loop writes for a cancelled call, so both read alike.
    cancelled = ToolResult.failure("cancelled").to_content()

    def close_pending() -> None:
        for call_id, name in pending:
            out.append(ToolMessage(call_id, name, cancelled, True))
        pending.clear()

    for message in messages:
        if isinstance(message, ToolMessage):
            pending[:] = [p for p in pending if p[0] != message.tool_call_id]
            out.append(message)
            continue
        close_pending()
        out.append(message)
        if isinstance(message, AssistantMessage):
            pending.extend((c.id, c.name) for c in message.tool_calls)
    close_pending()
    return out


def run_cost(record: Mapping[str, Any]) -> float | None:
    """The ``cost_usd`` of a ``run_end`` meta record; ``None`` when unknown or absent."""
    cost = record.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
        return float(cost)
    return None


def session_cost(records: Iterable[Mapping[str, Any]]) -> float | None:
    """What the runs recorded in ``records`` cost together: ``None`` when there is no
    run, or when one run's cost is unknown (a partial sum would read as the whole)."""
    total: float | None = None
    for record in records:
        if record.get("kind") != "meta" or record.get("event") != "run_end":
            continue
        cost = run_cost(record)
        if cost is None:
            return None
        total = (total or 0.0) + cost
    return total


def _last_run(path: Path) -> tuple[str, bool, float | None]:
    """``(status, answered, cost)`` of the file's last run, the cost summed over every
    run (see :class:`SessionInfo`).

    Only lines that can matter are parsed (a meta record, or an assistant message):
    a tool output line is never decoded, so listing many big sessions stays cheap.
    """
    status, answered = "", False
    ends: list[dict[str, Any]] = []
    try:
        with open(path, "rb") as f:
            for raw in f:
                is_meta = b'"meta"' in raw
                if not is_meta and b'"assistant"' not in raw:
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue  # a corrupt or torn line: `lich sessions show` reports it
                if not isinstance(record, dict):
                    continue
                kind = record.get("kind")
                if kind == "meta" and record.get("event") == "run_start":
                    status, answered = "open", False
                elif kind == "meta" and record.get("event") == "run_end":
                    status = str(record.get("stopped_reason") or "")
                    ends.append(record)
                elif kind == "message":
                    message = record.get("message")
                    if isinstance(message, dict) and message.get("role") == "assistant":
                        answered = True
    except OSError:
        pass
    return status, answered, session_cost(ends)


def _title(path: Path, limit: int = 80) -> str:
    try:
        with open(path, "rb") as f:
            for _ in range(64):  # the first user message is near the top
                raw = f.readline()
                if not raw:
                    break
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                message = record.get("message") if isinstance(record, dict) else None
                if isinstance(message, dict) and message.get("role") == "user":
                    text = str(message.get("content", "")).strip().splitlines()
                    first = text[0] if text else ""
                    return first[:limit]
    except OSError:
        pass
    return ""

