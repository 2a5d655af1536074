"""The suite's own rules, the ones that keep it green on a loaded machine.

* No example of a Hypothesis test has a deadline (no test asserts a time), and CI's
  profile draws the same examples on every run.
* No port is found "free" by binding port 0, closing the socket and handing the
  number on: someone else may take it in between. :mod:`lich.testing.ports` has the
  two replacements, which these tests also attack with real sockets and processes.
"""

from __future__ import annotations

import ast
import errno
import functools
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lich.testing.ports import refused_port, reserve_port

ROOT = Path(__file__).resolve().parents[1]
# Where tests and their helpers live (lich's own servers listen on what they bind).
SOURCES = [ROOT / "tests", ROOT / "lich" / "testing", ROOT / "bench", ROOT / "plugins_example"]


@functools.cache
def parsed_sources() -> dict[Path, ast.Module]:
    """Every Python file of the project, parsed once for the checks below."""
    files = sorted(p for top in SOURCES for p in top.rglob("*.py")
                   if "zoo" not in p.parts)  # tests/reliability/zoo: invalid on purpose
    return {path: ast.parse(path.read_text(encoding="utf-8")) for path in files}


def test_hypothesis_examples_have_no_deadline_and_ci_is_derandomized() -> None:
    assert settings.default is not None
    assert settings.default.deadline is None
    ci = settings.get_profile("ci")
    assert ci.deadline is None
    assert ci.derandomize
    assert ci.database is None


def test_a_test_with_its_own_settings_inherits_no_deadline() -> None:
    @settings(max_examples=5)
    @given(st.integers())
    def example(n: int) -> None:
        pass

    # A @settings without deadline= takes the loaded profile's (None), not 200 ms.
    chosen = example._hypothesis_internal_use_settings  # type: ignore[attr-defined]
    assert chosen.deadline is None
    assert chosen.max_examples == 5


def test_no_test_sets_a_deadline() -> None:
    offenders = []
    for path, tree in parsed_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "deadline" and not (
                    isinstance(node.value, ast.Constant) and node.value.value is None):
                offenders.append(f"{path.relative_to(ROOT)}:{node.value.lineno}")
    assert offenders == []


def _binds_port_zero_without_listening(tree: ast.AST) -> list[int]:
    """Lines that bind a socket to port 0 in a function that never calls ``listen``:
    the bind-close-hand-on pattern."""
    lines = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        calls = [n for n in ast.walk(function) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute)]
        if any(c.func.attr == "listen" for c in calls):  # type: ignore[attr-defined]
            continue
        for call in calls:
            if call.func.attr == "bind" and call.args and isinstance(  # type: ignore[attr-defined]
                    call.args[0], ast.Tuple) and len(call.args[0].elts) == 2:
                port = call.args[0].elts[1]
                if isinstance(port, ast.Constant) and port.value == 0:
                    lines.append(call.lineno)
    return lines


def test_no_port_is_bound_closed_and_handed_on() -> None:
    allowed = {ROOT / "lich" / "testing" / "ports.py"}
    offenders = []
    for path, tree in parsed_sources().items():
        if path in allowed:
            continue
        offenders += [f"{path.relative_to(ROOT)}:{n}" for n in
                      _binds_port_zero_without_listening(tree)]
    assert offenders == []


def test_the_pattern_check_finds_the_pattern() -> None:
    source = ("import socket\n"
              "def free_port():\n"
              "    with socket.socket() as s:\n"
              "        s.bind(('127.0.0.1', 0))\n"
              "        return s.getsockname()[1]\n"
              "def server():\n"
              "    s = socket.socket()\n"
              "    s.bind(('127.0.0.1', 0))\n"
              "    s.listen()\n")
    assert _binds_port_zero_without_listening(ast.parse(source)) == [4]


def test_a_refused_port_refuses_and_cannot_be_taken_meanwhile() -> None:
    with refused_port() as port:
        with pytest.raises(ConnectionRefusedError), socket.create_connection(
                ("127.0.0.1", port), timeout=5):
            pass
        # Another process cannot start listening there while the test runs.
        other = subprocess.run(
            [sys.executable, "-c",
             "import socket, sys\n"
             "s = socket.socket()\n"
             "try:\n    s.bind(('127.0.0.1', int(sys.argv[1])))\n"
             "except OSError as e:\n    print(e.errno)\n",
             str(port)], capture_output=True, text=True, timeout=60, check=True)
        assert other.stdout.strip() == str(errno.EADDRINUSE)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError):
        return 32768


def test_reserved_ports_differ_across_processes_and_outside_the_kernels_choices() -> None:
    held = [reserve_port() for _ in range(20)]
    try:
        ports = {r.port for r in held}
        assert len(ports) == 20
        if _ephemeral_low() - 10000 >= 2000:
            # Below the ephemeral range: no bind(0) or outgoing connection gets one.
            assert all(10000 <= p < _ephemeral_low() for p in ports)
        # Another process reserving at the same time never gets one of these.
        script = ("from lich.testing.ports import reserve_port\n"
                  "print(' '.join(str(reserve_port().port) for _ in range(200)))\n")
        other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=60, check=True, env={**os.environ})
        assert not ports & {int(p) for p in other.stdout.split()}
        # Each port is free to bind for the child it is for.
        with socket.socket() as child:
            child.bind(("127.0.0.1", held[0].port))
            child.listen()
    finally:
        for reserved in held:
            reserved.release()


def test_a_released_port_can_be_reserved_again() -> None:
    first = reserve_port()
    first.release()
    first.release()  # twice is fine
    again = [reserve_port() for _ in range(5)]
    for reserved in again:
        reserved.release()


class _Item:
    """What the ordering hook reads of a collected test."""

    def __init__(self, path: str, *markers: str) -> None:
        self.path = Path(path)
        self.markers = markers

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def test_the_heaviest_modules_are_handed_out_first() -> None:
    from conftest import pytest_collection_modifyitems

    items = [_Item("a.py"), _Item("b.py"), _Item("b.py", "slow"), _Item("c.py"),
             _Item("d.py", "system"), _Item("d.py"), _Item("e.py")]
    order = list(items)
    pytest_collection_modifyitems(order)  # type: ignore[arg-type]
    # system modules, then those with a slow test, then the rest; within a module (and
    # among modules of one rank) the collection order is kept.
    assert [(str(i.path), i.markers) for i in order] == [
        ("d.py", ("system",)), ("d.py", ()), ("b.py", ()), ("b.py", ("slow",)),
        ("a.py", ()), ("c.py", ()), ("e.py", ())]
