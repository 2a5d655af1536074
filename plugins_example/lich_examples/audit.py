"""An audit log of every tool call (plugin ``audit``).

Each finished tool call — run, blocked or rewritten — becomes one JSON line
in the audit log, written with a single ``write`` and ``fsync``'d before the
run goes on, so a process killed at any point between two calls loses
nothing that was already decided. A line torn by a kill *during* a write is
left as it is (a kill cannot tear a single write to a local file, a crash of
the machine can); the next writer starts on a fresh line and
:func:`read_audit_log` skips the torn one, so the log stays readable.

Settings (``[plugin_settings.audit]``)::

    path = ".lich/audit.jsonl"   # relative to the work dir, or absolute
    preview_chars = 200          # how much of each result's output to keep (0: none)
    max_arg_chars = 1000         # longer string arguments are cut in the log
    redact_args = ["password", "*token", "*secret*", "api_key", "authorization"]
    fsync = true                 # false trades durability for speed
    require = true               # block tool calls while the log cannot be written

Bad settings (a wrong type, a negative number, an unknown key) are refused
before anything runs, every one with its ``$.plugin_settings.audit`` path:
``lich config validate`` reports them and a run does not start
(``lich_check_config``).

A line (``"v": 1``)::

    {"v": 1, "ts": "2025-01-01T12:00:00.000000Z", "run_id": "…", "session_id": "…",
     "turn": 1, "call_id": "call_1", "tool": "terminal", "args": {"command": "ls"},
     "decision": "rewritten", "rewritten_by": ["guard"], "blocked_by": null,
     "replaced_by": null, "ok": true, "error": null, "output_chars": 42,
     "output_preview": "…", "duration_ms": 12.5}

``decision`` is ``blocked`` (``blocked_by`` names the plugin), ``rewritten``
(``rewritten_by`` names the plugins, in order; ``args`` are the final
arguments) or ``allowed``.

The record comes from the ``tool_call_end`` event (``lich_event``), which
carries exactly this: the final arguments, who rewrote, blocked or replaced,
and the duration. ``lich_run_start`` resolves the log for the run and keeps it
in the run's own state (``run.state_for("audit")``, which ``lich_event`` gets
with its ``run``);
``lich_before_tool_call`` blocks calls while it cannot be written (with
``require``), because an audit that silently stops auditing is worse than
none.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import json
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich import Block, hookimpl
from lich.guards import truncate_text
from lich.settings import ConfigError, at_least, each, json_type_name, setting, structure_settings

if TYPE_CHECKING:
    from lich import LichConfig, RunInfo, ToolCall
    from lich.events import Envelope

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "DEFAULT_PATH",
    "AuditSettings",
    "audit_record",
    "audit_settings",
    "lich_before_tool_call",
    "lich_check_config",
    "lich_event",
    "lich_run_start",
    "read_audit_log",
]

PLUGIN_NAME = "audit"
AUDIT_SCHEMA_VERSION = 1
DEFAULT_PATH = ".lich/audit.jsonl"
DEFAULT_REDACT = ("password", "passwd", "*secret*", "api_key", "apikey", "token", "*_token",
                  "authorization")
_WHERE = f"$.plugin_settings.{PLUGIN_NAME}"

log = logging.getLogger("lich_examples.audit")


def _file_path(value: str) -> None:
    if not value.strip() or "\x00" in value:
        raise ValueError(f"expected a file path, got {value!r}")


def _pattern(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected an argument name or glob, got {json_type_name(value)}")
    return value.lower()  # argument names are matched case-insensitively


@frozen
class AuditSettings:
    """``[plugin_settings.audit]``; see the module docstring for what each key does."""

    path: str = setting(DEFAULT_PATH, check=_file_path, help="the log file")
    preview_chars: int = setting(200, check=at_least(0), help="output kept per result")
    max_arg_chars: int = setting(1000, check=at_least(0), help="string arguments cut at")
    redact_args: tuple[str, ...] = setting(
        DEFAULT_REDACT, parse=each(_pattern, what="an array of argument names or globs"),
        help="arguments logged as <redacted>")
    fsync: bool = setting(True, help="fsync every line")
    require: bool = setting(True, help="block tool calls while the log cannot be written")

    def log_path(self, work_dir: str) -> Path:
        """The log file for a run in ``work_dir``."""
        path = Path(self.path).expanduser()
        return path if path.is_absolute() else Path(work_dir) / path


def audit_settings(raw: Mapping[str, Any] | None) -> AuditSettings:
    """``[plugin_settings.audit]``, checked.

    :raises lich.settings.ConfigError: naming every bad ``$.plugin_settings.audit`` key.
    """
    return structure_settings(raw, AuditSettings, _WHERE)


# --------------------------------------------------------------------------- the log file

# One lock per file: runs of one process may share a log; a line is one write either way.
_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _file_locks_guard:
        return _file_locks.setdefault(str(path), threading.Lock())


def _prepare(path: Path) -> None:
    """Create the log (and its directory) if needed; raise ``OSError`` if it cannot be written."""
    parent = path.parent
    # The log says what every tool did: its directory is private too (a new one is 0700).
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.close(fd)
    if created:
        _fsync_dir(parent)


def _fsync_dir(directory: Path) -> None:
    # A new file's directory entry must reach the disk too, or the whole log can vanish.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def append_line(path: Path, record: Mapping[str, Any], *, fsync: bool = True) -> None:
    """Append ``record`` as one JSON line with a single ``write``, then ``fsync``."""
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
    data = line.encode("utf-8")
    with _lock_for(path):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            # A line torn by an earlier kill: start ours on a line of its own.
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def read_audit_log(path: str | os.PathLike[str], *, strict: bool = False) -> list[dict[str, Any]]:
    """The records of an audit log, in order.

    A line that is not a JSON object — in practice one torn by a crash in the
    middle of a write — is skipped with a logged warning naming its line
    number; ``strict=True`` raises :class:`ValueError` for it instead.
    """
    records: list[dict[str, Any]] = []
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        problem: str | None
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            record, problem = None, f"not a JSON line ({exc.msg})"
        else:
            problem = None if isinstance(record, dict) else "not a JSON object"
        if problem is not None:
            if strict:
                raise ValueError(f"{path}:{number}: {problem}")
            log.warning("audit log %s:%d skipped: %s", path, number, problem)
            continue
        records.append(record)
    return records


# --------------------------------------------------------------------------- records


def _redacted(name: str, patterns: tuple[str, ...]) -> bool:
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, p) for p in patterns)


def _clip(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return truncate_text(value, limit, style="inline")
    if isinstance(value, list):
        return [_clip(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _clip(v, limit) for k, v in value.items()}
    return value


def audit_record(envelope: Envelope, settings: AuditSettings) -> dict[str, Any]:
    """The log line for a ``tool_call_end`` envelope."""
    event: Any = envelope.event
    call, result = event.call, event.result
    args = {
        name: "<redacted>" if _redacted(name, settings.redact_args)
        else _clip(value, settings.max_arg_chars)
        for name, value in call.args.items()
    }
    if event.blocked_by is not None:
        decision = "blocked"
    elif event.rewritten_by:
        decision = "rewritten"
    else:
        decision = "allowed"
    when = dt.datetime.fromtimestamp(envelope.ts, dt.UTC)
    output = result.output or ""
    record: dict[str, Any] = {
        "v": AUDIT_SCHEMA_VERSION,
        "ts": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "run_id": envelope.run_id,
        "session_id": envelope.session_id,
        "turn": event.turn,
        "call_id": call.id,
        "tool": call.name,
        "args": args,
        "decision": decision,
        "rewritten_by": list(event.rewritten_by),
        "blocked_by": event.blocked_by,
        "replaced_by": event.replaced_by,
        "ok": result.ok,
        "error": result.error,
        "output_chars": len(output),
        "output_preview": output[: settings.preview_chars],
        "duration_ms": event.duration_ms,
    }
    if call.args_error is not None:
        record["args_error"] = call.args_error
    return record


# --------------------------------------------------------------------------- hooks


class _RunLog:
    __slots__ = ("error", "path", "settings")

    def __init__(self, settings: AuditSettings | None, path: Path | None, error: str | None):
        self.settings = settings
        self.path = path
        self.error = error


def _run_log(run: RunInfo) -> _RunLog | None:
    # The run's own state (RunInfo.state_for): no module global keyed by run id, so one
    # process may run many agents with different settings at once.
    entry = run.state_for(PLUGIN_NAME).get("log")
    return entry if isinstance(entry, _RunLog) else None


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[plugin_settings.audit]``: ``lich config validate`` and every run refuse
    bad settings, before anything is called."""
    audit_settings(config.plugin_settings.get(PLUGIN_NAME))


