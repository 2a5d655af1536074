"""The nats bus: inbound messages through a JetStream work queue, run from partition consumers.

Ingress (every process): :meth:`NatsBus.submit` publishes the message to
``<stream>.in.<partition>.<conversation>`` with ``Nats-Msg-Id`` set from the
platform's own message id, and returns once the broker acknowledged the
publish — only then is the platform acknowledged. The reply comes back on
core NATS to ``<stream>.reply.<ingress>.<admission>``, the subject of the
process that admitted it (with the run's events first, when asked for).

* The stream keeps at most ``[gateway] queue_limit`` messages per
  conversation (``discard_new_per_subject``): past that the broker refuses the
  publish and the answer is ``busy``, across every ingress process.
* A publish the broker reports as a duplicate (same id within
  ``duplicate_window_s``) runs nothing: the process that admitted it first
  gets the reply; another process answers with the reply it still has in
  memory, or ``duplicate``.
* A publish the broker did not take (down, timed out) is answered
  ``unavailable``: nothing was admitted, the platform may send it again.

Consumers (``consume = true``): one durable pull consumer per partition,
explicit ack, ``max_ack_pending = 1`` — one message of a partition in flight
across every consumer of the cluster, so a conversation's messages run in
order. A running turn sends in-progress signals every ``heartbeat_s``, so it
keeps its message past ``ack_wait_s``; a consumer that dies (or stalls past
``ack_wait_s``) loses it to another, before the partition's next message. A
message delivered more than ``max_deliver`` times is given up: recorded in its
conversation's transcript, answered with an error, and acknowledged. The turn
itself is the in-process bus's (``local``): the transcript, ``/new``, the
history cap and sanitised errors are exactly the single-process gateway's.

Turns are durable (:mod:`lich.turns`) when transcripts are kept: before
running a message the consumer reads its conversation's transcript for the
message's admission id. A turn that ended is not run again — its recorded
reply is sent (unless ``reply_sent`` says it was); one that started is
continued from the transcript (:meth:`lich.Agent.continue_turn`). Each turn
records ``turn_start`` before its first model call, ``tool_start`` before a
call that is not idempotent, ``turn_end`` with the reply, then the reply goes
to the ingress, ``reply_sent`` is recorded once the ingress confirmed it, and
only then is the message acknowledged (why this order: ``_process``). A run
cancelled at shutdown is handed back (``nak``), with no ``turn_end``, to a
consumer that continues it.

Key-value buckets beside the stream: ``<stream>_LEASES`` (single-connection
platforms, :mod:`lich.nats_bus.lease`), ``<stream>_REPLIES`` (replies parked
for the webhook's status URLs, readable by every ingress: :meth:`NatsBus.park`)
and ``<stream>_PROCESSES`` (each process's presence, renewed every quarter of
``lease_ttl_s``, read by ``lich cluster status``). While a consumer handles a
message, :mod:`lich.logcontext` carries its admission id onto every log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import nats
import nats.errors
import nats.js.errors
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from lich import serialization
from lich.events import Envelope, EventHandler
from lich.gateway.approvals import APPROVAL_COMMAND, Notify
from lich.gateway.bus import (
    BUSY_TEXT,
    CLOSED_TEXT,
    PENDING,
    BusReply,
    GatewayBus,
    InboundMessage,
    ParkedReply,
    ReplyKind,
    is_status_id,
    park_in,
    parked_in,
)
from lich.gateway.formatting import log_event, redact
from lich.gateway.pacing import sleep_or_stop
from lich.gateway.registry import GatewayError
from lich.logcontext import reset_admission, set_admission
from lich.nats_bus._cancel import reraise_cancel
from lich.nats_bus.lease import NatsLease
from lich.nats_bus.settings import (
    NatsBusSettings,
    admission_token,
    conversation_token,
    partition_of,
)
from lich.secrets import redact_url
from lich.sessions import ConditionalWriter, StaleWriter, TranscriptWriter
from lich.turns import REPLY_SENT, TURN_END, DurableTurn, TurnRecords, find_turn
from lich.types import Usage

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js.client import JetStreamContext
    from nats.js.kv import KeyValue

__all__ = [
    "DUPLICATE_TEXT",
    "GAVE_UP_TEXT",
    "TOO_LARGE_TEXT",
    "UNAVAILABLE_TEXT",
    "NatsBus",
    "partition_consumer_config",
]

log = logging.getLogger("lich.gateway")

DUPLICATE_TEXT = "already received: this message is being answered (or was) elsewhere."
UNAVAILABLE_TEXT = "the message queue is unavailable; send your message again in a moment."
TOO_LARGE_TEXT = "too large: this message is over the message queue's size limit."
GAVE_UP_TEXT = ("failed: this message could not be handled after {n} attempts and was "
                "dropped; send it again to retry.")

#: JetStream's error code for a publish refused by ``max_msgs_per_subject`` with
#: ``discard_new_per_subject`` (the conversation's queue is full).
_PER_SUBJECT_FULL = 10077
#: "stream name already in use with a different configuration": update it instead.
_STREAM_EXISTS = 10058
#: The stream's metadata key recording P, so another P is noticed before it reorders.
_PARTITIONS_KEY = "lich_partitions"
#: How long one pull request waits for a message before it is made again.
_FETCH_S = 5.0
#: Replies remembered by admission id, for a duplicate that comes after its reply.
_RECENT_REPLIES = 1024
#: How long a stopping bus waits for replies to messages it admitted but others run.
_REPLY_GRACE_S = 10.0
#: How long a reply is sent again while its ingress does not answer (reconnecting).
_REPLY_RETRY_S = 60.0
#: How much of that the partition waits for (then the message is acknowledged, and the
#: retries go on in the background).
_REPLY_INLINE_S = 10.0
# A worker's text for the chat of a message, on the message's reply subject: the compact
# JSON object {"type":"notify","text":...}, its type first so it is told apart at once.
_NOTIFY_PREFIX = b'{"type":"notify",'
_SENT = b"sent"


class _Waiter:
    """The reply an ingress waits for, who wants the run's events, and how to send to
    the message's chat while it runs (``notify``: an approval request from the worker).

    ``uncertain_until`` is set when the publish timed out: the broker may have
    stored the message all the same, so the waiter stays (a retry of the same
    message joins it) until the duplicate window has passed.
    """

    __slots__ = ("future", "handlers", "notify", "session_id", "uncertain_until")

    def __init__(self, future: asyncio.Future[BusReply], session_id: str,
                 handler: EventHandler | None, notify: Notify | None = None) -> None:
        self.future = future
        self.session_id = session_id
        self.handlers: list[EventHandler] = [handler] if handler is not None else []
        self.notify = notify
        self.uncertain_until: float | None = None


class _EventForwarder:
    """Publishes a run's events to its ingress, in order, before the reply."""

    def __init__(self, nc: Client, subject: str) -> None:
        self._nc = nc
        self._subject = subject
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._task = asyncio.create_task(self._pump(), name="lich-nats-events")

    def __call__(self, envelope: Envelope) -> None:
        body = {"type": "event", "envelope": serialization.envelope_to_dict(envelope)}
        self._queue.put_nowait(json.dumps(body, ensure_ascii=False).encode())

    async def _pump(self) -> None:
        while (data := await self._queue.get()) is not None:
            try:
                await self._nc.publish(self._subject, data)
            except Exception as exc:  # an event lost is not a turn lost
                reraise_cancel(exc)
                log_event(log, logging.WARNING, "event_forward_failed",
                          error=f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        self._queue.put_nowait(None)
        await self._task


def _done(reply: BusReply) -> asyncio.Future[BusReply]:
    future: asyncio.Future[BusReply] = asyncio.get_running_loop().create_future()
    future.set_result(reply)
    return future


def _reply_to_dict(reply: BusReply) -> dict[str, Any]:
    return {
        "kind": reply.kind,
        "text": reply.text,
        "session_id": reply.session_id,
        "usage": serialization.unstructure(reply.usage) if reply.usage is not None else None,
        "run_id": reply.run_id,
    }


def _reply_from_dict(data: Mapping[str, Any]) -> BusReply:
    usage = data.get("usage")
    kind: ReplyKind = data["kind"]
    return BusReply(kind, str(data["text"]), str(data["session_id"]),
                    serialization.structure(usage, Usage) if usage is not None else None,
                    data.get("run_id"))


def _envelope_from_dict(data: Mapping[str, Any]) -> Envelope:
    return Envelope(str(data["run_id"]), str(data["session_id"]), int(data["seq"]),
                    float(data["ts"]), serialization.event_from_dict(data))


def partition_consumer_config(settings: NatsBusSettings, partition: int) -> ConsumerConfig:
    """The durable pull consumer of one partition, as every process of the bus makes it."""
    return ConsumerConfig(
        durable_name=settings.consumer_name(partition),
        filter_subject=settings.partition_subjects(partition),
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=settings.ack_wait_s,
        # One message of a partition in flight, across every consumer process.
        max_ack_pending=1,
        # lich gives up itself (recorded and answered) after max_deliver.
        max_deliver=-1,
    )


class NatsBus:
    """The ``nats`` bus (see the module docstring).

    :param settings: the parsed ``[bus]`` table.
    :param local: the in-process bus the consumers run messages on (its
        ``queue_limit`` becomes the stream's per-conversation limit).
    :param env: where ``token_env`` is read (``os.environ`` by default).
    """

    def __init__(self, settings: NatsBusSettings, local: GatewayBus, *,
                 env: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.local = local
        # Another process may run the conversation's next turn: each turn reads the
        # transcript rather than a history this process kept from an earlier one.
        if local.agent.config.persist_sessions:
            local.keep_history = False
        self._token = (os.environ if env is None else env).get(settings.token_env, "").strip()
        self.ingress_id = secrets.token_hex(8)
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._waiters: dict[str, _Waiter] = {}
        self._recent: OrderedDict[str, BusReply] = OrderedDict()
        self._closed = False
        self._stopping = asyncio.Event()
        self._consumers: dict[int, asyncio.Task[None]] = {}
        self._busy_partitions: set[int] = set()
        #: Runs at once in this process: ``concurrency``, or one per partition.
        self.concurrency = settings.concurrency or settings.partitions
        self._slots = asyncio.Semaphore(self.concurrency)
        self._slot_freed = asyncio.Event()
        self._replies: set[asyncio.Task[None]] = set()
        #: Ingresses that did not answer a reply in time, and until when they count as away.
        self._unreachable: dict[str, float] = {}
        self._leases_kv: KeyValue | None = None
        self._leases: list[NatsLease] = []
        self._drained = False
        #: In-progress signals sent for running turns (what keeps them past ack_wait).
        self.heartbeats = 0
        # Replies parked for a status URL: this process's own, and the bucket that
        # lets every ingress read them (made at the first park or read).
        self._parked: OrderedDict[str, asyncio.Future[BusReply]] = OrderedDict()
        self._parked_kv: KeyValue | None = None
        self._parking: set[asyncio.Task[None]] = set()
        # This process's entry in <stream>_PROCESSES (lich cluster status reads it).
        self._announcer: asyncio.Task[None] | None = None
        self._withdrawn = asyncio.Event()
        self._processes_kv: KeyValue | None = None
        self.started_at = time.time()
        #: Whether the partition consumers are running (what readiness needs).
        self.consuming = False
        #: What this process is in ``lich cluster status``: ``lich worker`` says "worker".
        self.role = "ingress+worker" if settings.consume else "ingress"

    # ----------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (new messages are refused)."""
        return self._closed

    @property
    def runs_messages(self) -> bool:
        """Whether this process runs messages (``consume``), or only admits them."""
        return self.settings.consume

    @property
    def in_flight(self) -> int:
        """Replies this process waits for, plus messages its consumers are running."""
        return len(self._waiters) + len(self._busy_partitions)

    def session_id_for(self, platform: str, chat_id: str) -> str:
        """The session id of a conversation (the same in every process of the install)."""
        return self.local.session_id_for(platform, chat_id)

    async def lease(self, name: str) -> NatsLease:
        """The lease that lets one process at a time run the platform ``name``.

        :raises GatewayError: the broker refuses the leases' bucket.
        """
        assert self._js is not None, "start() the bus first"
        if self._leases_kv is None:
            try:
                self._leases_kv = await self._js.create_key_value(KeyValueConfig(
                    bucket=f"{self.settings.stream}_LEASES", history=1,
                    ttl=self.settings.lease_ttl_s))
            except nats.js.errors.APIError as exc:
                raise GatewayError(
                    f"the nats bus cannot set up its leases: {exc.description}") from exc
        lease = NatsLease(self._leases_kv, name, self.ingress_id, self.settings.lease_ttl_s)
        self._leases.append(lease)
        return lease

    async def _bucket(self, suffix: str, ttl_s: float) -> KeyValue:
        """The key-value bucket ``<stream>_<suffix>``, made with ``ttl_s`` if it is new.

        One made before with another ttl (a changed setting) is used as it is:
        its entries expire after the old ttl until it is removed.
        """
        assert self._js is not None, "start() the bus first"
        name = f"{self.settings.stream}_{suffix}"
        try:
            return await self._js.create_key_value(KeyValueConfig(
                bucket=name, history=1, ttl=ttl_s))
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != _STREAM_EXISTS:
                raise
            log_event(log, logging.WARNING, "bucket_config_differs", bucket=name,
                      ttl_s=ttl_s)
            return await self._js.key_value(name)

    # -------------------------------------------------------------- presence

    @property
    def connected(self) -> bool:
        """Whether the connection to the broker is up now (not reconnecting, not closed)."""
        return self._nc is not None and self._nc.is_connected

    @property
    def running(self) -> int:
        """Messages this process's consumers are running (or holding for a run slot)."""
        return len(self._busy_partitions)

    def presence(self) -> dict[str, Any]:
        """What this process announces in ``<stream>_PROCESSES`` (``lich cluster status``)."""
        return {
            "id": self.ingress_id,
            "role": self.role,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "concurrency": self.concurrency if self.settings.consume else None,
            "in_flight": self.running,
            "waiting_replies": len(self._waiters),
            "draining": self._closed,
            "renew_s": self.settings.lease_ttl_s / 4,
            "started": self.started_at,
            "last_seen": time.time(),
        }

    async def _announce(self) -> None:
        """Keep this process's entry fresh: every quarter of ``lease_ttl_s``, the entry's ttl.

        A process that dies stops renewing and its entry expires, so what
        ``lich cluster status`` lists was alive within the last ``lease_ttl_s``.
        """
        every = self.presence()["renew_s"]
        while not self._withdrawn.is_set():
            try:
                if self._processes_kv is None:
                    self._processes_kv = await self._bucket("PROCESSES",
                                                            self.settings.lease_ttl_s)
                await self._processes_kv.put(self.ingress_id,
                                             json.dumps(self.presence()).encode())
            except Exception as exc:  # the broker is away: the next round tries again
                reraise_cancel(exc)
                log_event(log, logging.DEBUG, "announce_failed",
                          error=f"{type(exc).__name__}: {exc}")
            if await sleep_or_stop(every, self._withdrawn):
                return

    async def _withdraw(self) -> None:
        """Stop announcing and remove this process's entry (it stopped; it did not die)."""
        if self._announcer is None:
            return
        self._withdrawn.set()
        self._announcer.cancel()
        await asyncio.gather(self._announcer, return_exceptions=True)
        self._announcer = None
        if self._processes_kv is not None and self.connected:
            # (Without a broker the entry simply expires: no wait for a timeout here.)
            with contextlib.suppress(Exception):
                await self._processes_kv.delete(self.ingress_id)

    # --------------------------------------------------------- parked replies

    async def park(self, pending: asyncio.Future[BusReply], session_id: str) -> str:
        """Keep ``pending``'s reply for a status URL that every ingress answers.

        Kept in this process's memory, and in the bucket ``<stream>_REPLIES``
        (entries expire after ``status_ttl_s``): ``pending`` at once (before the
        client is given the URL), the reply when it comes to this process, the
        ingress that admitted the message. Replies cross the broker as messages
        do; the id is unguessable. A bucket write that fails is logged: this
        process still answers the URL.

        The id of a message this process admitted is derived from its admission
        (:meth:`GatewayBus.status_id_for`): when this process dies before the reply
        comes, the worker that ran the message, finding no one to take it, writes it
        under the same id (:meth:`_park_for_lost_ingress`).
        """
        admission = next((a for a, w in self._waiters.items() if w.future is pending), None)
        status_id = park_in(self._parked, pending, None if admission is None
                            else self.local.status_id_for(admission))
        if self._js is None:
            return status_id
        # Awaited: the client may ask another ingress as soon as it has the URL. Failed
        # (the broker is away), the reply is still written when it comes.
        await self._write_parked(status_id, {"status": PENDING, "session_id": session_id})
        task = asyncio.create_task(self._share_parked(status_id, pending, session_id),
                                   name="lich-nats-park")
        self._parking.add(task)
        task.add_done_callback(self._parking.discard)
        return status_id

    async def parked(self, status_id: str) -> ParkedReply:
        """The reply parked under ``status_id`` by this or any other ingress (see :meth:`park`)."""
        local = parked_in(self._parked, status_id, CLOSED_TEXT)
        if local is not None or self._js is None or not is_status_id(status_id):
            return local
        try:
            entry = await (await self._replies_bucket()).get(status_id)
            data = json.loads(entry.value or b"{}")
            if data.get("status") == PENDING:
                return PENDING
            return _reply_from_dict(data["reply"])
        except nats.js.errors.NotFoundError:
            return None  # never parked, or expired
        except Exception as exc:  # the broker is away, or an entry no lich wrote
            log_event(log, logging.WARNING, "parked_reply_unreadable",
                      error=f"{type(exc).__name__}: {exc}")
            return BusReply("unavailable", UNAVAILABLE_TEXT, "")

    async def _replies_bucket(self) -> KeyValue:
        if self._parked_kv is None:
            self._parked_kv = await self._bucket("REPLIES", self.settings.status_ttl_s)
        return self._parked_kv

    async def _write_parked(self, status_id: str, value: Mapping[str, Any]) -> bool:
        try:
            kv = await self._replies_bucket()
            await kv.put(status_id, json.dumps(value, ensure_ascii=False).encode())
        except Exception as exc:
            log_event(log, logging.WARNING, "reply_park_failed",
                      error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    async def _share_parked(self, status_id: str, pending: asyncio.Future[BusReply],
                            session_id: str) -> None:
        """Write the parked reply to the bucket once it came (again for a while if it fails)."""
        await asyncio.wait([pending])
        reply = (BusReply("closed", CLOSED_TEXT, session_id) if pending.cancelled()
                 else pending.result())
        value = {"status": "done", "reply": _reply_to_dict(reply)}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _REPLY_RETRY_S
        delay = 0.1
        while not await self._write_parked(status_id, value):
            if loop.time() + delay > deadline or self._nc is None or self._nc.is_closed:
                return  # logged; this process still answers the URL until it stops
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _reply_subject(self, admission: str) -> str:
        return f"{self.settings.stream}.reply.{self.ingress_id}.{admission}"

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Connect, create (or update) the stream and the partition consumers, subscribe.

        :raises GatewayError: the broker cannot be reached, or refuses the stream
            or a consumer (the message says which and why).
        """
        servers = list(self.settings.servers)
        try:
            self._nc = await nats.connect(
                servers=servers,
                name=f"lich-{self.ingress_id}",
                connect_timeout=self.settings.connect_timeout_s,
                # The first connection tries each server twice, then gives up: a wrong
                # address is an error at start, not a gateway that waits forever.
                allow_reconnect=True,
                max_reconnect_attempts=1,
                reconnect_time_wait=1,
                # No buffering while disconnected: a publish then fails at once (the
                # message is refused, the platform keeps it) instead of reaching the
                # broker later, after its sender was told it was not taken.
                pending_size=0,
                token=self._token or None,
                error_cb=self._on_error,
                disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected,
            )
        except Exception as exc:
            raise GatewayError(
                f"the nats bus cannot reach {', '.join(map(redact_url, servers))}: "
                f"{redact(f'{type(exc).__name__}: {exc}', [self._token])}") from exc
        # Once connected, reconnect for as long as it takes: a broker restart must not
        # end the gateway (nats-py reads this option at each reconnect).
        self._nc.options["max_reconnect_attempts"] = -1
        self._js = self._nc.jetstream(timeout=self.settings.publish_timeout_s)
        try:
            await self._ensure_stream()
            await self._nc.subscribe(f"{self.settings.stream}.reply.{self.ingress_id}.*",
                                     cb=self._on_reply)
            if self.settings.consume:
                await self._nc.subscribe(f"{self.settings.stream}.approval",
                                         cb=self._on_approval)
                await self._start_consumers()
                self.consuming = True
        except BaseException:
            await self._nc.close()
            raise
        self._announcer = asyncio.create_task(self._announce(), name="lich-nats-announce")
        log_event(log, logging.INFO, "nats_bus_ready", stream=self.settings.stream,
                  partitions=self.settings.partitions, consume=self.settings.consume,
                  ingress=self.ingress_id)

    async def _ensure_stream(self) -> None:
        assert self._js is not None
        s = self.settings
        config = StreamConfig(
            name=s.stream,
            subjects=[f"{s.stream}.in.>"],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            # The per-conversation queue limit, kept by the broker for every ingress.
            discard=DiscardPolicy.NEW,
            discard_new_per_subject=True,
            max_msgs_per_subject=self.local.queue_limit,
            duplicate_window=s.duplicate_window_s,
            metadata={_PARTITIONS_KEY: str(s.partitions)},
        )
        try:
            await self._check_partitions()
            try:
                await self._js.add_stream(config)
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != _STREAM_EXISTS:
                    raise
                await self._js.update_stream(config)
        except nats.js.errors.APIError as exc:
            raise GatewayError(
                f"the nats bus cannot set up stream {s.stream!r}: {exc.description}") from exc

    async def _check_partitions(self) -> None:
        """Refuse another P while messages wait (they would change lanes and could overtake
        each other); with the stream empty, drop the consumers of partitions now gone."""
        assert self._js is not None
        s = self.settings
        try:
            info = await self._js.stream_info(s.stream)
        except nats.js.errors.NotFoundError:
            return  # a new stream
        before = (info.config.metadata or {}).get(_PARTITIONS_KEY)
        if before is None or before == str(s.partitions):
            return
        if info.state.messages:
            raise GatewayError(
                f"stream {s.stream!r} was made for {before} partitions and holds "
                f"{info.state.messages} messages; [bus] partitions = {s.partitions} would "
                "reorder them: let the stream empty first (stop the ingresses, keep the "
                "consumers running), or keep partitions at " + before)
        for consumer in await self._js.consumers_info(s.stream):
            name = consumer.name or ""
            prefix = f"{s.stream}_p"
            if name.startswith(prefix) and name[len(prefix):].isdigit() \
                    and int(name[len(prefix):]) >= s.partitions:
                await self._js.delete_consumer(s.stream, name)
        log_event(log, logging.WARNING, "partitions_changed", stream=s.stream,
                  before=before, after=s.partitions)

    async def _start_consumers(self) -> None:
        assert self._js is not None
        s = self.settings
        for partition in range(s.partitions):
            try:
                await self._js.add_consumer(s.stream, partition_consumer_config(s, partition))
                sub = await self._js.pull_subscribe_bind(
                    durable=s.consumer_name(partition), stream=s.stream)
            except nats.js.errors.APIError as exc:
                raise GatewayError(
                    f"the nats bus cannot set up consumer {s.consumer_name(partition)!r}: "
                    f"{exc.description}") from exc
            self._consumers[partition] = asyncio.create_task(
                self._consume(partition, sub), name=f"lich-nats-p{partition}")

    def close(self) -> None:
        """Refuse new messages and stop taking messages from the stream; runs go on."""
        self._closed = True
        self._stopping.set()
        for partition, task in self._consumers.items():
            if partition not in self._busy_partitions:
                # Waiting in a fetch. A message that arrives as it is cancelled is not
                # lost: unacknowledged, it is delivered again after ack_wait.
                task.cancel()

    def cancel_runs(self) -> None:
        """Close, and cancel this process's runs now (they end ``aborted``)."""
        self.close()
        self.local.cancel_runs()

    async def drain(self, grace_s: float) -> bool:
        """Close, let runs finish within ``grace_s``, cancel the rest, disconnect.

        A run cancelled here is handed back (``nak``, no ``turn_end``): the next
        consumer continues it from its transcript and answers its ingress. One this
        process admitted itself ends ``aborted`` as in the in-process bus (recorded,
        acknowledged and the user told): no one could answer it here afterwards.
        Messages waiting in the stream stay there for the next consumer. Replies this
        process waits for from other consumers get what is left of ``grace_s``; those
        still missing then are answered ``closed`` (their messages stay in the stream
        and run later).
        """
        self.close()
        if self._drained:
            return True
        self._drained = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        clean = await self.local.drain(grace_s)
        tasks = list(self._consumers.values())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._replies:
            # Replies of the turns that ran here, on their way to other ingresses.
            await asyncio.wait(set(self._replies), timeout=_REPLY_GRACE_S)
        if self._waiters:
            # Replies of messages run elsewhere: within what is left of the grace period.
            clean = await self._wait_replies(deadline - loop.time()) and clean
        for admission, waiter in list(self._waiters.items()):
            del self._waiters[admission]
            if not waiter.future.done():
                waiter.future.set_result(BusReply("closed", CLOSED_TEXT, waiter.session_id))
        if self._parking:
            # The closed answers of the waiters just given up, for the other ingresses.
            await asyncio.wait(set(self._parking), timeout=self.settings.publish_timeout_s)
        for lease in self._leases:
            await lease.release()  # a standby takes over now, not after the ttl
        await self._withdraw()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
        log_event(log, logging.INFO, "nats_bus_stopped", clean=clean)
        return clean

    async def _wait_replies(self, timeout_s: float) -> bool:
        pending = [w.future for w in self._waiters.values() if w.uncertain_until is None]
        if not pending or timeout_s <= 0:
            return not pending
        _, late = await asyncio.wait(pending, timeout=timeout_s)
        return not late

    # ------------------------------------------------------------ connection

    async def _on_error(self, exc: Exception) -> None:
        log_event(log, logging.WARNING, "nats_error",
                  error=redact(f"{type(exc).__name__}: {exc}", [self._token]))

    async def _on_disconnected(self) -> None:
        log_event(log, logging.WARNING, "nats_disconnected")

    async def _on_reconnected(self) -> None:
        log_event(log, logging.INFO, "nats_reconnected")

    # ---------------------------------------------------------------- ingress

    async def submit(
        self,
        message: InboundMessage,
        *,
        on_event: EventHandler | None = None,
        notify: Notify | None = None,
    ) -> asyncio.Future[BusReply]:
        """Publish ``message``; return once the broker stored it, with its reply to await.

        Refused messages (``busy``, ``closed``, ``unavailable``) and duplicates
        (``duplicate``, or the reply already received) have a future already done.
        ``notify`` stays with this process: the worker running the message asks it to
        send its approval requests to the chat. An ``/approve`` or ``/deny`` is not
        published (the run it answers holds its partition): it goes to the process
        whose run waits for it (:meth:`_answer_approval`).
        """
        session_id = self.session_id_for(message.platform, message.chat_id)
        command = APPROVAL_COMMAND.match(message.text.strip())
        if command is not None:
            return _done(await self._answer_approval(message, command.group(2), session_id))
        if self._closed or self._js is None:
            return _done(BusReply("closed", CLOSED_TEXT, session_id))
        admission = (admission_token(message.platform, message.chat_id, message.message_id)
                     if message.message_id else "g" + secrets.token_hex(16))
        self._forget_uncertain()
        waiting = self._waiters.get(admission)
        if waiting is not None:  # the same message again while its first copy runs
            if on_event is not None:
                waiting.handlers.append(on_event)
            if waiting.uncertain_until is not None:
                # Its publish timed out: publish again (the broker drops it if it has it).
                del self._waiters[admission]
                return await self._publish(message, admission, session_id, waiting)
            return waiting.future
        if admission in self._recent:
            return _done(self._recent[admission])
        future: asyncio.Future[BusReply] = asyncio.get_running_loop().create_future()
        return await self._publish(message, admission, session_id,
                                   _Waiter(future, session_id, on_event, notify))

    async def _publish(self, message: InboundMessage, admission: str, session_id: str,
                       waiter: _Waiter) -> asyncio.Future[BusReply]:
        assert self._js is not None
        future = waiter.future
        waiter.uncertain_until = None
        # Before the publish: the reply may come back before the publish's own answer.
        self._waiters[admission] = waiter
        partition = partition_of(message.platform, message.chat_id, self.settings.partitions)
        body = {
            "platform": message.platform,
            "chat_id": message.chat_id,
            "user_id": message.user_id,
            "text": message.text,
            "message_id": message.message_id,
            "admission": admission,
            "reply_to": self._reply_subject(admission),
            "events": bool(waiter.handlers),
            "notify": waiter.notify is not None,  # the worker's approvals can ask the chat
        }
        fields = {"platform": message.platform, "chat": message.chat_id,
                  "admission": admission, "partition": partition}
        refusal: BusReply | None = None
        try:
            ack = await self._js.publish(
                self.settings.subject(partition,
                                      conversation_token(message.platform, message.chat_id)),
                json.dumps(body, ensure_ascii=False).encode(),
                timeout=self.settings.publish_timeout_s,
                stream=self.settings.stream,
                headers={"Nats-Msg-Id": admission},
            )
        except nats.js.errors.APIError as exc:
            if exc.err_code == _PER_SUBJECT_FULL:
                log_event(log, logging.WARNING, "busy", **fields,
                          limit=self.local.queue_limit)
                refusal = BusReply("busy", BUSY_TEXT, session_id)
            else:
                log_event(log, logging.ERROR, "publish_refused", **fields,
                          error=exc.description or str(exc))
                refusal = BusReply("unavailable", UNAVAILABLE_TEXT, session_id)
        except nats.errors.MaxPayloadError:
            # Sending it again cannot help: say so rather than "try again".
            log_event(log, logging.WARNING, "message_too_large", **fields,
                      limit=self._nc.max_payload if self._nc is not None else None)
            refusal = BusReply("error", TOO_LARGE_TEXT, session_id)
        except Exception as exc:  # no connection, no stream, no answer: not admitted
            log_event(log, logging.ERROR, "publish_failed", **fields,
                      error=redact(f"{type(exc).__name__}: {exc}", [self._token]))
            if isinstance(exc, TimeoutError | nats.errors.TimeoutError):
                # Sent, but unanswered: it may be stored. Keep the waiter (the reply
                # still comes to it); the platform is told to send it again, and its
                # retry, a duplicate for the broker, joins this waiter.
                waiter.uncertain_until = (asyncio.get_running_loop().time()
                                          + self.settings.duplicate_window_s)
                return _done(BusReply("unavailable", UNAVAILABLE_TEXT, session_id))
            refusal = BusReply("unavailable", UNAVAILABLE_TEXT, session_id)
        else:
            if ack.duplicate:
                # The broker has it from an earlier admission (another process's, or
                # this one's before a restart): whoever admitted it gets the reply.
                log_event(log, logging.INFO, "duplicate", **fields, seq=ack.seq)
                refusal = BusReply("duplicate", DUPLICATE_TEXT, session_id)
            else:
                log_event(log, logging.INFO, "message_in", **fields, user=message.user_id,
                          chars=len(message.text), seq=ack.seq)
        if refusal is not None:
            if self._waiters.get(admission) is waiter:
                del self._waiters[admission]
            if not future.done():
                future.set_result(refusal)
        return future

    def _forget_uncertain(self) -> None:
        """Drop the waiters of timed-out publishes once no retry can join them."""
        now = asyncio.get_running_loop().time()
        for admission, waiter in list(self._waiters.items()):
            if waiter.uncertain_until is not None and waiter.uncertain_until < now:
                del self._waiters[admission]

    async def handle(
        self,
        message: InboundMessage,
        *,
        on_event: EventHandler | None = None,
        notify: Notify | None = None,
    ) -> BusReply:
        """:meth:`submit`, then wait for the reply (``on_event`` gets the run's events)."""
        return await (await self.submit(message, on_event=on_event, notify=notify))

    async def _on_reply(self, msg: Msg) -> None:
        admission = msg.subject.rsplit(".", 1)[-1]
        if msg.reply and msg.data.startswith(_NOTIFY_PREFIX):
            # A worker's approval request for the chat: answered once it is sent (or not),
            # in a task of its own (a platform's send must not hold up the replies).
            self._in_background(self._send_to_chat(msg, self._waiters.get(admission)),
                                "lich-nats-notify")
            return
        if msg.reply:
            # Received: the sender stops sending it again (also for one we no longer
            # wait for, or a duplicate of one that came already).
            with contextlib.suppress(Exception):
                await msg.respond(b"")
        waiter = self._waiters.get(admission)
        if waiter is None:
            return  # answered already, or a reply for a waiter that gave up
        try:
            data = json.loads(msg.data)
            if data.get("type") == "event":
                envelope = _envelope_from_dict(data["envelope"])
                for handler in list(waiter.handlers):
                    handler(envelope)
                return
            reply = _reply_from_dict(data["reply"])
        except Exception as exc:  # a malformed reply must not take the subscription down
            log_event(log, logging.ERROR, "reply_unreadable", admission=admission,
                      error=f"{type(exc).__name__}: {exc}")
            return
        self._resolve(admission, reply)

    async def _send_to_chat(self, msg: Msg, waiter: _Waiter | None) -> None:
        """Send a worker's text to the chat of the message ``waiter`` waits for; answer
        ``sent``, or nothing-sent (no waiter, or no way to the chat: the worker's
        approver then cannot ask, and the call is denied)."""
        sent = False
        if waiter is not None and waiter.notify is not None:
            try:
                await waiter.notify(str(json.loads(msg.data)["text"]))
                sent = True
            except Exception as exc:  # the platform is away: the worker is told
                log_event(log, logging.WARNING, "notify_failed",
                          error=f"{type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):
            await msg.respond(_SENT if sent else b"")

    async def _answer_approval(self, message: InboundMessage, request_id: str | None,
                               session_id: str) -> BusReply:
        """The answer to an ``/approve`` or ``/deny``: from this process when the request
        waits here, else from the worker whose run waits for it (the one that answers
        the broadcast on ``<stream>.approval``; the others hold no such request and stay
        silent). No one answering: this process's own words for an unknown id."""
        local = self.local.approvals
        nc = self._nc
        if (request_id and not local.holds(request_id) and nc is not None
                and nc.is_connected):
            body = json.dumps({"platform": message.platform, "chat_id": message.chat_id,
                               "user_id": message.user_id, "text": message.text},
                              ensure_ascii=False).encode()
            try:
                answer = await nc.request(f"{self.settings.stream}.approval", body,
                                          timeout=self.settings.publish_timeout_s)
                return BusReply("approval", answer.data.decode(), session_id)
            except Exception as exc:  # no worker holds the request (or none is there)
                reraise_cancel(exc)
        return BusReply("approval", local.answer(message) or "", session_id)

    async def _on_approval(self, msg: Msg) -> None:
        """An ``/approve`` or ``/deny`` another ingress received: answered here only if
        the request it names waits in this process."""
        try:
            data = json.loads(msg.data)
            message = InboundMessage(str(data["platform"]), str(data["chat_id"]),
                                     str(data["user_id"]), str(data["text"]))
        except Exception as exc:
            log_event(log, logging.ERROR, "approval_unreadable",
                      error=f"{type(exc).__name__}: {exc}")
            return
        approvals = self.local.approvals
        command = APPROVAL_COMMAND.match(message.text.strip())
        if msg.reply and command is not None and command.group(2) \
                and approvals.holds(command.group(2)):
            with contextlib.suppress(Exception):
                await msg.respond((approvals.answer(message) or "").encode())

    def _ingress_notify(self, nc: Client, reply_to: str) -> Notify:
        """How a run of a message admitted elsewhere sends to its chat: through the
        ingress that admitted it (:meth:`_send_to_chat`), which holds the platform's
        send. It raises when that ingress does not send it: the approver then fails,
        and the core denies the call."""

        async def notify(text: str) -> None:
            body = json.dumps({"type": "notify", "text": text}, ensure_ascii=False,
                              separators=(",", ":")).encode()
            answer = await nc.request(reply_to, body, timeout=self.settings.publish_timeout_s)
            if answer.data != _SENT:
                raise GatewayError("the ingress that admitted this message cannot send to "
                                   "its chat")

        return notify

    def _resolve(self, admission: str, reply: BusReply) -> None:
        """Answer the waiter of ``admission`` and remember the reply for a late duplicate."""
        waiter = self._waiters.pop(admission, None)
        self._recent[admission] = reply
        while len(self._recent) > _RECENT_REPLIES:
            self._recent.popitem(last=False)
        if waiter is not None and not waiter.future.done():
            waiter.future.set_result(reply)

    # -------------------------------------------------------------- consumers

    async def _consume(self, partition: int, sub: JetStreamContext.PullSubscription) -> None:
        """Take the partition's messages one at a time until stopped."""
        while not self._stopping.is_set():
            # Ask for a message only with a run slot free: a worker at its concurrency
            # leaves the partitions' messages to the workers that have room.
            while self._slots.locked():
                self._slot_freed.clear()
                await self._slot_freed.wait()
            try:
                msgs = await sub.fetch(1, timeout=_FETCH_S)
            except nats.errors.TimeoutError as exc:
                reraise_cancel(exc)
                continue
            except Exception as exc:  # the broker is away: try again after a pause
                reraise_cancel(exc)
                if self._stopping.is_set():
                    return
                log_event(log, logging.WARNING, "fetch_failed", partition=partition,
                          error=f"{type(exc).__name__}: {exc}")
                if await sleep_or_stop(1.0, self._stopping):
                    return
                continue
            for msg in msgs:
                # Every line logged while it is handled (consumer, agent, plugins, tools,
                # heartbeats) carries its admission id: its Nats-Msg-Id.
                admission = set_admission((msg.headers or {}).get("Nats-Msg-Id"))
                self._busy_partitions.add(partition)
                # From receipt: a message that waits for a slot (another partition's
                # fetch took the last one meanwhile) stays this consumer's.
                heartbeat = asyncio.create_task(self._heartbeat(msg, {"partition": partition}))
                try:
                    async with self._slots:
                        await self._process(partition, msg)
                finally:
                    self._slot_freed.set()
                    heartbeat.cancel()
                    await asyncio.gather(heartbeat, return_exceptions=True)
                    self._busy_partitions.discard(partition)
                    reset_admission(admission)

    async def _process(self, partition: int, msg: Msg) -> None:
        try:
            data = json.loads(msg.data)
            inbound = InboundMessage(str(data["platform"]), str(data["chat_id"]),
                                     str(data["user_id"]), str(data["text"]),
                                     str(data.get("message_id", "")))
            reply_to = str(data["reply_to"])
            admission = str(data["admission"])
        except Exception as exc:
            # Not a message lich published: it can never run; drop it (once, loudly).
            log_event(log, logging.ERROR, "message_unreadable", partition=partition,
                      error=f"{type(exc).__name__}: {exc}")
            await self._ack(msg, {"partition": partition})
            return
        deliveries = msg.metadata.num_delivered
        fields = {"platform": inbound.platform, "chat": inbound.chat_id,
                  "admission": admission, "partition": partition, "delivery": deliveries}
        if deliveries > 1:
            log_event(log, logging.WARNING, "redelivered", **fields)
        # A message this process admitted is answered here directly, not through the
        # broker: the single-process nats gateway pays no reply round trip.
        waiter = (self._waiters.get(admission)
                  if reply_to == self._reply_subject(admission) else None)
        session_id = self.session_id_for(inbound.platform, inbound.chat_id)
        turn: DurableTurn | None = None
        state = await self._read_turn(session_id, admission, fields) if self._durable else None
        if state is not None and state.state in ("answered", "ended"):
            # Also past max_deliver: what is left of an ended turn is its recorded reply
            # (giving up would replace it with an error and a second turn_end).
            await self._finish_recorded(msg, state, session_id, reply_to, waiter, fields)
            return
        if deliveries > self.settings.max_deliver:
            await self._give_up(msg, inbound, reply_to, admission, fields,
                                state.end if state is not None else None)
            return
        if self._durable:
            if state is None:
                # The transcript cannot be read (the store is away): running blind could
                # run the turn twice. Hand it back; after max_deliver it is given up.
                await self._nak(msg, self.settings.heartbeat_every_s)
                return
            # Every writer of the turn claims the conversation only if it is still as
            # read: a consumer that stalled after this read while another took the
            # message over finds itself stale before it writes, runs or sends anything.
            if state.state == "running":
                log_event(log, logging.WARNING, "turn_resumed", **fields,
                          started_calls=len(state.started_calls))
                turn = DurableTurn(admission, resume=state, read_end=state.end)
            else:
                turn = DurableTurn(admission, transcript=state.messages, read_end=state.end)
        forwarder: _EventForwarder | None = None
        on_event: EventHandler | None = None
        if waiter is not None:
            if waiter.handlers:
                handlers = waiter.handlers

                def on_event(envelope: Envelope) -> None:
                    for handler in list(handlers):
                        handler(envelope)
        elif data.get("events") and self._nc is not None:
            forwarder = on_event = _EventForwarder(self._nc, reply_to)
        notify: Notify | None = None
        if waiter is not None:
            notify = waiter.notify
        elif data.get("notify") and self._nc is not None:
            notify = self._ingress_notify(self._nc, reply_to)
        try:
            reply = await self.local.handle(inbound, on_event=on_event, notify=notify,
                                            turn=turn)
        finally:
            if forwarder is not None:
                await forwarder.close()
        if turn is not None and turn.stale and not turn.started:
            # Lost before the run began (the /new reset's claim found the conversation
            # changed): neither handed back (another consumer has the message) nor sent.
            log_event(log, logging.WARNING, "turn_lost", **fields)
            return
        if reply.kind == "closed" or (reply.kind == "aborted" and waiter is None):
            # This process stopped before the turn began ("closed"), or while it ran
            # (cancelled at shutdown: "aborted", no turn_end written): hand it back, at
            # once, to the next consumer, which continues it from its transcript and
            # answers the ingress that waits for it. A message this process admitted
            # itself has nobody left to answer once it stops: that turn ends "aborted"
            # (recorded and answered below), as in the single-process gateway.
            log_event(log, logging.INFO, "handed_back", **fields, reply=reply.kind)
            await self._nak(msg)
            return
        # The order that loses nothing and duplicates least (docs/cluster.md, "Durable
        # turns"): turn_end is stored before the reply leaves, so a consumer dying after it
        # has the reply resent, not the turn run again; reply_sent is stored once the
        # ingress confirmed it has the reply, and only then is the message acknowledged, so
        # a consumer dying before the ack has nothing sent again. What remains: dying
        # between the ingress's confirmation and reply_sent resends a reply the ingress
        # already has (it answers each admission once, so the user does not see it twice).
        if turn is not None and turn.started:
            await turn.end(reply.kind, reply.text)
        if turn is not None and turn.stale:
            # Another consumer claimed the conversation (this one stalled past ack_wait;
            # found by a claim, a write during the run or turn_end's): the message is the
            # other one's now. Nothing is sent or acknowledged from here.
            log_event(log, logging.WARNING, "turn_lost", **fields)
            return
        delivered = await self._deliver(admission, reply_to, reply, waiter, fields)
        if delivered and turn is not None and turn.started:
            await turn.reply_sent()
        await self._ack(msg, fields)

    @property
    def _durable(self) -> bool:
        """Whether turns are durable: there is a transcript to record them in."""
        return self.local.agent.config.persist_sessions

    async def _read_turn(self, session_id: str, admission: str,
                         fields: Mapping[str, Any]) -> TurnRecords | None:
        """What the conversation's transcript says of ``admission`` (``None``: unreadable)."""
        sessions = self.local.agent.sessions

        def read() -> TurnRecords:
            if not sessions.exists(session_id):
                # Nothing to read: a conditional claim then requires the session empty.
                return find_turn((), admission, end=0 if sessions.fenced else None)
            contents = sessions.read(session_id)
            return find_turn(contents.records, admission, contents.messages, contents.end)

        try:
            return await asyncio.to_thread(read)
        except (OSError, ValueError) as exc:
            log_event(log, logging.ERROR, "session_unreadable", **fields, session=session_id,
                      error=f"{type(exc).__name__}: {exc}")
            return None

    async def _finish_recorded(self, msg: Msg, state: TurnRecords, session_id: str,
                               reply_to: str, waiter: _Waiter | None,
                               fields: Mapping[str, Any]) -> None:
        """A message whose turn ended already (a redelivery, or the same message admitted
        again): its recorded reply is sent when it may not have been, never run again."""
        assert state.reply is not None
        if state.reply_sent:
            # Answered before. Nothing for the user (no text: platforms send nothing);
            # an ingress that admitted this copy anew stops waiting for it, and one that
            # does not wait (a redelivery of what it answered) drops it.
            log_event(log, logging.INFO, "reply_already_sent", **fields)
            await self._ack(msg, fields)
            await self._deliver(state.admission, reply_to,
                                BusReply("duplicate", "", session_id), waiter, fields)
            return
        run_id = state.reply.get("run_id")
        reply = BusReply(str(state.reply["kind"]), str(state.reply.get("text", "")),  # type: ignore[arg-type]
                         session_id, None, run_id if isinstance(run_id, str) else None)
        sessions = self.local.agent.sessions
        writer = sessions.open(session_id)
        if state.end is not None and isinstance(writer, ConditionalWriter):
            # Claimed on the read before the reply goes out: a consumer that stalled after
            # its read while another resent the reply (and maybe went on to the next
            # message) sends nothing, and takes nothing from the other.
            writer.claim_after(state.end)
            try:
                await asyncio.to_thread(writer.claim)
            except StaleWriter:
                log_event(log, logging.WARNING, "turn_lost", **fields)
                return
            except OSError:
                pass  # the store is away: the reply still goes (its reply_sent fails)
        log_event(log, logging.WARNING, "reply_resent", **fields, reply=reply.kind)
        if await self._deliver(state.admission, reply_to, reply, waiter, fields):
            await self._record_reply_sent(writer, state.admission, fields)
        await self._ack(msg, fields)

    async def _record_reply_sent(self, writer: TranscriptWriter, admission: str,
                                 fields: Mapping[str, Any]) -> None:
        """``reply_sent`` for a reply sent without its turn's run (resent, or a given-up
        message's): ``writer`` is the consumer's own, claimed or fresh; closed here."""

        def record() -> None:
            try:
                writer.append("meta", event=REPLY_SENT, admission=admission)
            finally:
                writer.close()

        try:
            await asyncio.to_thread(record)
        except OSError as exc:
            log_event(log, logging.ERROR, "reply_sent_unrecorded", **fields,
                      error=f"{type(exc).__name__}: {exc}")

    async def _deliver(self, admission: str, reply_to: str, reply: BusReply,
                       waiter: _Waiter | None, fields: Mapping[str, Any]) -> bool:
        """Hand ``reply`` to the ingress that admitted its message; whether it confirmed.

        A waiter of this process is answered directly. Another ingress gets a request it
        answers, sent again while it does not, for up to ``_REPLY_INLINE_S`` while the
        partition waits; an ingress still silent then (gone, or reconnecting) gets the
        rest of ``_REPLY_RETRY_S`` in the background — and for a while, replies to it go
        there at once, so a dead ingress does not hold up a partition per message.
        """
        if waiter is not None:
            self._resolve(admission, reply)
            return True
        nc = self._nc
        if nc is None:
            return False
        body = json.dumps({"type": "reply", "reply": _reply_to_dict(reply)},
                          ensure_ascii=False).encode()
        loop = asyncio.get_running_loop()
        ingress = reply_to.rsplit(".", 2)[-2] if reply_to.count(".") >= 2 else reply_to
        parked = False

        def park_for_status_url() -> None:
            # At the first answer missed, not after the retries: a client polling the
            # status URL of a message whose ingress died gets the reply from another.
            nonlocal parked
            if not parked:
                parked = True
                self._in_background(self._park_for_lost_ingress(admission, reply, fields),
                                    "lich-nats-park-lost")

        now = loop.time()
        if self._unreachable.get(ingress, 0.0) <= now:
            if await self._request_reply(nc, reply_to, body, now + _REPLY_INLINE_S,
                                         on_failure=park_for_status_url):
                self._unreachable.pop(ingress, None)
                return True
            self._unreachable[ingress] = loop.time() + _REPLY_RETRY_S
            while len(self._unreachable) > _RECENT_REPLIES:
                self._unreachable.pop(next(iter(self._unreachable)))
        park_for_status_url()
        self._in_background(self._deliver_reply(nc, reply_to, body, fields), "lich-nats-reply")
        return False

    def _in_background(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` as a task that :meth:`drain` waits for (up to ``_REPLY_GRACE_S``)."""
        task = asyncio.create_task(work, name=name)
        self._replies.add(task)
        task.add_done_callback(self._replies.discard)

    async def _park_for_lost_ingress(self, admission: str, reply: BusReply,
                                     fields: Mapping[str, Any]) -> None:
        """Answer the status URL of a message whose ingress does not take its reply.

        The ingress that admitted the message parked it as pending under an id derived
        from its admission (:meth:`park`). Written here as done — only while it is still
        pending: compare-and-set on the entry's revision — any ingress answers the URL
        with it. A message given no status URL has no entry, and nothing is written.
        """
        status_id = self.local.status_id_for(admission)
        value = {"status": "done", "reply": _reply_to_dict(reply)}
        try:
            kv = await self._replies_bucket()
            entry = await kv.get(status_id)
            if json.loads(entry.value or b"{}").get("status") != PENDING:
                return
            await kv.update(status_id, json.dumps(value, ensure_ascii=False).encode(),
                            last=entry.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return  # the ingress wrote it meanwhile: it took the reply after all
        except nats.js.errors.NotFoundError:
            return  # no status URL was given for this message (or it expired)
        except Exception as exc:
            log_event(log, logging.WARNING, "reply_park_failed", **fields,
                      error=f"{type(exc).__name__}: {exc}")
            return
        log_event(log, logging.INFO, "reply_parked_for_status_url", **fields)

    async def _request_reply(self, nc: Client, reply_to: str, body: bytes,
                             deadline: float,
                             on_failure: Callable[[], None] | None = None) -> bool:
        """Send the reply until the ingress answers or ``deadline``; whether it answered.
        ``on_failure`` is called when the first try goes unanswered."""
        loop = asyncio.get_running_loop()
        delay = 0.1
        while True:
            try:
                await nc.request(reply_to, body, timeout=min(
                    self.settings.publish_timeout_s, max(0.1, deadline - loop.time())))
                return True
            except Exception as exc:  # no responder yet, timeout, reconnecting
                reraise_cancel(exc)
                if on_failure is not None:
                    on_failure()
                    on_failure = None
                if loop.time() + delay > deadline or nc.is_closed:
                    return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _heartbeat(self, msg: Msg, fields: Mapping[str, Any]) -> None:
        """Tell the broker the turn is alive, so it keeps the message past ``ack_wait``."""
        while True:
            await asyncio.sleep(self.settings.heartbeat_every_s)
            try:
                await msg.in_progress()
                self.heartbeats += 1
            except Exception as exc:
                reraise_cancel(exc)
                log_event(log, logging.WARNING, "heartbeat_failed", **fields,
                          error=f"{type(exc).__name__}: {exc}")

    async def _nak(self, msg: Msg, delay: float | None = None) -> None:
        """Hand the message back to the next consumer (``delay``: not before then).

        Flushed: a stopping process closes its connection next, and a nak still in
        its buffer then would leave the message to ``ack_wait`` instead.
        """
        try:
            await msg.nak(delay=delay)
            if self._nc is not None:
                await self._nc.flush(timeout=max(1, round(self.settings.publish_timeout_s)))
        except Exception as exc:  # the broker redelivers it after ack_wait all the same
            log_event(log, logging.WARNING, "nak_failed",
                      error=f"{type(exc).__name__}: {exc}")

    async def _ack(self, msg: Msg, fields: Mapping[str, Any]) -> None:
        try:
            # Confirmed: once this returns the broker has removed the message (the ingress
            # has its reply already: acknowledged after, so a reply is never lost).
            await msg.ack_sync(timeout=self.settings.publish_timeout_s)
        except Exception as exc:
            # The broker will deliver it again after ack_wait: that turn may run twice.
            log_event(log, logging.ERROR, "ack_failed", **fields,
                      error=f"{type(exc).__name__}: {exc}")

    async def _deliver_reply(self, nc: Client, reply_to: str, body: bytes,
                             fields: Mapping[str, Any]) -> None:
        """The rest of a reply's retries, in the background (the partition moved on)."""
        deadline = asyncio.get_running_loop().time() + _REPLY_RETRY_S - _REPLY_INLINE_S
        if not await self._request_reply(nc, reply_to, body, deadline):
            log_event(log, logging.ERROR, "reply_failed", **fields,
                      error=f"the ingress did not answer within {_REPLY_RETRY_S:g} s")

    async def _give_up(self, msg: Msg, inbound: InboundMessage, reply_to: str,
                       admission: str, fields: Mapping[str, Any],
                       end: int | None = None) -> None:
        """A message that took down (or stalled) ``max_deliver`` consumers: record, answer, drop.

        Its turn ends there: ``delivery_failed`` and a ``turn_end`` with the error reply
        are recorded (a copy admitted again gets that reply, not another attempt), then
        the reply, ``reply_sent`` and the ack follow in the order of any turn. With
        ``end`` (where the read of the turn ended) the records are claimed on it: a
        consumer that stalled after that read, while another took the message over,
        records, sends and acknowledges nothing.
        """
        session_id = self.session_id_for(inbound.platform, inbound.chat_id)
        log_event(log, logging.ERROR, "delivery_failed", **fields, session=session_id,
                  max_deliver=self.settings.max_deliver)
        reply = BusReply("error", GAVE_UP_TEXT.format(n=self.settings.max_deliver), session_id)
        agent = self.local.agent
        recorded = False
        if agent.config.persist_sessions:
            def record() -> None:
                writer = agent.sessions.open(session_id)
                DurableTurn(admission, read_end=end).fence(writer)
                try:
                    writer.append("meta", event="delivery_failed", source="gateway",
                                  admission=admission, deliveries=fields["delivery"])
                    writer.append("meta", event=TURN_END, admission=admission,
                                  reply={"kind": reply.kind, "text": reply.text,
                                         "run_id": None})
                finally:
                    writer.close()

            try:
                await asyncio.to_thread(record)
                recorded = True
            except StaleWriter:
                log_event(log, logging.WARNING, "turn_lost", **fields)
                return
            except Exception as exc:
                log_event(log, logging.ERROR, "delivery_failure_unrecorded", **fields,
                          error=f"{type(exc).__name__}: {exc}")
        waiter = (self._waiters.get(admission)
                  if reply_to == self._reply_subject(admission) else None)
        if await self._deliver(admission, reply_to, reply, waiter, fields) and recorded:
            await self._record_reply_sent(self.local.agent.sessions.open(session_id),
                                          admission, fields)
        await self._ack(msg, fields)
