"""Gateway conversations are isolated, lich's own files are off limits, and private.

The attacks are real: a work dir with real transcripts, a real ``.env``, a real
``.lich/config.toml``, a ``*.pem`` and symlinks dressed up as harmless files; a
:class:`GatewayBus` on a real :class:`lich.Agent` with the default gateway tools,
whose scripted model, in conversation A, tries every way the tools offer to read,
grep, list, search and size conversation B's transcript and the secrets — given
even B's real session file name, as if it had been guessed. Then the same against a
real ``lich run`` process, with the protection on and with the opt-out. Then the
session id of a chat cannot be computed from its chat id, and the files lich
creates are private whatever the umask.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lich_env import lich_env

from lich.agent import Agent
from lich.gateway._keys import KEY_BYTES, KEY_FILE_NAME, load_or_create_key
from lich.gateway.bus import GatewayBus, InboundMessage
from lich.gateway.config import DEFAULT_GATEWAY_TOOLS, parse_gateway_config
from lich.gateway.formatting import conversation_session_id, legacy_session_id
from lich.gateway.runner import gateway_agent_config
from lich.testing import (
    Reply,
    ScriptedChat,
    ScriptedModel,
    ScriptedServer,
    ScriptRequest,
    Step,
    make_test_config,
)
from lich.types import ToolCall, ToolMessage, UserMessage

CANARY_B = "CANARY-conversation-b-7f3a"  # what chat B said: only B may ever see it again
CANARY_ENV = "CANARY-dotenv-91c2"
CANARY_CONFIG = "CANARY-config-55d0"
CANARY_PEM = "CANARY-pem-0e4b"
CANARY_KEY = "CANARY-ssh-key-3b8f"
SECRETS = (CANARY_B, CANARY_ENV, CANARY_CONFIG, CANARY_PEM, CANARY_KEY)
NOTES = "public notes: anyone may read this\n"


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """The common default umask (022): files lich creates must be private anyway."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def _project(work: Path) -> None:
    """A work dir holding secrets beside public files, and links that lead to the secrets."""
    (work / "notes.txt").write_text(NOTES, encoding="utf-8")
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text(
        f'system_prompt = "{CANARY_CONFIG}"\n', encoding="utf-8")
    (work / ".env").write_text(f"API_TOKEN={CANARY_ENV}\n", encoding="utf-8")
    (work / "vendor" / ".lich").mkdir(parents=True)  # a nested project's own lich files
    (work / "vendor" / ".lich" / "config.toml").write_text(
        f'system_prompt = "{CANARY_CONFIG}"\n', encoding="utf-8")
    (work / ".env.production").write_text(f"DB={CANARY_ENV}\n", encoding="utf-8")
    (work / "certs").mkdir()
    (work / "certs" / "server.pem").write_text(f"-----BEGIN {CANARY_PEM}-----\n",
                                               encoding="utf-8")
    (work / "deploy").mkdir()
    (work / "deploy" / "id_ed25519").write_text(f"{CANARY_KEY}\n", encoding="utf-8")
    # Innocent names, secret targets: the policy must judge where a path leads.
    (work / "readme-env.txt").symlink_to(".env")
    (work / "history").symlink_to(".lich/sessions", target_is_directory=True)
    (work / "docs").mkdir()
    (work / "docs" / "index.md").write_text("# Docs\n\nThe public docs.\n", encoding="utf-8")
    (work / "docs" / "env.md").symlink_to("../.env")