@hookimpl
def lich_run_start(run: RunInfo) -> None:
    """Resolve and create this run's log; remember any problem for the before-hook."""
    try:
        settings = audit_settings(run.settings_for(PLUGIN_NAME))
    except ConfigError as exc:
        # Checked before the run already; this is a config swapped since (fail closed).
        entry = _RunLog(None, None, str(exc))
    else:
        path = settings.log_path(run.work_dir)
        error = None
        try:
            _prepare(path)
        except OSError as exc:
            error = f"cannot write the audit log {path}: {exc.strerror or exc}"
            log.error("audit: %s", error)
        entry = _RunLog(settings, path, error)
    run.state_for(PLUGIN_NAME)["log"] = entry


@hookimpl(tryfirst=True)
def lich_before_tool_call(call: ToolCall, run: RunInfo) -> Block | None:
    """With ``require`` (the default), refuse to run tools that cannot be audited."""
    current = _run_log(run)
    if current is None:
        return Block("audit_unavailable: the audit plugin did not see this run start")
    if current.error is not None and (current.settings is None or current.settings.require):
        return Block(f"audit_unavailable: {current.error}")
    return None


@hookimpl
def lich_event(event: Envelope, run: RunInfo) -> None:
    """Append a line for every ``tool_call_end``, synchronously, before the run goes on."""
    if event.type != "tool_call_end":
        return
    current = _run_log(run)
    if current is None or current.settings is None or current.path is None:
        log.warning("audit: tool call %s of run %s not logged (no usable audit settings)",
                    getattr(event.event, "call", None), event.run_id)
        return
    try:
        append_line(current.path, audit_record(event, current.settings),
                    fsync=current.settings.fsync)
    except OSError as exc:
        # Later calls of this run are then blocked (with ``require``) instead of unaudited.
        current.error = f"cannot write the audit log {current.path}: {exc.strerror or exc}"
        log.error("audit: %s", current.error)
