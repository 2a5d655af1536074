"""The checkpoints plugin and ``lich rewind``, with real git, real files and a real run.

The plugin is loaded by module path (``lich.checkpoints.plugin``): the ``checkpoints``
entry point exists once the distribution is reinstalled.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lich.agent import Agent
from lich.checkpoints.cli import checkpoints_group, rewind_command
from lich.checkpoints.store import STORE_DIR
from lich.hooks import RunInfo
from lich.testing import ScriptedChat, make_test_config
from lich.testing.scripted import Reply
from lich.types import ToolCall

PLUGINS = ("builtin_tools", "lich.checkpoints.plugin")
GIT_ENV = {"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u",
           "GIT_COMMITTER_EMAIL": "u@x", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_CONFIG_NOSYSTEM": "1"}


def tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` but lich's own state and the user's .git."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] not in (".lich", ".git")}


def dir_digest(root: Path) -> dict[str, tuple[str, int]]:
    """Content hash and mtime of every file below ``root`` (the user's .git)."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                       p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def call(cid: str, name: str, **args: Any) -> Reply:
    return Reply(tool_calls=[ToolCall(cid, name, args)])


def run_agent(work: Path, replies: list[Reply], session_id: str | None = None,
              **config: Any) -> str:
    cfg = make_test_config(work, plugins=PLUGINS, **config)
    agent = Agent(cfg, chat=ScriptedChat([*replies, Reply(text="done")]))
    try:
        result = asyncio.run(agent.run("edit", session_id=session_id))
    finally:
        asyncio.run(agent.aclose())
    assert result.stopped_reason == "final"
    return result.session_id if hasattr(result, "session_id") else session_id or ""


def records(work: Path, kind: str = "checkpoint") -> list[dict[str, Any]]:
    found = []
    for path in sorted((work / ".lich" / "sessions").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["kind"] == kind:
                found.append(record)
    return found


def cli(command: Any, *args: str) -> Any:
    result = CliRunner().invoke(command, list(args), catch_exceptions=False)
    return result


@pytest.fixture
def work(tmp_path: Path) -> Path:
    w = tmp_path / "proj"
    w.mkdir()
    (w / "a.txt").write_text("alpha\n")
    (w / "b.txt").write_text("bravo one\n")
    (w / "c.txt").write_text("charlie\n")
    (w / "e.txt").write_text("echo\n")
    (w / "k.txt").write_text("kilo\n")
    (w / "sub").mkdir()
    (w / "sub" / "s.txt").write_text("sierra\n")
    return w


EDITS = [
    call("c1", "write_file", path="a.txt", content="ALPHA\n"),
    call("c2", "edit_file", path="b.txt", old_string="one", new_string="two"),
    call("c3", "terminal", command="sed -i s/sierra/SIERRA/ sub/s.txt && mv c.txt d.txt "
                                   "&& rm e.txt && mkdir -p new && echo n > new/n.txt"),
]


def test_a_rewind_undoes_file_tool_and_shell_edits_exactly(work: Path) -> None:
    before = tree(work)
    run_agent(work, EDITS)
    edited = tree(work)
    assert edited["a.txt"] == b"ALPHA\n"
    assert "d.txt" in edited
    assert "e.txt" not in edited
    cps = records(work)
    befores = [r for r in cps if r["phase"] == "before"]
    assert [r["tool_call_id"] for r in befores] == ["c1", "c2", "c3"]  # one per turn
    assert all(r["id"] and r["turn"] for r in befores)
    shell = next(r for r in cps if r["phase"] == "after" and r["tool_call_id"] == "c3")
    assert shell["changed"] == ["c.txt", "d.txt", "e.txt", "new/n.txt", "sub/s.txt"]

    dry = cli(rewind_command, "--work-dir", str(work), "latest", "--to", "1", "--dry-run",
              "--json")
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.output)
    assert sorted(plan["write"]) == ["a.txt", "b.txt", "c.txt", "e.txt", "sub/s.txt"]
    assert sorted(plan["delete"]) == ["d.txt", "new/n.txt"]
    assert tree(work) == edited  # a dry run changes nothing

    done = cli(rewind_command, "--work-dir", str(work), "latest", "--to", "1", "--json")
    assert done.exit_code == 0, done.output
    assert tree(work) == before
    assert not (work / "new").exists()  # the directory the agent made is gone with its file

    # The rewind took the state it found as a checkpoint: rewinding to it undoes it.
    undo = json.loads(done.output)["undo"]
    again = cli(rewind_command, "--work-dir", str(work), "latest", "--to", undo, "--json")
    assert again.exit_code == 0, again.output
    assert tree(work) == edited


def test_a_file_changed_by_hand_after_the_agent_is_left_alone_unless_forced(work: Path) -> None:
    before = tree(work)
    run_agent(work, EDITS)
    (work / "a.txt").write_text("mine now\n")  # the user's edit after the agent's write
    done = cli(rewind_command, "--work-dir", str(work), "latest", "--to", "1", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["kept_hand_edits"] == ["a.txt"]
    after = tree(work)
    assert after["a.txt"] == b"mine now\n"
    assert {k: v for k, v in after.items() if k != "a.txt"} == {
        k: v for k, v in before.items() if k != "a.txt"}
    # A file only the user changed is not the agent's: never touched, even forced.
    (work / "k.txt").write_text("user file\n")
    forced = cli(rewind_command, "--work-dir", str(work), "latest", "--to", "1", "--force",
                 "--json")
    assert forced.exit_code == 0, forced.output
    assert (work / "a.txt").read_text() == "alpha\n"
    assert (work / "k.txt").read_text() == "user file\n"


def test_the_users_repository_is_left_exactly_as_it_was(work: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=work, check=True, capture_output=True,
                       env={**os.environ, **GIT_ENV})

    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "base")
    git("checkout", "-qb", "side")
    (work / "a.txt").write_text("side\n")
    git("commit", "-qam", "side")
    git("checkout", "-q", "-")
    (work / "a.txt").write_text("main\n")
    git("commit", "-qam", "main")
    subprocess.run(["git", "rebase", "side"], cwd=work, capture_output=True,
                   env={**os.environ, **GIT_ENV})  # conflicts: the repo is mid-rebase
    assert (work / ".git" / "rebase-merge").is_dir() or (work / ".git" / "rebase-apply").is_dir()
    (work / "a.txt").write_text("resolved\n")
    digest = dir_digest(work / ".git")
    before = tree(work)
    run_agent(work, EDITS)
    done = cli(rewind_command, "--work-dir", str(work), "latest", "--to", "1")
    assert done.exit_code == 0, done.output
    assert tree(work) == before
    assert dir_digest(work / ".git") == digest


def test_ignored_protected_and_large_files_are_not_stored(work: Path) -> None:
    (work / ".gitignore").write_text("build/\n")
    (work / "build").mkdir()
    (work / "build" / "out.o").write_text("object\n")
    (work / ".env").write_text("TOKEN=secret\n")
    (work / "big.bin").write_bytes(b"x" * 5000)
    run_agent(work, EDITS[:1], checkpoints={"max_file_bytes": 4096})
    first = records(work)[0]
    assert first["skipped"] == [{"path": "big.bin", "reason": "too_large", "bytes": 5000}]
    shown = cli(checkpoints_group, "show", "--work-dir", str(work), "latest", first["id"],
                "--json")
    assert shown.exit_code == 0, shown.output
    files = json.loads(shown.output)["files"]
    assert "a.txt" in files
    assert ".gitignore" in files
    assert not {"build/out.o", ".env", "big.bin"} & set(files)
    assert not any(f.startswith(".lich") for f in files)


def test_read_only_calls_take_no_checkpoint(work: Path) -> None:
    run_agent(work, [call("r1", "read_file", path="a.txt")])
    assert records(work) == []
    assert not (work / STORE_DIR).exists()


def test_disabled_takes_none(work: Path) -> None:
    run_agent(work, EDITS[:1], checkpoints={"enabled": False})
    assert records(work) == []


def test_list_and_diff(work: Path) -> None:
    run_agent(work, EDITS)
    listed = cli(checkpoints_group, "list", "--work-dir", str(work), "latest", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.output)["checkpoints"]
    assert [r["tool_call_id"] for r in rows] == ["c1", "c2", "c3"]
    assert {r["session_turn"] for r in rows} == {1}
    diff = cli(checkpoints_group, "diff", "--work-dir", str(work), "latest", rows[0]["id"],
               "--json")
    data = json.loads(diff.output)
    assert "a.txt" in data["paths"]
    assert "-alpha" in data["patch"]
    assert "+ALPHA" in data["patch"]
    unknown = cli(checkpoints_group, "show", "--work-dir", str(work), "latest", "ffffffff")
    assert unknown.exit_code == 2
    assert "no checkpoint" in unknown.output


def test_rewind_by_turn_across_runs(work: Path) -> None:
    sid = "sess-one"
    run_agent(work, EDITS[:1], session_id=sid)
    mid = tree(work)
    run_agent(work, EDITS[1:], session_id=sid)
    done = cli(rewind_command, "--work-dir", str(work), sid, "--to", "2")
    assert done.exit_code == 0, done.output
    assert tree(work) == mid
    missing = cli(rewind_command, "--work-dir", str(work), sid, "--to", "7")
    assert missing.exit_code == 2


def test_a_plugin_record_cannot_pose_as_the_runs_own() -> None:
    got: list[tuple[str, dict[str, Any]]] = []
    info = RunInfo("r", "s", "x", "/tmp", recorder=lambda kind, **f: got.append((kind, f)))
    for kind in ("message", "compact", "event", "meta", "Bad Kind", ""):
        with pytest.raises(ValueError, match="record kind"):
            info.append_record(kind, a=1)
    assert info.append_record("checkpoint", a=1) is True
    assert got == [("checkpoint", {"a": 1})]
    assert RunInfo("r", "s", "x", "/tmp").append_record("checkpoint") is False


def test_rewind_in_chat_lists_turns_with_their_files_and_rewinds(work: Path) -> None:
    from lich.slash import SlashContext, run_slash_command

    before = tree(work)
    cfg = make_test_config(work, plugins=PLUGINS)
    agent = Agent(cfg, chat=ScriptedChat([*EDITS, Reply(text="done")]))
    try:
        result = asyncio.run(agent.run("edit", session_id="chat-1"))
        assert result.stopped_reason == "final"
        table = agent.host.slash_commands()
        assert table.get("rewind", "gateway") is None  # the gateway's /undo is not this
        command = table.get("rewind", "chat")
        assert command is not None
        assert table.get("rewind", "tui") is command

        def slash(args: str) -> str:
            context = SlashContext(args, "chat", "chat-1", cfg, host=agent.host)
            return asyncio.run(run_slash_command(command, context)) or ""

        listing = slash("").splitlines()
        assert len(listing) == 4  # three checkpoints, then how to use them
        assert listing[0].endswith("then changed: a.txt")
        assert "d.txt" in listing[2]
        assert "would restore: a.txt" in slash("1 --dry-run")
        assert "usage" in slash("--nope")
        done = slash("1")
        assert tree(work) == before
        undo = done.rsplit("/rewind ", 1)[1].strip()
        slash(undo)
        assert tree(work)["a.txt"] == b"ALPHA\n"
        assert "no checkpoint" in slash("zzzzzz")
    finally:
        asyncio.run(agent.aclose())


def test_a_rewind_does_not_write_through_a_link_the_agent_made(work: Path,
                                                                tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "s.txt").write_text("theirs\n")  # sub/s.txt resolves through the link
    before = tree(work)
    run_agent(work, [call("c1", "terminal",
                          command=f"rm -rf sub && ln -s {outside} sub && ln -s {outside} l")])
    assert (work / "sub").is_symlink()
    done = cli(rewind_command, "--work-dir", str(work), "latest", "--json")
    assert done.exit_code == 0, done.output
    assert tree(work) == before
    assert not (work / "sub").is_symlink()
    assert not (work / "l").exists()
    # nothing written or removed outside
    assert [(p.name, p.read_text()) for p in outside.iterdir()] == [("s.txt", "theirs\n")]


def test_a_nested_repository_is_skipped_and_said_so(work: Path) -> None:
    nested = work / "vendor" / "lib"
    nested.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(nested)], check=True, capture_output=True,
                   env={**os.environ, **GIT_ENV})
    (nested / "x.py").write_text("x = 1\n")
    run_agent(work, EDITS[:1])
    first = records(work)[0]
    assert {"path": "vendor/lib", "reason": "repository"} in first["skipped"]