def _attacks(work: Path, victim_file: str) -> list[ToolCall]:
    """Every way the default gateway tools could reach a secret or B's transcript."""
    transcript = f".lich/sessions/{victim_file}"
    calls: list[dict[str, Any]] = [
        {"name": "read_file", "args": {"path": "notes.txt"}},  # control: public files work
        {"name": "read_file", "args": {"path": transcript}},
        {"name": "read_file", "args": {"path": str(work / transcript)}},
        {"name": "read_file", "args": {"path": f"./docs/../.lich/sessions/{victim_file}"}},
        {"name": "read_file", "args": {"path": f"history/{victim_file}"}},
        {"name": "read_file", "args": {"path": ".lich/config.toml"}},
        {"name": "read_file", "args": {"path": ".env"}},
        {"name": "read_file", "args": {"path": ".ENV"}},
        {"name": "read_file", "args": {"path": ".env.production"}},
        {"name": "read_file", "args": {"path": "readme-env.txt"}},
        {"name": "read_file", "args": {"path": "certs/server.pem"}},
        {"name": "read_file", "args": {"path": "deploy/id_ed25519"}},
        {"name": "read_file", "args": {"path": "vendor/.lich/config.toml"}},
        {"name": "grep_files", "args": {"pattern": "CANARY"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": ".lich"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": ".lich/sessions"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": "history"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": transcript}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": ".env"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": "certs"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "glob": "*.pem"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": "readme-env.txt"}},
        {"name": "grep_files", "args": {"pattern": "CANARY", "path": "vendor/.lich"}},
        {"name": "list_dir", "args": {"path": ".", "depth": 4}},
        {"name": "list_dir", "args": {"path": ".lich"}},
        {"name": "list_dir", "args": {"path": ".lich/sessions"}},
        {"name": "list_dir", "args": {"path": "history"}},
        {"name": "disk_usage", "args": {"path": "."}},  # not a gateway default: CLI only
        {"name": "disk_usage", "args": {"path": "history"}},
        {"name": "docs_search", "args": {"query": "CANARY API_TOKEN"}},
        {"name": "docs_read", "args": {"path": "env"}},
        {"name": "docs_read", "args": {"path": "../.env"}},
    ]
    return [ToolCall(f"a{i}", c["name"], c["args"]) for i, c in enumerate(calls)]


def _assert_nothing_leaked(results: list[ToolMessage], victim_file: str) -> None:
    assert results, "the attack never ran"
    by_call = {m.tool_call_id: m for m in results}
    assert by_call["a0"].content.strip() == NOTES.strip()  # the tools do work
    for message in results:
        text = message.content
        for secret in SECRETS:
            assert secret not in text, f"{message.name} leaked {secret}: {text[:300]}"
        # Not even the name of B's transcript (beyond a refusal echoing the path asked
        # for), nor that a secret file exists.
        if "forbidden_path" not in text:
            assert victim_file not in text, f"{message.name} showed the transcript: {text[:300]}"
            for name in ("id_ed25519", "server.pem"):
                assert name not in text, text[:300]
        if message.name in ("list_dir", "disk_usage", "docs_search") and "forbidden" not in text:
            # .env, the link to it, and the link into .lich/sessions are not even listed.
            for name in (".env", "readme-env", "history"):
                assert name not in text, text[:300]


class Attacker:
    """A scripted model: B chats, A sends every attack at once and reports the results."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.victim_file = ""
        self.results: list[ToolMessage] = []

    def __call__(self, request: ScriptRequest) -> Step:
        text = request.last_user()
        done = request.tool_results_since_user()
        if text != "attack":
            return Reply(f"noted: {text}")
        if not done:
            return Reply(tool_calls=tuple(_attacks(self.work, self.victim_file)))
        self.results = list(done)
        return Reply("done")


def _gateway_bus(work: Path, attacker: Attacker) -> GatewayBus:
    # The CLI's opt-out is set, and ignored: gateway conversations are always protected.
    base = make_test_config(work, plugins=("builtin_tools",), protect_private_files=False)
    config = gateway_agent_config(base, parse_gateway_config({}))
    agent = Agent(config, chat=ScriptedChat(responder=attacker),
                  env={"LICH_DOCS_DIR": str(work / "docs")})
    assert sorted(agent.tools.names()) == sorted(DEFAULT_GATEWAY_TOOLS)
    return GatewayBus(agent)


async def test_a_conversation_cannot_reach_another_or_lichs_files_through_any_tool(
    tmp_path: Path,
):
    work = tmp_path / "work"
    work.mkdir()
    _project(work)
    attacker = Attacker(work)
    bus = _gateway_bus(work, attacker)
    try:
        told = await bus.handle(InboundMessage("telegram", "B", "bob", f"my pin is {CANARY_B}"))
        assert told.kind == "reply"
        victim = bus.agent.sessions.path_for(told.session_id)
        assert CANARY_B in victim.read_text(encoding="utf-8")  # the secret is on disk
        attacker.victim_file = victim.name
        reply = await bus.handle(InboundMessage("telegram", "A", "mallory", "attack"))
        assert reply.text == "done"
        assert len(attacker.results) == len(_attacks(work, victim.name))
        _assert_nothing_leaked(attacker.results, victim.name)
        refused = [m for m in attacker.results if m.name == "read_file" and m.tool_call_id != "a0"]
        assert all("forbidden_path" in m.content for m in refused), refused
    finally:
        await bus.agent.aclose()


def _cli_responder(work: Path, victim_file: str) -> Callable[[ScriptRequest], Step]:
    def respond(request: ScriptRequest) -> Step:
        if not request.tool_results_since_user():
            return Reply(tool_calls=tuple(_attacks(work, victim_file)))
        return Reply("done")

    return respond


def _run_cli(work: Path, home: Path, extra: str, victim_file: str) -> list[ToolMessage]:
    server = ScriptedServer(ScriptedModel(responder=_cli_responder(work, victim_file))).start()
    try:
        (work / ".lich" / "config.toml").write_text(
            f'system_prompt = "{CANARY_CONFIG}"\n{extra}\n'
            'plugins = ["builtin_tools", "openai_compat"]\n'
            'tools_enabled = ["read_file", "list_dir", "grep_files", "docs_read", "docs_search",'
            ' "disk_usage"]\n'
            "[[providers]]\n"
            'kind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{server.base_url}"\n',
            encoding="utf-8",
        )
        proc = subprocess.run(
            [sys.executable, "-m", "lich", "run", "--no-stream", "attack"],
            cwd=work, capture_output=True, text=True, timeout=120,
            env=lich_env(home, LICH_DOCS_DIR=str(work / "docs")),
        )
        assert proc.returncode == 0, proc.stderr
        last = server.model.requests[-1]
        return [m for m in last.messages if isinstance(m, ToolMessage)]
    finally:
        server.stop()


def _cli_project(tmp_path: Path) -> tuple[Path, Path, str]:
    work = tmp_path / "work"
    work.mkdir()
    _project(work)
    home = tmp_path / "home"
    home.mkdir()
    sessions = work / ".lich" / "sessions"
    sessions.mkdir()
    victim = sessions / "20260101-000000-deadbeef.jsonl"
    victim.write_text(json.dumps({"v": 1, "ts": 0, "kind": "message", "message": {
        "role": "user", "content": f"my pin is {CANARY_B}"}}) + "\n", encoding="utf-8")
    return work, home, victim.name


def test_a_cli_run_cannot_read_lichs_files_or_secrets(tmp_path: Path):
    work, home, victim = _cli_project(tmp_path)
    # The system prompt (from the config) reaches the model, as it should; the tools
    # must not hand the file itself over, so the canary is checked in tool results only.
    _assert_nothing_leaked(_run_cli(work, home, "", victim), victim)


def test_the_cli_opt_out_lets_a_run_read_them(tmp_path: Path):
    work, home, victim = _cli_project(tmp_path)
    results = _run_cli(work, home, "protect_private_files = false", victim)
    by_call = {m.tool_call_id: m.content for m in results}
    assert CANARY_B in by_call["a1"]  # the transcript
    assert CANARY_CONFIG in by_call["a5"]  # .lich/config.toml
    assert CANARY_ENV in by_call["a6"]  # .env
    assert CANARY_PEM in by_call["a10"]  # certs/server.pem


# ------------------------------------------------------------------ session ids


async def test_a_session_id_cannot_be_computed_from_a_chat_id(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    agent = Agent(make_test_config(work, plugins=()), chat=ScriptedChat(["hi"]))
    try:
        bus = GatewayBus(agent)
        reply = await bus.handle(InboundMessage("telegram", "42", "u", "hello"))
        sessions = agent.sessions.directory
        names = sorted(p.name for p in sessions.glob("*.jsonl"))
        assert names == [f"{reply.session_id}.jsonl"]
        # What anyone could compute from the chat id names nothing on disk: the old
        # unkeyed hash, and the keyed one under any key but the install's.
        guesses = [legacy_session_id("telegram", "42"),
                   *(conversation_session_id("telegram", "42", bytes([b]) * KEY_BYTES)
                     for b in range(64))]
        assert not any((sessions / f"{g}.jsonl").exists() for g in guesses)
        # The install's key: 32 random bytes, private, made once and kept.
        key_file = sessions / KEY_FILE_NAME
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert load_or_create_key(sessions) == key_file.read_bytes()
        again = GatewayBus(agent)
        assert again.session_id_for("telegram", "42") == reply.session_id
    finally:
        await agent.aclose()


async def test_two_installs_name_one_chat_differently(tmp_path: Path):
    ids = []
    for name in ("one", "two"):
        work = tmp_path / name
        work.mkdir()
        agent = Agent(make_test_config(work, plugins=()), chat=ScriptedChat(["hi"]))
        ids.append(GatewayBus(agent).session_id_for("webhook", "c1"))
        await agent.aclose()
    assert ids[0] != ids[1]


async def test_a_transcript_under_the_old_unkeyed_name_keeps_resuming(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    seen: list[list[str]] = []

    def respond(request: ScriptRequest) -> Step:
        seen.append([m.content for m in request.messages if isinstance(m, UserMessage)])
        return Reply("ok")

    agent = Agent(make_test_config(work, plugins=()), chat=ScriptedChat(responder=respond))
    try:
        # A conversation saved by an earlier version, under the computable name.
        old_id = legacy_session_id("telegram", "42")
        writer = agent.sessions.open(old_id)
        writer.message(UserMessage("remember the blue door"))
        writer.close()
        bus = GatewayBus(agent)
        reply = await bus.handle(InboundMessage("telegram", "42", "u", "what door?"))
        assert seen[-1] == ["remember the blue door", "what door?"]
        assert not agent.sessions.exists(old_id)  # the guessable name is gone
        assert agent.sessions.exists(reply.session_id)
    finally:
        await agent.aclose()


# ------------------------------------------------------------------ file modes


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_transcript_and_its_directories_are_private(
    tmp_path: Path, permissive_umask: None
):
    work = tmp_path / "work"
    work.mkdir()
    agent = Agent(make_test_config(work, plugins=()), chat=ScriptedChat(["hi"]))
    try:
        result = await agent.run("hello")
    finally:
        await agent.aclose()
    transcript = agent.sessions.path_for(result.session_id)
    assert _mode(transcript) == 0o600
    assert _mode(transcript.parent) == 0o700  # .lich/sessions
    assert _mode(work / ".lich") == 0o700


@pytest.mark.parametrize(("reader", "name"), [("_ReadlineReader", "chat_history_readline"),
                                              ("_PromptReader", "chat_history")])
def test_the_chat_history_and_state_dir_are_private(
    reader: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    permissive_umask: None,
):
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    from lich.cli import chat

    getattr(chat, reader)()  # what `lich chat` makes at its first prompt
    history = state / "lich" / name
    assert _mode(history) == 0o600
    assert _mode(history.parent) == 0o700  # the state dir: <XDG_STATE_HOME>/lich
    assert _mode(state) == 0o700


async def test_the_audit_log_is_private(tmp_path: Path, permissive_umask: None):
    work = tmp_path / "work"
    work.mkdir()
    agent = Agent(make_test_config(work, plugins=("audit",), persist_sessions=False),
                  chat=ScriptedChat(["hi"]))
    try:
        await agent.run("hello")
    finally:
        await agent.aclose()
    log = work / ".lich" / "audit.jsonl"  # the audit plugin's default path
    assert log.is_file()  # made when the plugin started
    assert _mode(log) == 0o600
    assert _mode(log.parent) == 0o700


async def test_names_are_judged_below_the_work_dir_only(tmp_path: Path):
    # A project that itself lives in a directory named like a secret stays usable; a
    # secret-named file inside it does not.
    work = tmp_path / "vault.key" / "work"
    work.mkdir(parents=True)
    (work / "notes.txt").write_text(NOTES, encoding="utf-8")
    (work / "sub").mkdir()
    (work / "sub" / "api.KEY").write_text(CANARY_KEY, encoding="utf-8")
    agent = Agent(make_test_config(work, plugins=("builtin_tools",)), chat=ScriptedChat([]))
    try:
        ok = await agent.executor.execute(ToolCall("1", "read_file", {"path": "notes.txt"}))
        refused = await agent.executor.execute(
            ToolCall("2", "read_file", {"path": "sub/api.KEY"}))
        listing = await agent.executor.execute(
            ToolCall("3", "list_dir", {"path": ".", "depth": 2}))
    finally:
        await agent.aclose()
    assert ok.ok
    assert ok.output == NOTES
    assert not refused.ok
    assert refused.error is not None
    assert refused.error.startswith("forbidden_path: sub/api.KEY")
    assert "notes.txt" in listing.output
    assert "api.KEY" not in listing.output


_MCP_FIXTURE = Path(__file__).parents[1] / "mcp_client" / "fixture_server.py"


def _created(roots: list[Path], before: set[Path]) -> list[Path]:
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in (*dirnames, *filenames):
                path = Path(dirpath) / name
                if path not in before and not path.is_symlink():
                    found.append(path)
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX modes")
def test_nothing_a_cli_run_creates_is_readable_by_others(
    tmp_path: Path, permissive_umask: None,
) -> None:
    """Every creation site at once: a real `lich run` with an MCP stdio server (its
    stderr log), the plugin entry-point cache, sessions, .lich's .gitignore, under
    umask 022 in a fresh home. Whatever appears must be 0600 / 0700."""
    pytest.importorskip("mcp", reason="the MCP SDK (lich-agent[mcp]) is not installed")
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    server = ScriptedServer(ScriptedModel(responder=lambda request: Reply("done"))).start()
    try:
        (work / "lich.toml").write_text(
            'plugins = ["builtin_tools", "openai_compat", "mcp"]\n'
            "[[providers]]\n"
            'kind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{server.base_url}"\n'
            "[mcp.servers.fx]\n"
            f'command = "{sys.executable}"\nargs = ["{_MCP_FIXTURE}"]\n'
            'env = { FIXTURE_STDERR = "a line on stderr" }\n'
            "startup_timeout_s = 60\n",
            encoding="utf-8",
        )
        before = {p for p in (*work.rglob("*"), *home.rglob("*"))}
        proc = subprocess.run(
            [sys.executable, "-m", "lich", "--config", str(work / "lich.toml"), "run",
             "--no-stream", "hello"],
            cwd=work, capture_output=True, text=True, timeout=180, env=lich_env(home),
        )
        assert proc.returncode == 0, proc.stderr
    finally:
        server.stop()
    created = _created([work, home], before)
    logs = [p for p in created if p.suffix == ".log"]
    assert logs, created  # the MCP server's stderr log was written
    assert "a line on stderr" in logs[0].read_text(encoding="utf-8")
    assert any(p.name == ".gitignore" for p in created)
    assert any(p.suffix == ".jsonl" for p in created)  # the transcript
    loose = {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in created
             if _mode(p) != (0o700 if p.is_dir() else 0o600)}
    assert loose == {}


def test_an_mcp_log_made_before_logs_were_private_is_made_private(tmp_path: Path) -> None:
    from lich.private_files import open_private_log

    log = tmp_path / "logs" / "mcp" / "fx.log"
    log.parent.mkdir(parents=True)
    log.write_text("old line\n", encoding="utf-8")
    log.chmod(0o644)
    with open_private_log(log) as stream:
        stream.write("new line\n")
    assert _mode(log) == 0o600
    assert log.read_text(encoding="utf-8") == "old line\nnew line\n"


def test_a_private_write_refuses_a_planted_symlink(tmp_path: Path) -> None:
    from lich.private_files import write_private

    target = tmp_path / "victim"
    target.write_text("keep\n", encoding="utf-8")
    (tmp_path / "cache.tmp").symlink_to(target)
    with pytest.raises(OSError, match="symbolic link"):
        write_private(tmp_path / "cache.tmp", b"overwritten")
    assert target.read_text(encoding="utf-8") == "keep\n"
