"""Append-only JSONL transcripts: one file per conversation under ``session_dir``.

Every line is one record ``{"v": 2, "ts": …, "kind": …}``:

* ``message`` — ``{"message": {...}}``, one per message as it is produced;
* ``compact`` — ``{"messages": [...]}``, the history as compression left it;
* ``event`` — ``{"event": {...}}``, events worth keeping (tool call provenance,
  retries and failovers, compression, errors);
* ``meta`` — ``{"event": "run_start" | "run_end", ...}`` with the input,
  usage, cost (``cost_usd``, ``null`` when unknown) and stopped reason;
* ``rewind`` — ``{"messages": N}``: the history from here on is its first ``N``
  messages (a conversation rewind: the file stays append-only, and a run that
  resumes the session continues from there).

Version 2 (this one) added the cache and reasoning token counts to every
usage and ``cost_usd`` to ``run_end`` and to the recorded events; version 1
files are read as they are (the missing counts are 0, the cost unknown).

Each record is written and flushed on its own, so a killed process leaves
every finished record readable. The reader tolerates a torn last line and
reports — without hiding or stopping at — a corrupt line in the middle.

:class:`JsonlSessionStore` is the default implementation of :class:`SessionStore`,
the interface every user of transcripts (the agent, ``lich sessions``,
``--resume``, the TUI, the gateway) goes through; a plugin supplies another one
through ``lich_make_session_store`` (:func:`open_session_store` asks it).
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
from typing import IO, TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import Factory, field, frozen

from lich import serialization
from lich.dotlich import make_dirs
from lich.private_files import open_private_append
from lich.session_table import DEFAULT_STORE_KIND, parse_jsonl_table
from lich.types import AssistantMessage, Message, ToolMessage, ToolResult

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.plugins import PluginHost

__all__ = [
    "DEFAULT_STORE_KIND",
    "RECORD_VERSION",
    "JsonlSessionStore",
    "SessionAmbiguous",
    "SessionContents",
    "SessionInfo",
    "SessionNotFound",
    "SessionStore",
    "SessionWriter",
    "StaleWriter",
    "StoreError",
    "TranscriptWriter",
    "apply_record",
    "encode_record",
    "is_valid_session_id",
    "open_session_store",
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


class StoreError(OSError):
    """A session store could not do what was asked (its server is unreachable, say).

    An :class:`OSError`, as the JSONL store's failures are: every caller that
    handles an unreadable or unwritable transcript file handles this too (the
    agent logs it and goes on without its transcript).
    """


class StaleWriter(StoreError):
    """This writer no longer owns its session: another one claimed it (a newer
    ``epoch``), or wrote the record this one expected to write (a ``seq`` taken).

    A writer that raised it writes nothing more; the agent stops the run (its
    conversation belongs to someone else now) and :meth:`lich.Agent.run` raises
    it after the run's end hooks.
    """

    def __init__(self, message: str, *, session_id: str, epoch: int | None = None,
                 current_epoch: int | None = None, seq: int | None = None) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.epoch = epoch
        self.current_epoch = current_epoch
        self.seq = seq


def is_valid_session_id(session_id: str) -> bool:
    """Whether ``session_id`` is a plain name a store accepts:
    ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``."""
    return bool(_ID_PATTERN.match(session_id))


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


@runtime_checkable
class TranscriptWriter(Protocol):
    """Appends the records of one run to one session (what :meth:`SessionStore.open` gives).

    Records keep their order. ``append`` may hand the record to a background
    writer (a database store does): a failure then surfaces on a later
    ``append``, on :meth:`flush` or on :meth:`close`; after a
    :class:`StaleWriter` nothing more is written.
    """

    session_id: str

    @property
    def location(self) -> str:
        """Where the session is kept, for people (a file path, a database and id;
        never a password)."""
        ...

    def append(self, kind: str, **fields: Any) -> None:
        """Write one record ``{"v": 1, "ts": …, "kind": kind, **fields}``."""
        ...

    def message(self, message: Message) -> None:
        """Record one message (a ``message`` record)."""
        ...

    def compact(self, messages: Iterable[Message]) -> None:
        """Record the history as compression left it (a ``compact`` record)."""
        ...

    def flush(self) -> None:
        """Return once every record appended so far is stored; raise the first failure."""
        ...

    def close(self) -> None:
        """:meth:`flush`, then release what the writer holds (a later append reopens)."""
        ...

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop while records are stored."""
        ...


