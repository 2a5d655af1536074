"""The ``[bus]`` table of the ``nats`` bus, and the names it derives (stable hashes).

.. code-block:: toml

    [bus]
    kind = "nats"
    servers = ["nats://127.0.0.1:4222"]
    partitions = 16          # conversations are spread over this many ordered lanes
    ack_wait_s = 30          # a worker silent this long loses the message to another
    max_deliver = 5          # deliveries of one message before it is given up
    stream = "LICH_INBOUND"
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich.settings import (
    ConfigError,
    at_least,
    between,
    each,
    greater_than,
    json_type_name,
    non_empty,
    one_of,
    setting,
    structure_settings,
    url,
)

if TYPE_CHECKING:
    from lich.config import LichConfig

__all__ = [
    "NatsBusSettings",
    "admission_token",
    "conversation_token",
    "nats_bus_settings_of",
    "parse_listen",
    "parse_nats_bus_settings",
    "partition_of",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_server_url = url("nats", "tls", "ws", "wss")


def _server(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a server URL, got {json_type_name(value)}")
    _server_url(value)
    return value


def _stream_name(value: Any) -> None:
    # The name is also the first token of the stream's subjects: no dots, no wildcards.
    if not _NAME.match(value):
        raise ValueError(
            f"expected letters, digits, '_' or '-' (at most 64), got {value!r}")


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9000`` for IPv6) as ``(host, port)``.

    :raises ValueError: not that shape, or the port is not 0-65535.
    """
    host, sep, port = value.strip().rpartition(":")
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9090), got {value!r}")
    return host, int(port)


def _listen_address(value: Any) -> None:
    if value is not None:
        parse_listen(value)


@frozen
class NatsBusSettings:
    """``[bus]`` with ``kind = "nats"``.

    ``servers`` are tried in turn (a cluster's seed list). ``partitions`` is P:
    a conversation always goes to the partition :func:`partition_of` gives,
    and a partition runs one message at a time across every worker, so P
    bounds how many conversations run at once. Do not change P while
    messages wait in the stream (a conversation would move to another lane
    and could overtake its own earlier messages). ``ack_wait_s`` is how long a
    worker may go without a sign of life before its message goes to another
    (a running turn sends ``heartbeat_s`` in-progress signals, by default a
    third of it). ``max_deliver`` deliveries of one message (each ending in a
    worker dying or stalling) and it is given up: recorded in its
    conversation's transcript and answered with an error. ``duplicate_window_s``
    is how long the broker remembers a message id (a message admitted twice
    within it runs once). ``lich gateway`` only publishes (``lich worker``
    processes run the messages) unless ``consume = true``, which makes it run
    them too (one machine with the broker's durability); ``concurrency`` bounds
    the runs of one consuming process (one per partition by default).
    ``lease_ttl_s`` is how long a dead ingress keeps the lease of a
    single-connection platform (Telegram polling, Discord, Twitch) before a
    standby takes it over. ``status_ttl_s`` is how long a reply parked for the
    webhook's status URL (``reply_timeout_s``) stays readable from every ingress.
    ``health_listen`` (``HOST:PORT``) is where ``lich worker`` serves ``/livez``
    and ``/readyz`` (``--health`` overrides it; none by default).
    """

    kind: str = setting("nats", check=one_of("nats"))
    servers: tuple[str, ...] = setting(
        ("nats://127.0.0.1:4222",), parse=each(_server, what="an array of server URLs"))
    partitions: int = setting(16, check=between(1, 1024))
    stream: str = setting("LICH_INBOUND", check=_stream_name)
    ack_wait_s: float = setting(30.0, check=at_least(1))
    heartbeat_s: float | None = setting(None, check=greater_than(0))
    max_deliver: int = setting(5, check=between(1, 1000))
    duplicate_window_s: float = setting(120.0, check=greater_than(0))
    publish_timeout_s: float = setting(5.0, check=greater_than(0))
    connect_timeout_s: float = setting(5.0, check=greater_than(0))
    token_env: str = setting("LICH_NATS_TOKEN", check=non_empty)
    consume: bool = False
    concurrency: int | None = setting(None, check=at_least(1))
    lease_ttl_s: float = setting(15.0, check=at_least(1))
    status_ttl_s: float = setting(3600.0, check=at_least(1))
    health_listen: str | None = setting(None, check=_listen_address)

    def __attrs_post_init__(self) -> None:
        if not self.servers:
            raise ValueError("servers: must list at least one server")
        if self.heartbeat_s is not None and self.heartbeat_s >= self.ack_wait_s:
            raise ValueError(
                f"heartbeat_s: must be less than ack_wait_s ({self.ack_wait_s:g}), "
                f"got {self.heartbeat_s:g}")

    @property
    def heartbeat_every_s(self) -> float:
        """How often a running turn tells the broker it is still working on its message."""
        return self.heartbeat_s if self.heartbeat_s is not None else self.ack_wait_s / 3

    def subject(self, partition: int, conversation: str) -> str:
        """The subject a conversation's messages are published to."""
        return f"{self.stream}.in.{partition}.{conversation}"

    def partition_subjects(self, partition: int) -> str:
        """The filter of a partition's consumer."""
        return f"{self.stream}.in.{partition}.>"

    def consumer_name(self, partition: int) -> str:
        """The durable name of a partition's consumer."""
        return f"{self.stream}_p{partition}"


def parse_nats_bus_settings(raw: Any, path: str = "$.bus") -> NatsBusSettings:
    """Parse ``[bus]`` for the nats bus.

    :raises ConfigError: listing every problem with its ``$.bus...`` path.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{path}: expected a table, got {json_type_name(raw)}"])
    return structure_settings(dict(raw), NatsBusSettings, path)


def nats_bus_settings_of(config: LichConfig, what: str) -> NatsBusSettings:
    """``config``'s ``[bus]``, which must be the nats bus: ``what`` says who needs it in
    the error (``"lich worker runs the messages of"``).

    :raises ConfigError: ``[bus] kind`` is another bus, or the table is wrong.
    """
    from lich.gateway.bus import bus_kind

    kind = bus_kind(config.table("bus"))
    if kind != "nats":
        raise ConfigError([
            f"$.bus.kind: {what} the nats bus; [bus] kind is {kind!r} (set kind = \"nats\")"])
    return parse_nats_bus_settings(config.table("bus"))


def _digest(text: str, size: int) -> bytes:
    # blake2b, not hash(): the same on every process, machine and Python version.
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).digest()


def partition_of(platform: str, chat_id: str, partitions: int) -> int:
    """The partition of a conversation: a stable hash of ``platform:chat_id``, modulo P."""
    return int.from_bytes(_digest(f"{platform}:{chat_id}", 8), "big") % partitions


def conversation_token(platform: str, chat_id: str) -> str:
    """A subject token naming a conversation (a hash: chat ids never reach the broker's names)."""
    return _digest(f"{platform}:{chat_id}", 12).hex()


def admission_token(platform: str, chat_id: str, message_id: str) -> str:
    """The ``Nats-Msg-Id`` of a platform message: the same for the same message, every time."""
    return "m" + _digest(f"{platform}\x1f{chat_id}\x1f{message_id}", 16).hex()