def test_the_home_directory_is_refused_and_the_call_still_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    run_agent(home, [call("c1", "write_file", path="n.txt", content="n\n")])
    assert (home / "n.txt").read_text() == "n\n"
    assert records(home) == []
    assert "refusing to snapshot the home directory" in caplog.text


def test_without_git_on_path_the_call_still_runs(
        work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    run_agent(work, EDITS[:1])
    assert (work / "a.txt").read_text() == "ALPHA\n"
    assert records(work) == []
    assert "need the git binary" in caplog.text


def _git_has(work: Path, blob: str) -> bool:
    done = subprocess.run(["git", "--git-dir", str(work / STORE_DIR), "cat-file", "-e", blob],
                          capture_output=True, env={**os.environ, **GIT_ENV})
    return done.returncode == 0


def _blob_of(work: Path, path: str) -> str:
    out = subprocess.run(["git", "--git-dir", str(work / STORE_DIR), "hash-object", "--",
                          str(work / path)], capture_output=True, check=True, text=True)
    return out.stdout.strip()


def test_prune_deletes_what_no_session_holds_from_disk(work: Path) -> None:
    (work / "blob.bin").write_bytes(os.urandom(200_000))
    run_agent(work, EDITS[:1], session_id="old-one")
    run_agent(work, [call("k1", "write_file", path="k.txt", content="K\n")],
              session_id="kept-one")
    cli(rewind_command, "--work-dir", str(work), "kept-one", "--dry-run")  # a scratch chain
    blob = _blob_of(work, "blob.bin")
    (work / "blob.bin").unlink()
    assert _git_has(work, blob)

    dry = cli(checkpoints_group, "prune", "--work-dir", str(work), "old-one", "--dry-run",
              "--json")
    assert dry.exit_code == 0, dry.output
    assert [r["session_id"] for r in json.loads(dry.output)["dropped"]] == ["old-one"]
    assert _git_has(work, blob)

    # The kept session still holds the blob (its first snapshot had it).
    done = cli(checkpoints_group, "prune", "--work-dir", str(work), "old-one", "--json")
    assert done.exit_code == 0, done.output
    assert _git_has(work, blob)
    listed = cli(checkpoints_group, "list", "--work-dir", str(work), "kept-one", "--json")
    assert json.loads(listed.output)["checkpoints"]

    # A session removed from the store: its snapshots go, and the blob with them.
    for path in (work / ".lich" / "sessions").glob("kept-one*.jsonl"):
        path.unlink()
    swept = cli(checkpoints_group, "prune", "--work-dir", str(work), "--json")
    assert swept.exit_code == 0, swept.output
    data = json.loads(swept.output)
    assert sorted(r["reason"] for r in data["dropped"]) == ["scratch", "session_removed"]
    assert data["bytes_after"] < data["bytes_before"]
    assert data["bytes_after"] < 200_000
    assert not _git_has(work, blob)


def test_prune_caps_the_store_size_oldest_first(work: Path) -> None:
    (work / "blob.bin").write_bytes(os.urandom(1_500_000))
    run_agent(work, EDITS[:1], session_id="first")
    (work / "blob.bin").unlink()
    run_agent(work, [call("k1", "write_file", path="k.txt", content="K\n")],
              session_id="second")
    config = work / "lich.toml"
    config.write_text("[checkpoints]\nmax_store_mb = 0\n")
    uncapped = cli(checkpoints_group, "prune", "--work-dir", str(work), "--config", str(config),
                   "--json")
    assert uncapped.exit_code == 0, uncapped.output
    assert json.loads(uncapped.output)["dropped"] == []  # 0: no cap
    config.write_text("[checkpoints]\nmax_store_mb = 1\n")
    capped = cli(checkpoints_group, "prune", "--work-dir", str(work), "--config", str(config),
                 "--json")
    assert capped.exit_code == 0, capped.output
    data = json.loads(capped.output)
    assert [(r["session_id"], r["reason"]) for r in data["dropped"]] == [("first", "store_size")]
    assert data["bytes_after"] <= 1024 * 1024
    listed = cli(checkpoints_group, "list", "--work-dir", str(work), "second", "--json")
    assert json.loads(listed.output)["checkpoints"]


def test_prune_drops_sessions_older_than_the_age_cap(work: Path) -> None:
    import time

    from lich.checkpoints.plugin import open_store
    from lich.checkpoints.prune import prune

    run_agent(work, EDITS[:1], session_id="aged")
    shadow = open_store(make_test_config(work))
    kept = prune(shadow, {"aged"}, max_age_s=30 * 86400, dry_run=True)
    assert kept.dropped == ()
    later = prune(shadow, {"aged"}, max_age_s=30 * 86400, now=time.time() + 31 * 86400)
    assert [(c.session_id, why) for c, why in later.dropped] == [("aged", "older_than")]
    assert shadow.chains() == []


def test_bad_settings_are_named(work: Path) -> None:
    from lich.checkpoints.plugin import checkpoint_settings
    from lich.config import ConfigError

    with pytest.raises(ConfigError, match=r"\$\.checkpoints\.max_file_bytes"):
        checkpoint_settings(make_test_config(work, checkpoints={"max_file_bytes": -1}))
    with pytest.raises(ConfigError, match=r"\$\.checkpoints\.enabeld"):
        checkpoint_settings(make_test_config(work, checkpoints={"enabeld": True}))


KILLED_SNAPSHOTS = """
import sys
from pathlib import Path
from lich.checkpoints.store import ShadowStore

work = Path(sys.argv[1])
store = ShadowStore(work, max_file_bytes=1 << 20)
i = 0
while True:
    for j in range(40):
        (work / f"f{j}.txt").write_text(f"{i} {j}\\n" * 50)
    store.snapshot("killed", {"session_id": "killed", "phase": "before"})
    print(i, flush=True)
    i += 1
"""


def test_a_store_killed_mid_snapshot_stays_usable(work: Path) -> None:
    import random
    import signal
    import sys
    import time

    script = work.parent / "snap.py"
    script.write_text(KILLED_SNAPSHOTS)
    rng = random.Random(33)
    for _ in range(6):
        child = subprocess.Popen([sys.executable, str(script), str(work)],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        child.stdout.readline()  # one snapshot is complete; kill it inside a later one
        time.sleep(rng.uniform(0, 0.05))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    # A lock file of a git killed mid-write, for certain (the kills may miss the window).
    (work / STORE_DIR / "lich-index.lock").write_bytes(b"torn")
    run_agent(work, EDITS)
    fsck = subprocess.run(["git", "--git-dir", str(work / STORE_DIR), "fsck", "--no-dangling"],
                          capture_output=True, text=True, env={**os.environ, **GIT_ENV})
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert not (work / STORE_DIR / "lich-index.lock").exists()
    before_rewind = tree(work)
    done = cli(rewind_command, "--work-dir", str(work), "latest", "--to", "1", "--json")
    assert done.exit_code == 0, done.output
    assert tree(work)["a.txt"] == b"alpha\n"
    assert tree(work) != before_rewind


def _history(work: Path, sid: str) -> list[Any]:
    from lich.sessions import JsonlSessionStore

    return JsonlSessionStore(work / ".lich" / "sessions").history(sid)


def _users(work: Path, sid: str) -> list[str]:
    from lich.types import UserMessage

    return [m.content for m in _history(work, sid) if isinstance(m, UserMessage)]


def run_input(work: Path, text: str, replies: list[Reply], sid: str) -> None:
    cfg = make_test_config(work, plugins=PLUGINS)
    agent = Agent(cfg, chat=ScriptedChat([*replies, Reply(text="done")]))
    try:
        history = _history(work, sid) if (work / ".lich" / "sessions").is_dir() else []
        result = asyncio.run(agent.run(text, history=history or None, session_id=sid))
    finally:
        asyncio.run(agent.aclose())
    assert result.stopped_reason == "final"


def test_a_conversation_rewind_cuts_the_history_and_a_resumed_run_goes_on_from_there(
        work: Path) -> None:
    sid = "talk"
    run_input(work, "first", EDITS[:1], sid)
    after_first = tree(work)
    run_input(work, "second", EDITS[1:2], sid)
    run_input(work, "third", EDITS[2:], sid)
    assert _users(work, sid) == ["first", "second", "third"]
    transcript = next((work / ".lich" / "sessions").glob("talk*.jsonl"))
    lines_before = transcript.read_text().splitlines()

    dry = cli(rewind_command, "--work-dir", str(work), sid, "--both", "--to", "2", "--dry-run",
              "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.output)["conversation"]["turn"] == 2
    assert _users(work, sid) == ["first", "second", "third"]

    done = cli(rewind_command, "--work-dir", str(work), sid, "--both", "--to", "2", "--json")
    assert done.exit_code == 0, done.output
    assert tree(work) == after_first
    assert _users(work, sid) == ["first"]
    # Append-only: every line that was there is there still, in place.
    assert transcript.read_text().splitlines()[:len(lines_before)] == lines_before

    run_input(work, "instead", [call("c9", "write_file", path="z.txt", content="z\n")], sid)
    assert _users(work, sid) == ["first", "instead"]
    # Turns count in the conversation as it is now: turn 2 is "instead"'s.
    code_only = cli(rewind_command, "--work-dir", str(work), sid, "--to", "2", "--json")
    assert code_only.exit_code == 0, code_only.output
    assert json.loads(code_only.output)["delete"] == ["z.txt"]
    assert _users(work, sid) == ["first", "instead"]  # --code leaves the conversation
    talk_only = cli(rewind_command, "--work-dir", str(work), sid, "--conversation", "--json")
    assert talk_only.exit_code == 0, talk_only.output
    assert _users(work, sid) == ["first"]
    assert tree(work) == after_first  # --conversation leaves the files
    bad = cli(rewind_command, "--work-dir", str(work), sid, "--conversation", "--to", "5")
    assert bad.exit_code == 2


def test_a_malformed_rewind_record_is_reported_not_obeyed(tmp_path: Path) -> None:
    from lich.sessions import JsonlSessionStore

    store = JsonlSessionStore(tmp_path)
    (tmp_path / "s1.jsonl").write_text(
        '{"v": 2, "ts": 1, "kind": "message", "message": {"role": "user", "content": "a"}}\n'
        '{"v": 2, "ts": 2, "kind": "rewind", "messages": -1}\n'
        '{"v": 2, "ts": 3, "kind": "rewind", "messages": true}\n')
    contents = store.read("s1")
    assert len(contents.messages) == 1
    assert len(contents.problems) == 2
    assert "rewind record" in contents.problems[0]


def test_the_commands_in_a_real_lich_process(work: Path) -> None:
    import sys

    before = tree(work)
    run_agent(work, EDITS)

    def lich(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "lich", "--plugin",
                               "lich.checkpoints.plugin", *args], cwd=work,
                              capture_output=True, text=True, timeout=120)

    listed = lich("checkpoints", "list", "latest", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["checkpoints"]) == 3
    done = lich("rewind", "latest", "--to", "1")
    assert done.returncode == 0, done.stderr
    assert "undo with: lich rewind" in done.stdout
    assert tree(work) == before
    missing = lich("rewind", "no-such-session")
    assert missing.returncode == 2
    assert "no-such-session" in missing.stderr


def test_undo_in_a_gateway_chat_is_the_operators_only(work: Path) -> None:
    from lich.slash import SlashContext, run_slash_command

    before = tree(work)
    cfg = make_test_config(work, plugins=PLUGINS, checkpoints={"undo_users": ["telegram:1"]})
    agent = Agent(cfg, chat=ScriptedChat([*EDITS[:1], Reply(text="done")]))
    try:
        assert asyncio.run(agent.run("edit", session_id="tg-1")).stopped_reason == "final"
        table = agent.host.slash_commands()
        command = table.get("undo", "gateway")
        assert command is not None
        assert table.get("undo", "chat") is None

        def undo(user: str, args: str = "") -> str:
            context = SlashContext(args, "gateway", "tg-1", cfg, user_id=user, host=agent.host)
            return asyncio.run(run_slash_command(command, context)) or ""

        edited = tree(work)
        assert "operator only" in undo("telegram:2")
        assert "operator only" in undo("")
        assert tree(work) == edited
        assert "would restore: a.txt" in undo("telegram:1", "--dry-run")
        done = undo("telegram:1")
        assert tree(work) == before
        assert "/undo " in done  # how to undo the undo
    finally:
        asyncio.run(agent.aclose())
    closed = make_test_config(work, plugins=PLUGINS)
    context = SlashContext("", "gateway", "tg-1", closed, user_id="telegram:1")
    assert "operator only" in (asyncio.run(run_slash_command(command, context)) or "")


def test_a_repository_with_a_submodule_is_left_untouched(work: Path, tmp_path: Path) -> None:
    env = {**os.environ, **GIT_ENV}

    def git(cwd: Path, *args: str) -> None:
        subprocess.run(["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, check=True,
                       capture_output=True, env=env)

    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "x.py").write_text("x = 1\n")
    git(lib, "init", "-q")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "lib")
    git(work, "init", "-q")
    git(work, "submodule", "add", "-q", str(lib), "vendor/lib")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "with a submodule")
    git(work, "checkout", "-q", "--detach")
    digest = dir_digest(work / ".git")
    module = dir_digest(work / "vendor" / "lib")
    before = tree(work)
    run_agent(work, EDITS)
    assert {"path": "vendor/lib", "reason": "repository"} in records(work)[0]["skipped"]
    done = cli(rewind_command, "--work-dir", str(work), "latest", "--to", "1")
    assert done.exit_code == 0, done.output
    assert tree(work) == before
    assert dir_digest(work / ".git") == digest
    assert dir_digest(work / "vendor" / "lib") == module