@runtime_checkable
class ConditionalWriter(Protocol):
    """A :class:`TranscriptWriter` of a fenced store that can claim its session only if
    nothing was added to it since it was read.

    What a consumer of a durable turn needs (:mod:`lich.turns`): it decides from a
    read whether to run, continue or answer a turn, and a consumer that stalled
    after its read while another took the turn over must not act on what it read.
    """

    def claim_after(self, end: int) -> None:
        """Make this writer's claim (made before its first record) succeed only while
        the session's last record is still the one at ``end``
        (:attr:`SessionContents.end`; 0: the session has none). Otherwise nothing is
        written and the writer fails with :class:`StaleWriter`. Call it before the
        first :meth:`~TranscriptWriter.append`."""
        ...

    def claim(self) -> int:
        """Claim the session now rather than at the first record (blocking); its epoch.

        :raises StaleWriter: a :meth:`claim_after` claim found the session changed.
        """
        ...


@runtime_checkable
class SessionStore(Protocol):
    """Where transcripts are kept: the interface the agent, ``lich sessions``,
    ``--resume``, the TUI and the gateway use.

    :class:`JsonlSessionStore` (JSONL files) is the default; a plugin returns another
    from ``lich_make_session_store``. ``lich.testing.contracts.SessionStoreContract``
    is the test suite every implementation must pass. A session id matches
    ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``; a ``ref`` is an id, ``latest``, or the
    start of exactly one id (a store may accept more, as the JSONL store takes a
    file's path).
    """

    #: Whether a writer can lose its session to another one (and raise StaleWriter).
    fenced: bool

    def new_id(self) -> str:
        """A new, time-sortable, unguessable session id."""
        ...

    def describe(self) -> str:
        """Where the sessions are, for people (never a password)."""
        ...

    def location(self, session_id: str) -> str:
        """Where one session is kept, for people (never a password)."""
        ...

    def exists(self, session_id: str) -> bool:
        """Whether the session has records (``False`` for an id that is not valid)."""
        ...

    def ids(self) -> builtins.list[str]:
        """Every session id, sorted."""
        ...

    def list(self) -> builtins.list[SessionInfo]:
        """Every session, newest first (see :class:`SessionInfo`)."""
        ...

    def resolve(self, ref: str) -> str:
        """The session id ``ref`` names.

        :raises SessionAmbiguous: ``ref`` starts several ids.
        :raises SessionNotFound: nothing matches.
        """
        ...

    def read(self, ref: str) -> SessionContents:
        """The session read back, unreadable records reported (:class:`SessionContents`)."""
        ...

    def history(self, ref: str) -> builtins.list[Message]:
        """The conversation to resume: messages, with dangling tool calls closed."""
        ...

    def open(self, session_id: str | None = None) -> TranscriptWriter:
        """A writer for one run appending to ``session_id`` (a new session when ``None``)."""
        ...

    def remove(self, session_id: str) -> object:
        """Delete the session and all its records.

        :raises SessionNotFound: there is no such session.
        :raises ValueError: ``session_id`` is not a valid id.
        """
        ...

    def prepare(self) -> None:
        """Make the store ready now rather than at first use (create or migrate its
        schema, reach its server), so a long-running process fails at start.

        :raises OSError: the store is not usable (a :class:`StoreError` for a server).
        """
        ...

    def close(self) -> None:
        """Release what the store holds (connections); it may not be used afterwards."""
        ...


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

    @property
    def location(self) -> str:
        """The session file's path."""
        return str(self.path)

    def flush(self) -> None:
        """Nothing to do: every record is flushed as it is appended."""

    def close(self) -> None:
        """Close the file (a later append reopens it)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    async def aclose(self) -> None:
        """:meth:`close` (closing a file does not wait on anything)."""
        self.close()


def _path_text(self: SessionContents | SessionInfo) -> str:
    return "" if self.path is None else str(self.path)


@frozen
class SessionContents:
    """A session file read back.

    ``messages`` is the history (``compact`` records applied); ``problems``
    lists corrupt lines (or records) by number; ``torn_tail`` says the last line
    was cut off (a crash mid-write) and skipped. ``path`` is the file (``None``
    for a store that keeps no files); ``location`` says where the session is,
    for people. ``end`` is the position of the last record read (its ``seq``; 0:
    none) in a store whose writers can claim conditionally on it
    (:class:`ConditionalWriter`), ``None`` in one that cannot (the JSONL store).
    """

    session_id: str
    path: Path | None
    records: tuple[dict[str, Any], ...]
    messages: tuple[Message, ...]
    problems: tuple[str, ...] = field(factory=tuple)
    torn_tail: bool = False
    location: str = field(default=Factory(_path_text, takes_self=True))
    end: int | None = None


@frozen
class SessionInfo:
    """One entry of :meth:`JsonlSessionStore.list`.

    ``status`` is how the session's last run ended: its ``stopped_reason``
    (``final``, ``budget``, ``aborted``, ``error``), ``open`` when the last run
    has no ``run_end`` (still running, or the process died), or ``""`` when the
    file records no run. ``answered`` says whether that last run got a model
    answer: a run that failed before its first answer is ``status == "error"``
    and ``answered == False`` (see :attr:`failed_unanswered`). ``path`` is the
    file (``None`` for a store that keeps no files), ``location`` where the
    session is, for people; ``size`` is the bytes of its records; ``cost_usd`` sums
    the runs' costs.
    """

    session_id: str
    path: Path | None
    title: str
    modified: float
    size: int
    status: str = ""
    answered: bool = False
    #: What the session's runs cost together, in US dollars; ``None`` when a run's cost
    #: is unknown (not priced, or recorded before costs were, or a store that does not
    #: sum them in its listing).
    cost_usd: float | None = None
    location: str = field(default=Factory(_path_text, takes_self=True))

    @property
    def failed(self) -> bool:
        """The last run ended in an error."""
        return self.status == "error"

    @property
    def failed_unanswered(self) -> bool:
        """The last run failed before the model answered it once."""
        return self.failed and not self.answered


class JsonlSessionStore:
    """The session files under one directory: the default :class:`SessionStore`."""

    fenced = False  # one process owns a file at a time; nothing claims it away

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def describe(self) -> str:
        """The session directory."""
        return str(self.directory)

    def location(self, session_id: str) -> str:
        """The file of ``session_id``."""
        return str(self.path_for(session_id))

    def prepare(self) -> None:
        """Nothing to prepare: the directory is made with the first session."""

    def close(self) -> None:
        """Nothing to release: every writer closes its own file."""

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
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            raise SessionNotFound(f"no session {session_id!r} in {self.directory}") from None
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
            messages = apply_record(record, messages)
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


def apply_record(record: Any, messages: builtins.list[Message]) -> builtins.list[Message]:
    """The history after ``record``: a ``message`` appended, a ``compact`` replacing it,
    a ``rewind`` cutting it.

    What every store's reader does with each record it reads back, in order.

    :raises ValueError: the record is not an object of a known version.
    :raises lich.serialization.SerializationError: its message is malformed.
    """
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
    elif kind == "rewind":
        keep = record.get("messages")
        if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
            raise ValueError(f"rewind record: messages must be a count, not {keep!r}")
        messages = messages[:keep]
    return messages


def encode_record(record: Mapping[str, Any]) -> bytes:
    """``record`` as one JSON line (newline included), with NUL characters and lone
    surrogates replaced: what the JSONL store writes, and what other stores keep."""
    return _encode(record)


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



def open_session_store(config: LichConfig, host: PluginHost | None = None) -> SessionStore:
    """The session store of ``config``: the JSONL store under ``config.session_dir``,
    or, when ``[session_store]`` names another ``kind``, the store a plugin of
    ``host`` makes for it (``lich_make_session_store``).

    No table, or ``kind = "jsonl"``, is the JSONL store, which takes no other
    setting; plugins are not asked then (so ``lich sessions`` on the default store
    loads none). Any other kind must be answered by a loaded plugin.

    :raises lich.config.ConfigError: a kind no loaded plugin provides, a setting the
        JSONL store does not take, or a store plugin that failed.
    """
    from lich.settings import ConfigError

    table = config.table("session_store")
    kind = table.get("kind", DEFAULT_STORE_KIND)
    if kind == DEFAULT_STORE_KIND:
        parse_jsonl_table(table)  # the check of lich's claim of the table, the same words
        return JsonlSessionStore(config.session_dir)
    store = host.make_session_store(config) if host is not None else None
    if store is None:
        raise ConfigError([
            f"$.session_store.kind: no loaded plugin provides the session store {kind!r} "
            f"(the builtin kinds: {DEFAULT_STORE_KIND!r}, and 'postgres' with the "
            "postgres plugin and pip install 'lich-agent[postgres]')"
        ])
    return store
