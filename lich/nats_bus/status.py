"""``lich cluster status``: what the broker knows of a nats cluster, and whether the store answers.

Read-only, and cheap: one stream info (with its subjects, to count each
partition's messages), the partition consumers' infos, the two key-value
buckets the processes keep (``<stream>_PROCESSES``: every ingress and worker
renews its entry every quarter of ``lease_ttl_s``; ``<stream>_LEASES``: who
runs each single-connection platform), and one read of the session store.
Nothing is created: a cluster no process has started yet shows an absent
stream. Importing this module imports nats-py (the ``lich-agent[nats]`` extra).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import nats
import nats.errors
import nats.js.errors

from lich.gateway.formatting import redact
from lich.gateway.registry import GatewayError
from lich.nats_bus.settings import NatsBusSettings
from lich.secrets import redact_url

if TYPE_CHECKING:
    from nats.js.client import JetStreamContext

    from lich.sessions import SessionStore

__all__ = ["cluster_status", "gather", "probe_store", "process_state"]

#: The session id a store probe asks about: any valid id; its answer does not matter.
_PROBE_ID = "lich-status-probe"
#: The broker lists consumers in pages of this many.
_CONSUMER_PAGE = 256
#: Renewals a process may miss before it counts as unresponsive, and the seconds of
#: slack on top (a renewal's own latency, a small difference between hosts' clocks).
_MISSED_RENEWALS = 2
_LATE_SLACK_S = 1.0


def process_state(entry: dict[str, Any], now: float, default_renew_s: float) -> str:
    """``serving``, ``draining`` (after SIGTERM), or ``unresponsive``: its entry was not
    renewed for two of its renewal periods (``renew_s``, which it announces; else
    ``default_renew_s``). A process killed without a chance to withdraw its entry
    shows so until the entry expires, not as serving. ``now`` and the entry's
    ``last_seen`` are wall-clock times of different hosts: they assume synced clocks."""
    renew = entry.get("renew_s")
    renew_s = renew if isinstance(renew, int | float) and renew > 0 else default_renew_s
    seen = entry.get("last_seen")
    if isinstance(seen, int | float) and now - seen > _MISSED_RENEWALS * renew_s + _LATE_SLACK_S:
        return "unresponsive"
    return "draining" if entry.get("draining") else "serving"


def probe_store(open_store: Callable[[], SessionStore], timeout_s: float) -> Callable[
        [], dict[str, Any]]:
    """Start a cheap read of the session store in a thread; the returned call waits for it.

    The read (``exists`` of one id: one query for a database store, one ``stat``
    for files) runs in a daemon thread, so a database that never answers costs
    ``timeout_s`` and no hang at exit. The result is ``{"store", "reachable",
    "error"}``.
    """
    result: dict[str, Any] = {"store": None, "reachable": False, "error": None}
    started = time.monotonic()

    def read() -> None:
        try:
            store = open_store()
            result["store"] = store.describe()
            try:
                store.exists(_PROBE_ID)
            finally:
                store.close()
            result["reachable"] = True
        except Exception as exc:  # a configuration error, an unreachable database
            result["error"] = redact(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=read, name="lich-store-probe", daemon=True)
    thread.start()

    def wait() -> dict[str, Any]:
        thread.join(max(0.0, timeout_s - (time.monotonic() - started)))
        if thread.is_alive():
            return {**result, "reachable": False,
                    "error": f"no answer within {timeout_s:g}s"}
        return dict(result)

    return wait


async def _quiet(exc: Exception) -> None:
    """nats-py's error callback: say nothing (the caller reports what failed)."""


async def cluster_status(settings: NatsBusSettings, *, token: str = "") -> dict[str, Any]:
    """What the broker at ``settings.servers`` knows of the cluster (see the module docstring).

    :raises GatewayError: the broker cannot be reached (the message names the servers).
    """
    servers = list(settings.servers)
    try:
        # As the bus connects (allow_reconnect=False makes nats-py wait for ever on
        # a refused connection): each server tried twice, then the error. Its own
        # error callback is quiet: the one error worth a line is the final one.
        nc = await nats.connect(servers=servers, name="lich-cluster-status",
                                connect_timeout=settings.connect_timeout_s,
                                allow_reconnect=True, max_reconnect_attempts=1,
                                reconnect_time_wait=1, token=token or None,
                                error_cb=_quiet)
    except Exception as exc:
        raise GatewayError(
            f"the nats bus cannot reach {', '.join(map(redact_url, servers))}: "
            f"{redact(f'{type(exc).__name__}: {exc}', [token])}") from exc
    try:
        js = nc.jetstream(timeout=settings.publish_timeout_s)
        return {
            "broker": {"url": redact_url(nc.connected_url.geturl()) if nc.connected_url
                       else None,
                       "version": _version(nc)},
            **await _stream(js, settings),
            "processes": _with_states(await _entries(js, f"{settings.stream}_PROCESSES"),
                                      settings.lease_ttl_s / 4),
            "leases": await _leases(js, settings),
        }
    except nats.errors.Error as exc:  # the broker went away, or does not answer JetStream
        raise GatewayError(f"the nats bus at {', '.join(map(redact_url, servers))} did not "
                           f"answer: {redact(f'{type(exc).__name__}: {exc}', [token])}") from exc
    finally:
        await nc.close()


