"""terminal, attacked from inside: secrets through /proc and fds, escapees, limits.

Every attack is a real command run by the real tool. This machine and CI run
as root, which /proc protections do not stop; what must hold for root is
asserted here, and what holds only for an ordinary user is checked by running
lich as ``nobody`` (or as the current user when it is not root).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from lich.cancel import CancelToken
from lich.secrets import is_secret_name
from lich.testing import async_wait_for, wait_for
from lich_builtin_tools._procs import CallProcesses

from .conftest import Runner, kill_quietly, process_alive, wait_until_dead

# The names issue 14 found reaching the shell, each with a value of its own.
LISTED = {
    "API_KEY": "val-api-key-0001",
    "OPENAI_KEY": "val-openai-key-0002",
    "STRIPE_KEY": "val-stripe-key-0003",
    "TOKEN": "val-token-0004",
    "PRIVATE_KEY": "val-private-key-0005",
    "MY_AUTH": "val-my-auth-0006",
    "AWS_ACCESS_KEY_ID": "val-aws-0007",
    "DATABASE_URL": "postgres://u:val-db-0008@h/db",
    "MYSQL_PWD": "val-mysql-0009",
}


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in LISTED.items():
        monkeypatch.setenv(name, value)
    return LISTED


def test_one_list_of_secret_names() -> None:
    for name in [*LISTED, "GITHUB_TOKEN", "db_password", "X_SECRET_Y", "GITHUBTOKEN",
                 "SENTRY_DSN", "AWS_SECRET_ACCESS_KEY", "SMTP_PASS", "GOOGLE_CREDENTIALS"]:
        assert is_secret_name(name), name
    for name in ["PATH", "HOME", "PWD", "OLDPWD", "SSH_AUTH_SOCK", "KEYBOARD_LAYOUT",
                 "GIT_AUTHOR_NAME", "LANG", "MONKEY", "TERM"]:
        assert not is_secret_name(name), name


async def test_listed_names_never_reach_the_shell(run: Runner, listed: dict[str, str]) -> None:
    # The child's environment, as the shell sees it and as /proc shows it to anyone.
    result = await run("terminal", {"command": "env; tr '\\0' '\\n' < /proc/$$/environ"})
    assert result.ok, result
    for name, value in listed.items():
        assert value not in result.output, name
    assert "PATH=" in result.output  # the environment itself did arrive


async def test_env_get_redacts_the_listed_names(run: Runner, listed: dict[str, str]) -> None:
    result = await run("env_get", {"keys": list(listed), "reveal": True})
    assert result.ok
    for name, value in listed.items():
        assert f"{name}=<redacted: {len(value)} chars>" in result.output
        assert value not in result.output


async def test_no_descriptor_of_lich_is_inherited(run: Runner) -> None:
    # An inheritable descriptor opened in lich (a session file, a socket, a
    # plugin's open file) must not reach the command anyway.
    fd = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:
        # A sleeping child's fds are exactly what the shell passed on (sleep opens none).
        result = await run("terminal", {
            "command": "sleep 30 & p=$!; ls /proc/$p/fd; kill $p"})
    finally:
        os.close(fd)
    assert result.ok, result
    fds = sorted(int(n) for n in result.output.split("[exit")[0].split())
    assert fds == [0, 1, 2]


# Run as an ordinary user: lich (this script) holds a key in its environment and
# runs `terminal`, whose command tries every /proc route into its parent.
_AS_USER = r"""
import asyncio, json, sys
from pathlib import Path
from lich.tools import ToolExecutor, ToolRegistry
from lich.types import ToolCall
from lich_builtin_tools import builtin_tools
from lich.config import LichConfig

work = sys.argv[1]
registry = ToolRegistry()
for item in builtin_tools(LichConfig(work_dir=work, plugins=())):
    registry.register(item)
command = (
    "tr '\\0' '\\n' < /proc/$PPID/environ; echo env-rc=$?; "
    "head -c 64 /proc/$PPID/mem > /dev/null; echo mem-rc=$?; "
    "cat /proc/$PPID/maps > /dev/null; echo maps-rc=$?; "
    "ls /proc/$PPID/fd; echo fd-rc=$?"
)
result = asyncio.run(ToolExecutor(registry, work_dir=Path(work)).execute(
    ToolCall("t1", "terminal", {"command": command, "timeout_ms": 20000})))
