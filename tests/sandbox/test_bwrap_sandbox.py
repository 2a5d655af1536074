"""The sandbox plugin, attacked for real: the system's bubblewrap (installed by .ci/run),
real files, real processes, a real loopback server.

Each escape is tried twice where that says something: once sandboxed (it must fail) and
once through the direct runner (it must work there), so that a test cannot pass because
the attack itself was broken.
"""

from __future__ import annotations

import asyncio
import os
import select
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.config import ConfigError
from lich.processes import DIRECT
from lich.sandbox.bwrap import MIN_VERSION, SandboxError, probe, sandbox_tree
from lich.sandbox.plugin import BwrapRunner
from lich.testing import ScriptedChat, calls_responder, make_test_config, wait_for
from lich.types import ToolCall, ToolMessage

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not sys.platform.startswith("linux"),
    reason="bubblewrap is not installed (.ci/run installs it: apt-get install bubblewrap)")

PLUGIN = "lich.sandbox.plugin"  # by module path: the entry point needs a reinstall
KEY = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
       "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
       "-----END OPENSSH PRIVATE KEY-----\n")
FIXTURE_DIR = Path(__file__).parents[1] / "mcp_client"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake HOME holding an ssh key, as lich's and the commands' HOME."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (work / "notes.txt").write_text("needle here\n")
    return work


def agent_for(work: Path, mode: str = "required", plugins: tuple[str, ...] = (PLUGIN,),
              **sandbox: Any) -> Agent:
    cfg = make_test_config(work, plugins=("builtin_tools", *plugins),
                           sandbox={"mode": mode, **sandbox})
    return Agent(cfg, chat=ScriptedChat([]))


async def terminal(agent: Agent, command: str) -> Any:
    return await agent.executor.execute(
        ToolCall(id="c1", name="terminal", args={"command": command}))


@pytest.fixture
async def sandboxed(work: Path, home: Path) -> Any:
    agent = agent_for(work)
    try:
        assert isinstance(agent.process_runner, BwrapRunner)
        yield agent
    finally:
        await agent.aclose()


@pytest.fixture
async def direct(work: Path, home: Path) -> Any:
    agent = agent_for(work, mode="off")
    try:
        assert agent.process_runner is DIRECT
        yield agent
    finally:
        await agent.aclose()


def test_the_probe_passes_on_this_machine() -> None:
    found = probe()
    assert found.ok, found.reason
    assert found.bwrap == shutil.which("bwrap")
    assert tuple(int(p) for p in (found.version or "").split(".")) >= MIN_VERSION


async def test_an_ssh_key_in_home_cannot_be_read(sandboxed: Agent, direct: Agent,
                                                 home: Path) -> None:
    key = home / ".ssh" / "id_ed25519"
    command = f"cat {key}; cat ~/.ssh/id_ed25519; ls -a ~"
    assert "PRIVATE KEY" in (await terminal(direct, command)).output  # the attack works
    result = await terminal(sandboxed, command)
    assert "PRIVATE KEY" not in result.output
    assert "No such file or directory" in result.output


async def test_a_secret_file_in_the_work_dir_is_masked(sandboxed: Agent, work: Path) -> None:
    (work / ".env").write_text("OPENAI_API_KEY=sk-in-the-dotenv-0123456789\n")
    (work / "deploy").mkdir()
    (work / "deploy" / "server.key").write_text(KEY)
    (work / "link-to-env").symlink_to(work / ".env")
    result = await terminal(sandboxed, "cat .env deploy/server.key link-to-env notes.txt")
    assert "sk-in-the-dotenv" not in result.output
    assert "PRIVATE KEY" not in result.output
    assert "needle here" in result.output  # the rest of the work dir is there
    assert (work / ".env").read_text().startswith("OPENAI_API_KEY")  # untouched


@pytest.fixture
def outside() -> Iterator[tuple[int, str]]:
    """A process started outside any sandbox, a mark in its environment."""
    mark = f"LICH_OUTSIDE_{uuid.uuid4().hex}"
    proc = subprocess.Popen(["sleep", "600"], env={**os.environ, mark: "secret-value"})
    try:
        yield proc.pid, mark
    finally:
        proc.kill()
        proc.wait()


