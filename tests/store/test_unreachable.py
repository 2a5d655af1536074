"""A database that cannot be reached at all (down, a wrong port, a host that says
nothing): ``lich sessions list`` is one error line naming why, and returns within
its connect timeout, not after ``reconnect_s`` of retries (that patience is for a
database that restarts under a running process: test_restart.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lich_env import lich_env

from lich.testing.ports import refused_port

# Far beyond the subprocess timeout below: a command that retried for reconnect_s, or
# waited out a connect timeout, would be killed and the test would fail.
PATIENT = "connect_timeout_s = 600\nreconnect_s = 3600\n"


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A loopback port bound but not listening: a connection to it is refused (and no
    other process can take it while the test runs)."""
    with refused_port() as port:
        yield port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


def sessions_list(tmp_path: Path, port: int, settings: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "lich.toml"
    config.write_text('[session_store]\nkind = "postgres"\n'
                      f'dsn = "postgresql://lich@127.0.0.1:{port}/lich"\n{settings}')
    return subprocess.run([sys.executable, "-m", "lich", "--config", str(config), "sessions",
                           "list"], capture_output=True, text=True, timeout=60,
                          env=lich_env(tmp_path), cwd=tmp_path)


def test_a_refused_connection_is_one_error_line_at_once(tmp_path: Path,
                                                       refusing_port: int) -> None:
    proc = sessions_list(tmp_path, refusing_port, PATIENT)

    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("lich: error: session store: listing sessions: ")
    assert f"(postgres lich@127.0.0.1:{refusing_port}/lich) is unreachable" in lines[0]
    assert "refused" in lines[0]  # libpq's reason, not the pool's "couldn't get a connection"


def test_a_server_that_never_answers_is_bounded_by_connect_timeout(
        tmp_path: Path, silent_port: int) -> None:
    proc = sessions_list(tmp_path, silent_port, "connect_timeout_s = 1\nreconnect_s = 3600\n")

    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "is unreachable" in lines[0]
