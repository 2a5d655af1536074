"""`lich demo`: a real run with no network and no keys, in a subprocess."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest
from lich_env import lich_env

from lich.sessions import read_session_file

from .conftest import SCHEMA_PATH, json_lines, run_lich

# Imported by every Python process started with this directory on PYTHONPATH: any
# connection or name lookup that is not loopback fails (and is logged).
NETWORK_GUARD = textwrap.dedent('''
    import os, socket

    _LOG = os.environ["LICH_TEST_NET_LOG"]
    _LOOPBACK = {"127.0.0.1", "::1", "localhost"}


    def _refuse(what):
        with open(_LOG, "a") as f:
            f.write(f"{what}\\n")
        raise OSError(f"network blocked by the test: {what}")


    _connect = socket.socket.connect
    _connect_ex = socket.socket.connect_ex
    _getaddrinfo = socket.getaddrinfo


    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOOPBACK:
            _refuse(f"connect {address}")
        return _connect(self, address)


    def connect_ex(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in _LOOPBACK:
            _refuse(f"connect_ex {address}")
        return _connect_ex(self, address)


    def getaddrinfo(host, *args, **kwargs):
        if host not in _LOOPBACK and host is not None:
            _refuse(f"getaddrinfo {host}")
        return _getaddrinfo(host, *args, **kwargs)


    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    socket.getaddrinfo = getaddrinfo
''')


@pytest.fixture
def offline_env(tmp_path: Path) -> dict[str, str]:
    """A fresh-machine environment: no keys, no LICH_* settings, no pytest, proxies that
    would fail, and a guard that refuses every non-loopback connection."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NETWORK_GUARD, encoding="utf-8")
    # A fresh `pip install -e '.[all]'` has no pytest: the demo must not need it.
    (guard / "pytest.py").write_text(
        "raise ImportError('pytest is not installed on a fresh machine')\n", encoding="utf-8")
    env = lich_env()
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(guard), env.get("PYTHONPATH")])),
        "LICH_TEST_NET_LOG": str(tmp_path / "net.log"),
        "HTTP_PROXY": "http://192.0.2.1:9", "HTTPS_PROXY": "http://192.0.2.1:9",
        "ALL_PROXY": "http://192.0.2.1:9",
        "TMPDIR": str(tmp_path),
    })
    return env


def test_the_network_guard_works(tmp_path: Path, offline_env: dict[str, str]) -> None:
    code = "import socket; socket.create_connection(('192.0.2.1', 80), timeout=1)"
    import subprocess

    proc = subprocess.run([sys.executable, "-c", code], env=offline_env, capture_output=True,
                          text=True, timeout=30)

    assert proc.returncode != 0
    assert "network blocked by the test" in proc.stderr


def test_demo_runs_offline(tmp_path: Path, work: Path, offline_env: dict[str, str]) -> None:
    proc = run_lich("demo", cwd=work, env=offline_env, timeout=90)

    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "net.log").exists(), (tmp_path / "net.log").read_text()
    # The answer streamed to stdout, built from what the tools really did.
    assert "I'll write a file first." in proc.stdout
    assert 'Done. I wrote hello.txt, read it back ("Hello from lich!' in proc.stdout
    assert "hello.txt" in proc.stdout.split("listed the work directory:")[1]
    for tool in ("write_file", "read_file", "list_dir"):
        assert f"tool {tool}(" in proc.stderr
    assert re.search(r"final after 4 turns, [\d,]+ tokens", proc.stderr), proc.stderr
    # It says where the transcript is, and the transcript is there and readable.
    match = re.search(r"transcript: (\S+\.jsonl)", proc.stderr)
    assert match, proc.stderr
    transcript = Path(match.group(1))
    contents = read_session_file(transcript)
    assert contents.problems == ()
    assert contents.records[-1]["stopped_reason"] == "final"
    assert [m.name for m in contents.messages if m.role == "tool"] == [
        "write_file", "read_file", "list_dir"]
    # The file the agent wrote is in the demo's own temporary work dir, not here.
    work_dir = Path(re.search(r"work dir:\s+(\S+)", proc.stderr).group(1))  # type: ignore[union-attr]
    assert (work_dir / "hello.txt").read_text(encoding="utf-8").startswith("Hello from lich!")
    assert work_dir != work
    assert list(work.iterdir()) == []


def test_demo_json_validates(work: Path, offline_env: dict[str, str]) -> None:
    proc = run_lich("demo", "--json", cwd=work, env=offline_env, timeout=90)

    assert proc.returncode == 0, proc.stderr
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    lines = json_lines(proc.stdout)
    for line in lines:
        validator.validate(line)
    ends = [line for line in lines if line["type"] == "tool_call_end"]
    assert [e["call"]["name"] for e in ends] == ["write_file", "read_file", "list_dir"]
    assert all(e["result"]["ok"] for e in ends)
    assert lines[-1]["stopped_reason"] == "final"