async def test_another_process_environment_is_not_visible(
    sandboxed: Agent, direct: Agent, outside: tuple[int, str],
) -> None:
    pid, mark = outside
    # By its pid, and by any pid: /proc holds only the sandbox's own processes.
    command = (f"cat /proc/{pid}/environ | tr '\\0' '\\n'; "
               f"cat /proc/*/environ | tr '\\0' '\\n' | grep {mark}; "
               f"cat /proc/$PPID/environ /proc/1/environ | tr '\\0' '\\n' | grep {mark}")
    assert mark in (await terminal(direct, command)).output
    result = await terminal(sandboxed, command)
    assert mark not in result.output
    assert "secret-value" not in result.output


async def test_the_launcher_environment_is_not_visible(sandboxed: Agent,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # lich's own environment (an API key the terminal's env does not carry), read from
    # the /proc of the sandbox's parents, as the direct runner lets a command do.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-launcher-secret-0123456789")
    command = "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; echo $OPENAI_API_KEY"
    result = await terminal(sandboxed, command)
    assert "launcher-secret" not in result.output


async def test_writing_outside_the_work_dir_fails(sandboxed: Agent, work: Path,
                                                  tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    result = await terminal(sandboxed, f"echo in > inside.txt; echo out > {outside}/x; "
                                       "echo sys > /etc/lich-sandbox-test; "
                                       f"echo home > $HOME/x; ls {outside}")
    assert (work / "inside.txt").read_text() == "in\n"  # the work dir is writable
    assert not (outside / "x").exists()
    assert not _exists("/etc/lich-sandbox-test")
    assert "Read-only file system" in result.output
    assert not (tmp_path / "home" / "x").exists()


async def test_git_hooks_config_and_lich_dir_are_read_only(sandboxed: Agent,
                                                           work: Path) -> None:
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text("# project config\n")
    result = await terminal(sandboxed, (
        "echo 'touch /tmp/pwned' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; "
        "printf '[core]\\n\\thooksPath = /tmp\\n' >> .git/config; "
        "echo 'mode = \"off\"' > .lich/config.toml; cat .lich/config.toml; "
        "mkdir .lich/x; echo ok > .git/HEAD-test"))
    assert not (work / ".git" / "hooks" / "pre-commit").exists()
    assert "hooksPath" not in (work / ".git" / "config").read_text()
    assert (work / ".lich" / "config.toml").read_text() == "# project config\n"
    assert "project config" not in result.output  # .lich is masked, not only read-only
    assert not (work / ".lich" / "x").exists()
    assert (work / ".git" / "HEAD-test").exists()  # the rest of .git stays writable


async def test_git_cannot_be_renamed_away_and_replaced(sandboxed: Agent, work: Path) -> None:
    """The read-only mounts are inside .git: moving .git would take them along and
    leave room for a fresh .git/hooks."""
    await terminal(sandboxed, "mv .git .git-old; mkdir -p .git/hooks; "
                              "echo evil > .git/hooks/pre-commit; mv .lich .lich-old")
    assert not (work / ".git-old").exists()
    assert not (work / ".git" / "hooks" / "pre-commit").exists()
    assert (work / ".git" / "config").read_text().startswith("[core]")


async def test_missing_git_hooks_and_lich_dirs_cannot_be_created(
    work: Path, home: Path,
) -> None:
    shutil.rmtree(work / ".git" / "hooks")
    agent = agent_for(work)
    try:
        await terminal(agent, "mkdir -p .git/hooks .lich; echo evil > .git/hooks/post-checkout; "
                              "echo 'x = 1' > .lich/config.toml")
    finally:
        await agent.aclose()
    assert not (work / ".git" / "hooks" / "post-checkout").exists()
    assert not (work / ".lich" / "config.toml").exists()


async def test_a_work_dir_inside_the_home_is_there_and_the_rest_of_home_is_not(
    home: Path,
) -> None:
    work = home / "projects" / "app"
    work.mkdir(parents=True)
    (work / "main.py").write_text("print('app')\n")
    (home / ".gitconfig").write_text("[user]\n\tname = someone\n")
    agent = agent_for(work)
    try:
        result = await terminal(agent, "cat main.py; cat ~/.ssh/id_ed25519 ~/.gitconfig; "
                                       "ls -a ~ ~/projects; echo w > written.txt")
    finally:
        await agent.aclose()
    assert "print('app')" in result.output
    assert "PRIVATE KEY" not in result.output
    assert "someone" not in result.output
    assert (work / "written.txt").read_text() == "w\n"


async def test_a_loopback_server_cannot_be_reached(sandboxed: Agent, direct: Agent) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    command = f"echo hello > /dev/tcp/127.0.0.1/{port} && echo CONNECTED"
    try:
        assert "CONNECTED" in (await terminal(direct, command)).output
        server.accept()[0].close()
        result = await terminal(sandboxed, command)
        assert "CONNECTED" not in result.output
        # Nothing is waiting to be accepted: the attempt never reached the server.
        assert select.select([server], [], [], 0)[0] == []
    finally:
        server.close()


def _exists(path: str) -> bool:
    return os.path.lexists(path)


def _pids_with(arg: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if arg.encode() in cmdline:
                found.append(int(entry))
    return found


def test_a_setsid_double_fork_dies_with_the_sandbox(work: Path, home: Path) -> None:
    """Through the runner alone (not the terminal, which reaps its children itself): the
    PID namespace ends with the launch, and everything in it."""
    seconds = f"{600 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    runner = BwrapRunner(shutil.which("bwrap") or "bwrap", work_dir=str(work),
                         profile="workspace-write")
    escape = f"setsid sh -c '(sleep {seconds} &) &'"
    argv = runner.argv(["sh", "-c", f"{escape}; sleep 0.2"], str(work), dict(os.environ))
    done = subprocess.run(argv, cwd=work, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 0
    wait_for(lambda: not _pids_with(seconds), what="the escaped sleep to be gone")
    # And the same escape without the sandbox survives (the attack is real).
    subprocess.run(["sh", "-c", escape], check=True)
    try:
        wait_for(lambda: _pids_with(seconds), what="the unsandboxed sleep to start")
    finally:
        for pid in _pids_with(seconds):
            os.kill(pid, 9)


async def test_no_new_user_namespace_and_no_capability_inside(sandboxed: Agent) -> None:
    result = await terminal(sandboxed, "unshare -U true && echo NESTED; "
                                       "grep CapEff /proc/self/status; "
                                       "mount -t tmpfs none /mnt && echo MOUNTED")
    assert "NESTED" not in result.output
    assert "MOUNTED" not in result.output
    assert "CapEff:\t0000000000000000" in result.output


async def test_the_read_only_profile_writes_nothing_in_the_work_dir(work: Path,
                                                                    home: Path) -> None:
    agent = agent_for(work, profile="read-only")
    try:
        result = await terminal(agent, "cat notes.txt; echo x > new.txt; echo y > /tmp/ok; "
                                       "cat /tmp/ok")
    finally:
        await agent.aclose()
    assert "needle here" in result.output
    assert not (work / "new.txt").exists()
    assert "y" in result.output.splitlines()  # a private /tmp is writable


async def test_grep_and_disk_usage_workers_run_sandboxed(sandboxed: Agent) -> None:
    found = await sandboxed.executor.execute(
        ToolCall(id="g", name="grep_files", args={"pattern": "needle"}))
    assert found.ok, found.error
    assert "notes.txt:1: needle here" in found.output  # the inherited fd still works
    sizes = await sandboxed.executor.execute(
        ToolCall(id="d", name="disk_usage", args={"path": "."}))
    assert sizes.ok, sizes.error
    assert "notes.txt" in sizes.output


def test_an_agent_run_against_the_scripted_model_is_sandboxed(work: Path, home: Path) -> None:
    cfg = make_test_config(work, plugins=("builtin_tools", PLUGIN),
                           sandbox={"mode": "required"})
    chat = ScriptedChat(responder=calls_responder(
        ("terminal", {"command": "cat ~/.ssh/id_ed25519 || echo NO-KEY"}),
        ("terminal", {"command": "echo made > made.txt"})))
    agent = Agent(cfg, chat=chat)
    try:
        result = agent.run_sync("read the key")
    finally:
        asyncio.run(agent.aclose())
    tools = [m.content for m in result.messages if isinstance(m, ToolMessage)]
    assert len(tools) == 2
    assert "NO-KEY" in tools[0]
    assert "PRIVATE KEY" not in tools[0]
    assert (work / "made.txt").read_text() == "made\n"


# ------------------------------------------------------------- fail closed


def _fake_bwrap(bin_dir: Path, version: str, probe_exit: int, said: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "bwrap"
    script.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap {version}';"
                      f" exit 0; fi\necho '{said}' >&2\nexit {probe_exit}\n")
    script.chmod(0o755)
    for tool in ("true", "sh"):
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")


@pytest.mark.parametrize(("setup", "reason"), [
    (None, "bwrap is not installed"),
    (("0.8.0", 1, "bwrap: No permissions to creating new namespace"),
     "bwrap cannot create its namespaces: bwrap: No permissions to creating new namespace"),
    (("0.4.0", 0, ""), "bwrap 0.4.0 is too old (0.8.0 or later is needed"),
])
def test_required_with_a_failing_probe_stops_the_run_with_its_reason(
    work: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    setup: tuple[str, int, str] | None, reason: str,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if setup is not None:
        _fake_bwrap(bin_dir, *setup)
    monkeypatch.setenv("PATH", str(bin_dir))
    marker = work / "ran"
    with pytest.raises(ConfigError) as caught:
        agent_for(work)
    assert "$.sandbox.mode: the sandbox is required but cannot start" in str(
        caught.value)
    assert reason in str(caught.value)
    assert not marker.exists()


def test_auto_with_a_failing_probe_says_so_in_one_line_and_runs_direct(
    work: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with caplog.at_level("WARNING", logger="lich.sandbox"):
        agent = agent_for(work, mode="auto")
    try:
        assert agent.process_runner is DIRECT
    finally:
        asyncio.run(agent.aclose())
    [line] = [r.getMessage() for r in caplog.records if r.name == "lich.sandbox"]
    assert "sandbox unavailable: bwrap is not installed" in line
    assert "\n" not in line


def test_off_and_full_start_no_sandbox(work: Path, home: Path) -> None:
    for mode, profile in (("off", "workspace-write"), ("required", "full")):
        agent = agent_for(work, mode, profile=profile)
        try:
            assert agent.process_runner is DIRECT
        finally:
            asyncio.run(agent.aclose())


def test_bad_settings_are_reported_with_their_path(work: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        agent_for(work, mode="sometimes", profile="open", read_paths="~/.cargo")
    text = str(caught.value)
    assert "$.sandbox.mode" in text
    assert "$.sandbox.profile" in text
    assert "$.sandbox.read_paths" in text


def test_a_work_dir_too_big_to_check_fails_the_start(tmp_path: Path) -> None:
    for i in range(12):
        (tmp_path / f"f{i}").write_text("x")
    with pytest.raises(SandboxError, match="more than 10 entries"):
        sandbox_tree(str(tmp_path), max_entries=10)


async def test_a_sandbox_that_cannot_be_set_up_fails_the_call_closed(
    work: Path, home: Path,
) -> None:
    agent = agent_for(work)
    try:
        agent.process_runner.work_dir = str(work / "gone")  # type: ignore[attr-defined]
        result = await terminal(agent, f"touch {work}/ran")
    finally:
        await agent.aclose()
    assert not result.ok
    assert not (work / "ran").exists()


# ------------------------------------------------------------------- MCP


def _nspids(pid: int) -> list[int]:
    """The pid of ``pid`` in its PID namespace and each one below (innermost last)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:  # gone meanwhile (other tests' processes come and go)
        return []
    for line in lines:
        if line.startswith("NSpid:"):
            return [int(n) for n in line.split()[1:]]
    return []


def _is_python(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve() == Path(sys.executable).resolve()
    except OSError:
        return False


@pytest.fixture
def mcp_servers(work: Path) -> dict[str, Any]:
    pytest.importorskip("mcp", reason="the MCP SDK (lich-agent[mcp]) is not installed")
    return {"fx": {"command": sys.executable, "args": [str(FIXTURE_DIR / "fixture_server.py")],
                  "env": {"FIXTURE_PID_FILE": str(work / "server.pid")},
                  "startup_timeout_s": 60.0}}


async def test_a_stdio_mcp_server_starts_inside_the_sandbox(
    work: Path, home: Path, mcp_servers: dict[str, Any],
) -> None:
    cfg = make_test_config(
        work, plugins=("mcp", PLUGIN), mcp={"servers": mcp_servers},
        sandbox={"mode": "required", "read_paths": [str(FIXTURE_DIR)]})
    agent = Agent(cfg, chat=ScriptedChat([]))
    try:
        echoed = await agent.executor.execute(
            ToolCall(id="m", name="mcp__fx__echo", args={"text": "hello"}))
        assert echoed.ok, echoed.error
        inner_pid = int((work / "server.pid").read_text())
        # The server as the machine sees it: the python (not bwrap) whose innermost pid
        # is the one it wrote, one PID namespace below ours.
        [outer] = [p for p in _pids_with(str(FIXTURE_DIR / "fixture_server.py"))
                   if _is_python(p) and _nspids(p)[-1:] == [inner_pid]
                   and len(_nspids(p)) == 2]
        assert outer != inner_pid  # it saw its own PID namespace's number
        root = Path(f"/proc/{outer}/root")
        assert not (root / home.relative_to("/") / ".ssh").exists()  # its view: no key
    finally:
        await agent.aclose()


async def test_links_out_of_the_work_dir_lead_nowhere(sandboxed: Agent, work: Path,
                                                      home: Path) -> None:
    (work / "innocent.txt").symlink_to(home / ".ssh" / "id_ed25519")
    (work / "homedir").symlink_to(home)
    result = await terminal(sandboxed, "cat innocent.txt homedir/.ssh/id_ed25519; "
                                       f"cat /proc/self/root{home}/.ssh/id_ed25519; "
                                       f"cat /proc/1/root{home}/.ssh/id_ed25519")
    assert "PRIVATE KEY" not in result.output


async def test_a_background_job_ends_with_its_sandboxed_call(sandboxed: Agent) -> None:
    seconds = f"{700 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    result = await terminal(sandboxed, f"sleep {seconds} > /dev/null 2>&1 & echo started")
    assert "started" in result.output
    wait_for(lambda: not _pids_with(seconds), what="the background sleep to be gone")


# ----------------------------------------------- a project cannot loosen the user's


def _user_config(user_config_dir: Path, table: str) -> None:
    (user_config_dir / "lich").mkdir(parents=True, exist_ok=True)
    (user_config_dir / "lich" / "config.toml").write_text(
        f'plugins = ["builtin_tools", "{PLUGIN}"]\n[sandbox]\n{table}\n')


@pytest.mark.parametrize("trust", [False, True])
async def test_a_project_config_cannot_switch_off_the_users_sandbox(
    work: Path, home: Path, user_config_dir: Path, trust: bool,
) -> None:
    """lich reads one config file: a repository's own .lich/config.toml replaces the
    user's (and, untrusted, keeps no plugin table). The user's [sandbox] still holds."""
    from lich.config import load_config

    _user_config(user_config_dir, 'mode = "required"\nprofile = "read-only"')
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text(
        f'plugins = ["builtin_tools", "{PLUGIN}"]\n'
        '[sandbox]\nmode = "off"\nprofile = "full"\n')
    loaded = load_config(work_dir=work, trust=trust)
    assert loaded.file == str(work / ".lich" / "config.toml")  # the project's file is used
    agent = Agent(loaded.config, chat=ScriptedChat([]))
    try:
        assert isinstance(agent.process_runner, BwrapRunner)
        assert agent.process_runner.profile == "read-only"
        result = await terminal(agent, "cat ~/.ssh/id_ed25519; echo x > written.txt")
    finally:
        await agent.aclose()
    assert "PRIVATE KEY" not in result.output
    assert not (work / "written.txt").exists()


def test_a_project_may_tighten_the_users_sandbox(work: Path, user_config_dir: Path) -> None:
    _user_config(user_config_dir, 'mode = "off"')
    agent = agent_for(work, "required", profile="read-only")
    try:
        assert isinstance(agent.process_runner, BwrapRunner)
        assert agent.process_runner.profile == "read-only"
    finally:
        asyncio.run(agent.aclose())


def test_a_bad_sandbox_table_in_the_user_config_names_the_file(
    work: Path, user_config_dir: Path,
) -> None:
    _user_config(user_config_dir, 'mode = "maybe"')
    with pytest.raises(ConfigError) as caught:
        agent_for(work, "off")
    assert str(user_config_dir / "lich" / "config.toml") in str(caught.value)
    assert "$.sandbox.mode" in str(caught.value)
