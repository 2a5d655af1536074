"""The JSON forms of lich's data: messages, events, envelopes.

Messages are a tagged union on ``role``, events on ``type`` (each class carries
its tag as a ``Literal`` field with a default, so the tag is written out and
read back like any other field). Sessions, ``--json`` output, the gateway's
server-sent events and the scripted test server all use these functions, so
there is one JSON shape per type. They go through the one private converter
(:mod:`lich._converter`), as the settings do.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from lich import events as ev
from lich._converter import converter, describe_errors, json_type_name
from lich.types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "SerializationError",
    "envelope_to_dict",
    "event_from_dict",
    "event_to_dict",
    "message_from_dict",
    "message_to_dict",
    "messages_from_dicts",
    "structure",
    "unstructure",
]

T = TypeVar("T")


class SerializationError(ValueError):
    """A JSON object is not a valid lich record; the message says why."""


_MESSAGE_BY_ROLE: dict[str, type[Any]] = {
    "system": SystemMessage,
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool": ToolMessage,
}

_EVENT_TYPES: tuple[type[Any], ...] = typing.get_args(ev.Event)
_EVENT_BY_TYPE: dict[str, type[Any]] = {
    cls.__attrs_attrs__.type.default: cls for cls in _EVENT_TYPES
}

def unstructure(obj: Any) -> Any:
    """Turn any lich attrs object into plain JSON-able Python data."""
    return converter.unstructure(obj)


def structure(data: Any, cls: type[T]) -> T:
    """Build ``cls`` from plain data; raises :class:`SerializationError` naming the problem."""
    try:
        return converter.structure(data, cls)
    except Exception as exc:  # cattrs raises ExceptionGroups and plain errors alike
        raise SerializationError(_describe(exc, cls)) from exc


def message_to_dict(message: Message) -> dict[str, Any]:
    """The JSON object of one message (``role`` included)."""
    return cast(dict[str, Any], converter.unstructure(message))


def message_from_dict(data: Any) -> Message:
    """Read one message back; raises :class:`SerializationError` for anything else."""
    if not isinstance(data, Mapping):
        raise SerializationError(f"a message must be a JSON object, got {json_type_name(data)}")
    role = data.get("role")
    cls = _MESSAGE_BY_ROLE.get(role) if isinstance(role, str) else None
    if cls is None:
        raise SerializationError(f"unknown message role: {role!r}")
    return cast(Message, structure(data, cls))


def messages_from_dicts(items: Any) -> list[Message]:
    """Read a list of messages."""
    if not isinstance(items, list):
        raise SerializationError("messages must be a JSON array")
    return [message_from_dict(item) for item in items]


def event_to_dict(event: ev.Event) -> dict[str, Any]:
    """The JSON object of one event (``type`` included)."""
    return cast(dict[str, Any], converter.unstructure(event))


def event_from_dict(data: Any) -> ev.Event:
    """Read one event back (the envelope keys, if present, are ignored)."""
    if not isinstance(data, Mapping):
        raise SerializationError("an event must be a JSON object")
    cls = _EVENT_BY_TYPE.get(data.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise SerializationError(f"unknown event type: {data.get('type')!r}")
    body = {k: v for k, v in data.items() if k not in _ENVELOPE_KEYS}
    return cast(ev.Event, structure(body, cls))


_ENVELOPE_KEYS = frozenset({"v", "run_id", "session_id", "seq", "ts"})


def envelope_to_dict(envelope: ev.Envelope) -> dict[str, Any]:
    """The documented ``--json`` line: schema version, envelope fields, then the event's fields."""
    out: dict[str, Any] = {
        "v": ev.EVENT_SCHEMA_VERSION,
        "run_id": envelope.run_id,
        "session_id": envelope.session_id,
        "seq": envelope.seq,
        "ts": envelope.ts,
    }
    out.update(converter.unstructure(envelope.event))
    return out


def _describe(exc: BaseException, cls: type[Any]) -> str:
    return f"invalid {cls.__name__}: " + "; ".join(describe_errors(exc))
