"""What the chat platforms (telegram, discord, twitch) share: allowlists and in-flight work."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from lich.gateway._format import log_event, redact
from lich.gateway.config import Allowlist
from lich.gateway.registry import AdapterContext

__all__ = ["ChatAdapterBase"]


class ChatAdapterBase:
    """Allowlist checks, the default-deny warning, and tracking of message tasks."""

    name = "chat"

    def __init__(self, context: AdapterContext, allowlist: Allowlist) -> None:
        self.context = context
        self.bus = context.bus
        self.log = context.log
        self.allowlist = allowlist
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.secrets: list[str] = []

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stop.is_set()

    def warn_if_default_deny(self) -> None:
        """Log, at start, that an empty allowlist lets nobody in."""
        if not self.allowlist.configured:
            log_event(
                self.log, logging.WARNING, "default_deny", platform=self.name,
                detail=(
                    f"no allowed_users or allowed_chats in [gateway.{self.name}]: every "
                    "message will be refused until you list who may talk to the bot "
                    '(or set allowed_users = ["*"] to open it to everyone)'
                ),
            )
        elif self.allowlist.open:
            log_event(self.log, logging.WARNING, "allowlist_open", platform=self.name,
                      detail="allowlist contains \"*\": anyone can talk to the bot")

    def allowed(self, user_id: str, chat_id: str, *, explicit: bool = False) -> bool:
        """Check the allowlist, logging a refusal."""
        if self.allowlist.allows(user_id, chat_id, explicit=explicit):
            return True
        log_event(self.log, logging.INFO, "denied", platform=self.name, chat=chat_id,
                  user=user_id, reason="not in allowlist")
        return False

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run one message's handling as a task tracked until it ends."""
        task = asyncio.create_task(self._guard(coro, name), name=f"lich-{self.name}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one message's failure never stops the adapter
            log_event(self.log, logging.ERROR, "handler_failed", platform=self.name, task=name,
                      error=self.redact(f"{type(exc).__name__}: {exc}"))
            self.log.debug("handler %s failed", name, exc_info=True)

    def redact(self, text: str) -> str:
        """``text`` without this adapter's secrets."""
        return redact(text, self.secrets)

    async def wait_tasks(self, timeout_s: float) -> None:
        """Wait for the message tasks (replies being produced and sent), then cancel the rest."""
        if not self._tasks:
            return
        _, late = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in late:
            task.cancel()
        if late:
            log_event(self.log, logging.WARNING, "handlers_cancelled", platform=self.name,
                      count=len(late))
            await asyncio.gather(*late, return_exceptions=True)
