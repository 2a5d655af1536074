"""Leases in JetStream's key-value store: one process at a time runs a single-connection adapter.

A Telegram poller (``getUpdates`` allows one reader per bot), a Discord shard or
a Twitch IRC connection must run in exactly one ingress. Each such adapter
holds a lease — a key in the bucket ``<stream>_LEASES``, whose entries expire
after ``lease_ttl_s`` — and renews it every quarter of that. Another
``lich gateway`` is a hot standby: it tries to create the key every quarter
TTL and takes over once the holder stops renewing (it died) and the key
expired. A holder that cannot renew for half the TTL (the broker is away)
counts the lease as lost and stops its adapter, before the key can expire
and a standby take over, so two processes never poll at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import nats.js.errors

from lich.gateway.formatting import log_event
from lich.nats_bus._cancel import reraise_cancel

if TYPE_CHECKING:
    from nats.js.kv import KeyValue

__all__ = ["NatsLease"]

log = logging.getLogger("lich.gateway")


class NatsLease:
    """The lease on ``key`` for ``owner`` (see the module docstring).

    ``lost`` is set when a held lease is lost; :meth:`acquire` may be called again then.
    """

    def __init__(self, kv: KeyValue, key: str, owner: str, ttl_s: float) -> None:
        self.kv = kv
        self.key = key
        self.owner = owner
        self.ttl_s = ttl_s
        self.lost = asyncio.Event()
        self.held = False
        self._revision = 0
        self._renewer: asyncio.Task[None] | None = None

    async def acquire(self) -> None:
        """Wait until this process holds the lease (cancel the wait to give up)."""
        waiting_logged = False
        while True:
            try:
                self._revision = await self.kv.create(self.key, self.owner.encode())
            except nats.js.errors.KeyWrongLastSequenceError:
                if not waiting_logged:  # another process holds it: stand by
                    log_event(log, logging.INFO, "lease_standby", lease=self.key)
                    waiting_logged = True
            except Exception as exc:  # the broker is away: keep trying
                reraise_cancel(exc)
                log_event(log, logging.WARNING, "lease_unavailable", lease=self.key,
                          error=f"{type(exc).__name__}: {exc}")
            else:
                self.held = True
                self.lost.clear()
                self._renewer = asyncio.create_task(self._renew(), name=f"lich-lease-{self.key}")
                log_event(log, logging.INFO, "lease_acquired", lease=self.key)
                return
            await asyncio.sleep(self.ttl_s / 4)

    async def _renew(self) -> None:
        loop = asyncio.get_running_loop()
        last_ok = loop.time()
        while True:
            await asyncio.sleep(self.ttl_s / 4)
            try:
                self._revision = await self.kv.update(self.key, self.owner.encode(),
                                                      last=self._revision)
                last_ok = loop.time()
                continue
            except nats.js.errors.KeyWrongLastSequenceError:
                reason = "taken by another process"
            except Exception as exc:
                reraise_cancel(exc)
                if loop.time() - last_ok < self.ttl_s / 2:
                    continue  # try again; the key has not expired yet
                reason = f"not renewed for half its ttl ({type(exc).__name__})"
            self.held = False
            log_event(log, logging.WARNING, "lease_lost", lease=self.key, reason=reason)
            self.lost.set()
            return

    async def release(self) -> None:
        """Give the lease up now (a standby takes over without waiting for it to expire)."""
        if self._renewer is not None:
            self._renewer.cancel()
            await asyncio.gather(self._renewer, return_exceptions=True)
            self._renewer = None
        if self.held:
            self.held = False
            with contextlib.suppress(Exception):
                await self.kv.delete(self.key, last=self._revision)
            log_event(log, logging.INFO, "lease_released", lease=self.key)