print(json.dumps({"output": result.output}))
"""


@pytest.fixture
def user_run() -> Iterator[tuple[list[str], dict[str, object], str]]:
    """How to run :data:`_AS_USER` as an ordinary user: (python, subprocess kwargs, work dir).

    Not root: as ourselves. Root: as ``nobody``, with the first interpreter that user
    can start (a virtualenv under root's home may be out of its reach; the system one
    of the same version then runs with our ``sys.path``).
    """
    work = tempfile.mkdtemp(prefix="lich-user-")
    try:
        kwargs: dict[str, object] = {}
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("nobody")
            except KeyError:
                pytest.skip("running as root with no 'nobody' user to run lich as: "
                            "/proc protections do not stop root")
            kwargs = {"user": "nobody", "group": pwd.getpwnam("nobody").pw_gid}
            shutil.chown(work, "nobody")
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        for python in (sys.executable, shutil.which(version, path="/usr/bin:/usr/local/bin")):
            if python and _starts_lich(python, kwargs, work):
                yield [python], kwargs, work
                return
        pytest.skip("no Python interpreter that can import lich is reachable by 'nobody'")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _user_env(work: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": work,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _starts_lich(python: str, kwargs: dict[str, object], work: str) -> bool:
    try:
        probe = subprocess.run(
            [python, "-c", "import lich_builtin_tools"], capture_output=True,
            env=_user_env(work), cwd=work, timeout=60, **kwargs,  # type: ignore[call-overload]
        )
    except OSError:
        return False
    return probe.returncode == 0


def test_lichs_environment_and_memory_are_unreadable_to_its_commands(
    user_run: tuple[list[str], dict[str, object], str],
) -> None:
    python, kwargs, work = user_run
    key = "sk-user-run-key-4242424242"
    env = {**_user_env(work), "OPENAI_API_KEY": key, "LICH_STRAY": key}
    proc = subprocess.run(
        [*python, "-c", _AS_USER, work], capture_output=True, text=True,
        env=env, cwd=work, timeout=60, **kwargs,  # type: ignore[call-overload]
    )
    assert proc.returncode == 0, proc.stderr
    output = json.loads(proc.stdout.splitlines()[-1])["output"]
    assert key not in output
    for route in ("env", "mem", "maps", "fd"):
        assert f"{route}-rc=0" not in output, (route, output)
    assert "Permission denied" in output


async def test_a_setsid_grandchild_dies_with_a_timed_out_call(run: Runner) -> None:
    work = run.work_dir
    result = await run("terminal", {
        "command": "setsid sleep 600 & echo $! > escapee.pid; sleep 600", "timeout_ms": 1500})
    assert result.error == "timeout"
    pid = int((work / "escapee.pid").read_text())
    try:
        assert wait_until_dead([pid]) == []
    finally:
        kill_quietly([pid])


async def test_a_detached_and_orphaned_grandchild_dies_with_a_timed_out_call(
    run: Runner,
) -> None:
    # The shape that escapes every group kill: a new session, then its parent exits,
    # so init adopts it and nothing links it to the call but what lich recorded.
    work = run.work_dir
    command = ("( setsid sh -c 'echo $$ > escapee.pid; exec sleep 600' & ) ; "
               "while [ ! -s escapee.pid ]; do sleep 0.05; done; sleep 600")
    result = await run("terminal", {"command": command, "timeout_ms": 2000})
    assert result.error == "timeout"
    pid = int((work / "escapee.pid").read_text())
    try:
        assert wait_until_dead([pid]) == []
    finally:
        kill_quietly([pid])


async def test_a_setsid_grandchild_dies_with_a_cancelled_call(run: Runner) -> None:
    work = run.work_dir
    cancel = CancelToken()
    pid_file = work / "escapee.pid"
    call = asyncio.create_task(run("terminal", {
        "command": "setsid sleep 600 & echo $! > escapee.pid; sleep 600"}, cancel=cancel))
    await async_wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                         what="the escapee's pid", interval=0.02)
    pid = int(pid_file.read_text())
    assert process_alive(pid)
    cancel.cancel()
    await call
    try:
        assert wait_until_dead([pid]) == []
    finally:
        kill_quietly([pid])


async def test_a_cancel_while_the_pipes_connect_still_kills_a_setsid_child(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a loaded machine bash can start a setsid child before lich has connected the
    # call's pipes; a cancel in that window must still find it (the call's root is
    # known from the spawn on). The window is held open here: connecting waits for
    # the child's pid file.
    work = run.work_dir
    pid_file = work / "escapee.pid"
    loop_type = type(asyncio.get_running_loop())
    connect = loop_type.connect_read_pipe

    async def slow_connect(self: asyncio.AbstractEventLoop, *args: object) -> object:
        await async_wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                             what="the escapee's pid", interval=0.02)
        await asyncio.sleep(3600)  # the cancel comes while the call is still here
        return await connect(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(loop_type, "connect_read_pipe", slow_connect)
    cancel = CancelToken()
    call = asyncio.create_task(run("terminal", {
        "command": "setsid sleep 600 & echo $! > escapee.pid; sleep 600"}, cancel=cancel))
    await async_wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                         what="the escapee's pid", interval=0.02)
    pid = int(pid_file.read_text())
    assert process_alive(pid)
    cancel.cancel()
    await call
    try:
        assert wait_until_dead([pid]) == []
    finally:
        kill_quietly([pid])


async def test_a_background_job_still_outlives_a_call_that_ends_normally(run: Runner) -> None:
    work = run.work_dir
    result = await run("terminal", {
        "command": "setsid sleep 600 > /dev/null 2>&1 & echo $! > bg.pid"})
    assert result.ok
    pid = int((work / "bg.pid").read_text())
    try:
        assert process_alive(pid)
    finally:
        kill_quietly([pid])
        wait_until_dead([pid])


async def test_process_and_memory_limits_apply(run: Runner) -> None:
    result = await run("terminal", {"command": "ulimit -u; ulimit -v; ulimit -Hu; ulimit -Hv"},
                       settings={"max_processes": 321, "max_memory_mb": 2048})
    assert result.ok, result
    assert result.output.split()[:4] == ["321", str(2048 * 1024), "321", str(2048 * 1024)]
    # The command cannot raise them again.
    raised = await run("terminal", {"command": "ulimit -v unlimited"},
                       settings={"max_memory_mb": 2048})
    assert not raised.ok


async def test_limits_default_to_none_of_lichs_own(run: Runner) -> None:
    # Unset, the command inherits lich's own limits: none is added.
    import resource

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    result = await run("terminal", {"command": "ulimit -v"})
    assert result.ok
    expected = "unlimited" if soft == resource.RLIM_INFINITY else str(soft // 1024)
    assert result.output.split()[0] == expected


async def test_bad_hardening_settings_are_clear_errors(run: Runner) -> None:
    result = await run("terminal", {"command": "true"}, settings={"max_processes": -1})
    assert result.error is not None
    assert result.error.startswith("invalid_setting: $.tools.terminal.max_processes:")
    result = await run("terminal", {"command": "true"}, settings={"protect_process": "no"})
    assert result.error == ("invalid_setting: $.tools.terminal.protect_process: "
                            "expected true or false, got string")


def test_a_recorded_process_is_killed_after_it_clears_its_mark_and_detaches(
    tmp_path: Path,
) -> None:
    # The record's case: an escapee with an empty environment (no mark) whose parent
    # exits, so it is neither below the shell nor marked when the kill comes; it was
    # seen below the shell by an earlier poll, which is all that links it to the call.
    procs = CallProcesses()
    pid_file = tmp_path / "escapee.pid"
    script = (f"env -i setsid sh -c 'echo $$ > {pid_file}; exec sleep 600' & "
              "exec sleep 600")
    shell = subprocess.Popen(["sh", "-c", f"( {script} ) & wait"],
                             env=procs.env(dict(os.environ)), start_new_session=True)
    escapee = 0
    try:
        procs.root = shell.pid
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                 what="the escapee's pid", interval=0.02)
        escapee = int(pid_file.read_text())
        assert escapee in procs.scan(marked=False)  # a poll while it is still below
        # Its parent (the subshell's sleep) goes: init adopts it.
        intermediates = [p for p in procs.seen if p != escapee]
        kill_quietly(intermediates)
        wait_for(lambda: _ppid(escapee) not in intermediates, what="the escapee adopted")
        procs.kill_all()
        assert wait_until_dead([escapee]) == []
    finally:
        kill_quietly([p for p in [escapee, shell.pid] if p])
        shell.wait()


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except OSError:
        return None