def _version(nc: Any) -> str | None:
    """The broker's version, ``2.15.1``."""
    try:
        v = nc.connected_server_version
        return f"{v.major}.{v.minor}.{v.patch}"
    except (AttributeError, ValueError):  # an odd version string: not worth failing for
        return None


async def _stream(js: JetStreamContext, settings: NatsBusSettings) -> dict[str, Any]:
    """The stream and each partition: its messages and its consumer's counters."""
    name = settings.stream
    try:
        info = await js.stream_info(name, subjects_filter=f"{name}.in.>")
    except nats.js.errors.NotFoundError:
        return {"stream": None, "partitions": []}
    recorded = (info.config.metadata or {}).get("lich_partitions")
    partitions = int(recorded) if recorded and recorded.isdigit() else settings.partitions
    depth = [0] * partitions
    subject = re.compile(rf"^{re.escape(name)}\.in\.(\d+)\.")
    for subj, count in (info.state.subjects or {}).items():
        m = subject.match(subj)
        if m is not None and int(m.group(1)) < partitions:
            depth[int(m.group(1))] += count
    consumers: dict[int, Any] = {}
    prefix = f"{name}_p"
    seen = 0
    while True:
        page = await js.consumers_info(name, offset=seen or None)
        seen += len(page)
        for consumer in page:
            tail = (consumer.name or "").removeprefix(prefix)
            if (consumer.name or "").startswith(prefix) and tail.isdigit():
                consumers[int(tail)] = consumer
        if len(page) < _CONSUMER_PAGE:
            break
    rows = []
    for p in range(partitions):
        c = consumers.get(p)
        rows.append({
            "partition": p,
            "messages": depth[p],
            "consumer": c is not None,
            "pending": c.num_pending if c is not None else None,
            "ack_pending": c.num_ack_pending if c is not None else None,
            "redelivered": c.num_redelivered if c is not None else None,
            "waiting_pulls": c.num_waiting if c is not None else None,
        })
    return {
        "stream": {"name": name, "messages": info.state.messages, "bytes": info.state.bytes,
                   "partitions": partitions},
        "partitions": rows,
    }


async def _bucket(js: JetStreamContext, bucket: str) -> list[tuple[str, bytes]]:
    """The live ``(key, value)`` pairs of a key-value bucket, by key (none when the
    bucket does not exist yet; a key that expired while being read is left out)."""
    try:
        kv = await js.key_value(bucket)
        keys = await kv.keys()
    except (nats.js.errors.BucketNotFoundError, nats.js.errors.NoKeysError):
        return []
    out = []
    for key in sorted(keys):
        try:
            entry = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            continue
        out.append((key, entry.value or b""))
    return out


async def _entries(js: JetStreamContext, bucket: str) -> list[dict[str, Any]]:
    """The live entries of a bucket of JSON values (none when it does not exist yet)."""
    out = []
    for _key, raw in await _bucket(js, bucket):
        try:
            value = json.loads(raw or b"{}")
        except ValueError:
            continue  # not a lich entry
        if isinstance(value, dict):
            out.append(value)
    out.sort(key=lambda e: (str(e.get("role")), str(e.get("host")), e.get("pid") or 0))
    return out


def _with_states(entries: list[dict[str, Any]], renew_s: float) -> list[dict[str, Any]]:
    now = time.time()
    return [{**e, "state": process_state(e, now, renew_s)} for e in entries]


async def _leases(js: JetStreamContext, settings: NatsBusSettings) -> list[dict[str, Any]]:
    """Each single-connection platform's lease and the process holding it."""
    return [{"lease": key, "holder": raw.decode(errors="replace")}
            for key, raw in await _bucket(js, f"{settings.stream}_LEASES")]


async def gather(settings: NatsBusSettings, token: str,
                 store: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """:func:`cluster_status`, with the store probe's answer (started before) added."""
    status = await cluster_status(settings, token=token)
    status["session_store"] = await asyncio.to_thread(store)
    return status
