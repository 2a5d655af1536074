"""A worker's liveness and readiness endpoints (``lich worker --health HOST:PORT``).

* ``GET /livez`` — ``200 {"status": "alive", "loop_lag_ms"}`` whenever it is
  answered at all: it is served by the worker's own event loop, so an answer
  means the loop turns (a loop blocked by a stuck call answers nothing, and
  the probe times out). ``loop_lag_ms`` is how late the loop's last tick was.
* ``GET /readyz`` — ``200 {"status": "ready", "draining": false, "checks"}``
  when the worker is connected to the broker, its partition consumers run, the
  session store answered its last read and it is not draining (SIGTERM); else
  ``503 {"status": "not ready", "draining", "reasons": [...], "checks"}``, one
  reason per failing check. ``checks`` maps each check to whether it passes
  (``broker``, ``consumers``, ``store``, ``accepting``); ``draining`` is the
  state itself, true only after SIGTERM. The store is read in a thread every few seconds, not per
  request, so probes cost nothing.

Served by uvicorn (the ``gateway`` extra's starlette and uvicorn), without
signal handling of its own: the worker owns SIGINT and SIGTERM, and keeps
serving these while it drains. The answers name no secret and no
conversation, so any address may be bound (a pod's address for its probes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lich.gateway.formatting import log_event, redact
from lich.gateway.registry import GatewayError
from lich.threads import run_in_daemon_thread

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from lich.nats_bus.bus import NatsBus
    from lich.sessions import SessionStore

__all__ = ["HealthServer"]

log = logging.getLogger("lich.gateway")

#: How often the event loop's lag and the session store are checked.
_TICK_S = 0.5
_STORE_EVERY_S = 5.0
#: How long one store read may take before the store counts as unreachable.
_STORE_TIMEOUT_S = 5.0
_PROBE_ID = "lich-readiness-probe"


class HealthServer:
    """``/livez`` and ``/readyz`` for the worker running ``bus`` on ``store`` (module docstring).

    ``port`` is the bound port once started (useful with port 0).
    """

    def __init__(self, bus: NatsBus, store: SessionStore, host: str, port: int) -> None:
        self.bus = bus
        self.store = store
        self.host = host
        self.port = port
        self._lag_s = 0.0
        # Why the store does not count as reachable (None: its last read answered).
        self._store_problem: str | None = "the session store has not been read yet"
        self._probe: asyncio.Future[Any] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._server: Any = None
        self._serving: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------- checks

    def checks(self) -> dict[str, Any]:
        """Each readiness check: ``True``, or why it fails."""
        bus = self.bus
        return {
            "broker": True if bus.connected else "not connected to the broker",
            "consumers": True if bus.consuming else "the partition consumers are not running",
            "store": True if self._store_problem is None else self._store_problem,
            "accepting": True if not bus.closed else "draining: stopping, takes no messages",
        }

    async def _tick(self) -> None:
        """Measure how late the loop wakes: a busy or blocked loop shows here."""
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(_TICK_S)
            self._lag_s = max(0.0, loop.time() - before - _TICK_S)

    async def _check_store(self) -> None:
        """Read the store every few seconds in a thread; one read at a time."""
        while True:
            if self._probe is None or self._probe.done():
                # A daemon thread: a read stuck on a dead database cannot hold up the exit.
                self._probe = asyncio.ensure_future(
                    run_in_daemon_thread(self.store.exists, _PROBE_ID))
            try:
                await asyncio.wait_for(asyncio.shield(self._probe), _STORE_TIMEOUT_S)
            except TimeoutError:
                # The read goes on in its thread; no second one is started meanwhile.
                self._store_problem = ("the session store is unreachable: no answer within "
                                       f"{_STORE_TIMEOUT_S:g}s")
            except Exception as exc:
                self._store_problem = ("the session store is unreachable: "
                                       + redact(f"{type(exc).__name__}: {exc}"))
            else:
                self._store_problem = None
            await asyncio.sleep(_STORE_EVERY_S)

    # -------------------------------------------------------------------- app

    def build_app(self) -> Any:
        """The starlette application of the two endpoints."""
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def livez(request: Request) -> Response:
            return JSONResponse({"status": "alive", "loop_lag_ms": round(self._lag_s * 1000)},
                                headers={"cache-control": "no-store"})

        async def readyz(request: Request) -> Response:
            checks = self.checks()
            reasons = [v for v in checks.values() if v is not True]
            body: dict[str, Any] = {"status": "not ready" if reasons else "ready",
                                    "draining": self.bus.closed,
                                    "checks": {k: v is True for k, v in checks.items()}}
            if reasons:
                body["reasons"] = reasons
            return JSONResponse(body, status_code=503 if reasons else 200,
                                headers={"cache-control": "no-store"})

        return Starlette(routes=[Route("/livez", livez, methods=["GET"]),
                                 Route("/readyz", readyz, methods=["GET"])])

    # -------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind and serve (the checks begin at once).

        :raises GatewayError: the address cannot be bound, or the server fails to start.
        """
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield  # the worker owns the signals

        try:
            sock = socket.create_server(
                (self.host, self.port),
                family=socket.AF_INET6 if ":" in self.host else socket.AF_INET,
                reuse_port=False)
        except OSError as exc:
            raise GatewayError(f"the health endpoints cannot listen on "
                               f"{self.host}:{self.port}: {exc.strerror or exc}") from exc
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.build_app(), log_config=None, access_log=False,
                                lifespan="off", ws="none", server_header=False,
                                timeout_graceful_shutdown=1)
        self._server = Server(config)
        self._tasks = [asyncio.create_task(self._tick(), name="lich-health-tick"),
                       asyncio.create_task(self._check_store(), name="lich-health-store")]
        self._serving = asyncio.create_task(self._server.serve(sockets=[sock]),
                                            name="lich-health")
        while not self._server.started:
            if self._serving.done():
                sock.close()
                await self._cancel_tasks()
                raise GatewayError(f"the health endpoints failed to start: "
                                   f"{self._serving.exception() or 'server exited'}")
            await asyncio.sleep(0.01)
        log_event(log, logging.INFO, "health_listening", host=self.host, port=self.port)

    async def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def stop(self) -> None:
        """Stop serving (after the worker drained) and the checks."""
        await self._cancel_tasks()
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            with contextlib.suppress(Exception):
                await self._serving
        self._server = self._serving = None
