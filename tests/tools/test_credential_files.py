"""Credential files are off limits to every tool, by name and by content (#28.6),
and the docs tools do not follow hard links out of the docs dir (#28.17).

Real files in a real work dir, read through a real agent's executor with the
default policy (``protect_private_files`` on, as the gateway always has it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.protected import ProtectedPaths
from lich.secret_files import fd_holds_private_key, holds_private_key
from lich.testing import ScriptedChat, make_test_config
from lich.types import ToolCall, ToolResult

CANARY = "CANARY-credential-4d1e"
# A syntactically real PEM key body (not a working key): what the content rule must see.
PEM_BODY = "\n".join(["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7" + CANARY[:8]] * 3)
KEYS = {
    "rsa": f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----\n",
    "pkcs8": f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n",
    "openssh": ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
                f"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ{CANARY}\n"
                "-----END OPENSSH PRIVATE KEY-----\n"),
    "encrypted-legacy": ("-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n"
                         "DEK-Info: AES-128-CBC,0123456789ABCDEF\n\n"
                         f"{PEM_BODY}\n-----END EC PRIVATE KEY-----\n"),
    "pgp": ("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
            f"lQOYBF0000000BCADJ{CANARY}aaaaaaaaaaaaaaaa\n-----END PGP PRIVATE KEY BLOCK-----\n"),
    "putty": ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: me\n"
              f"Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5\nAAAA{CANARY}\nPrivate-Lines: 1\nAAAA\n"),
}
# By name: each a file (or a file in a directory) the issue lists, and more of the set.
NAMED = [".npmrc", ".netrc", ".git-credentials", ".pypirc", "id_ecdsa", "id_ed25519",
         "id_dsa", ".aws/credentials", ".docker/config.json", "credentials.json",
         ".env.local", "prod.env", ".pgpass", ".kube/config", ".ssh/config",
         "client_secret_123.json", "Keystore.JKS"]


def _agent(work: Path, **env: str) -> Agent:
    config = make_test_config(work, plugins=("builtin_tools",))
    return Agent(config, chat=ScriptedChat([]), env=dict(env))


async def _call(agent: Agent, name: str, args: dict[str, Any]) -> ToolResult:
    return await agent.executor.execute(ToolCall(id="c", name=name, args=args))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "docs").mkdir()
    (root / "docs" / "index.md").write_text("# Docs\n\nnothing secret\n")
    return root


def test_the_default_policy_names_every_listed_credential_file(tmp_path: Path) -> None:
    policy = ProtectedPaths.for_config(make_test_config(tmp_path))
    root = str(tmp_path)
    for name in NAMED:
        assert policy.blocks(os.path.join(root, "sub", name), root), name
    for harmless in ("config.json", "README.md", "src/credentials.py", "docker/config.json",
                     "aws/credentials", "environment.md", "keys.md"):
        assert not policy.blocks(os.path.join(root, harmless), root), harmless


@pytest.mark.parametrize("name", NAMED)
async def test_a_credential_file_by_name_is_refused_and_hidden(work: Path, name: str) -> None:
    path = work / "project" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"token={CANARY}\n")
    agent = _agent(work)
    try:
        read = await _call(agent, "read_file", {"path": f"project/{name}"})
        grep = await _call(agent, "grep_files", {"pattern": CANARY})
        listing = await _call(agent, "list_dir", {"path": "project", "depth": 3})
        edit = await _call(agent, "edit_file", {"path": f"project/{name}",
                                                "old_string": "token", "new_string": "x"})
    finally:
        await agent.aclose()
    assert read.error is not None
    assert read.error.startswith("forbidden_path:")
    assert CANARY not in read.output + grep.output + listing.output + str(edit.error)
    assert Path(name).parts[-1] not in listing.output.split() or "/" in name
    assert path.read_text() == f"token={CANARY}\n"  # the edit did not happen


@pytest.mark.parametrize("kind", sorted(KEYS))
async def test_a_private_key_is_refused_by_content_whatever_its_name(
    work: Path, kind: str,
) -> None:
    (work / "notes.txt").write_text("first line\n" + KEYS[kind])
    (work / "docs" / "setup.md").write_text("# Setup\n\n" + KEYS[kind])
    agent = _agent(work)
    try:
        # A window that skips the header is still the key: the whole file is judged.
        read = await _call(agent, "read_file", {"path": "notes.txt", "offset": 3})
        grep = await _call(agent, "grep_files", {"pattern": "."})
        edit = await _call(agent, "edit_file", {"path": "notes.txt",
                                                "old_string": "first", "new_string": "x"})
        doc = await _call(agent, "docs_read", {"path": "setup.md"})
        found = await _call(agent, "docs_search", {"query": "setup"})
    finally:
        await agent.aclose()
    assert read.error is not None
    assert "holds a private key" in read.error
    assert edit.error is not None
    assert "holds a private key" in edit.error
    assert doc.error is not None
    assert doc.error.startswith("forbidden_path:")
    assert "notes.txt" not in grep.output
    assert "setup.md" not in found.output
    for result in (read, grep, edit, doc, found):
        assert CANARY[:8] not in result.output


def test_naming_a_key_in_text_is_not_a_key() -> None:
    source = 'HEADER = "-----BEGIN RSA PRIVATE KEY-----"\nif line == HEADER:\n    pass\n'
    assert not holds_private_key(source.encode())
    assert holds_private_key(KEYS["rsa"].encode())


def test_a_key_deep_in_a_big_file_is_found_across_chunks(tmp_path: Path) -> None:
    big = tmp_path / "big.log"
    with big.open("wb") as fh:
        fh.write(b"x" * (1024 * 1024 - 20))  # the header straddles the first chunk's end
        fh.write(KEYS["pkcs8"].encode())
    fd = os.open(big, os.O_RDONLY)
    try:
        assert fd_holds_private_key(fd)
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # pread: the offset is untouched
    finally:
        os.close(fd)


async def test_the_opt_out_lets_a_key_be_read(work: Path) -> None:
    (work / "notes.txt").write_text(KEYS["rsa"])
    config = make_test_config(work, plugins=("builtin_tools",), protect_private_files=False)
    agent = Agent(config, chat=ScriptedChat([]))
    try:
        read = await _call(agent, "read_file", {"path": "notes.txt"})
    finally:
        await agent.aclose()
    assert read.ok, read.error


async def test_the_docs_tools_refuse_a_hard_link_out_of_the_docs_dir(
    work: Path, tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.md"
    secret.write_text(f"# Secret\n\n{CANARY}\n")
    os.link(secret, work / "docs" / "innocent.md")
    agent = _agent(work)
    try:
        doc = await _call(agent, "docs_read", {"path": "innocent.md"})
        found = await _call(agent, "docs_search", {"query": "secret"})
        grep = await _call(agent, "grep_files", {"pattern": CANARY})
    finally:
        await agent.aclose()
    assert doc.error is not None
    assert doc.error.startswith("forbidden_path:")
    assert "hard links" in doc.error
    assert CANARY not in doc.output + found.output + grep.output


async def test_a_docs_hard_link_is_refused_without_the_policy_too(
    work: Path, tmp_path: Path,
) -> None:
    """As read_file refuses one whatever the policy: only allow_hard_links lifts it."""
    secret = tmp_path / "elsewhere.md"
    secret.write_text(f"# Elsewhere\n\n{CANARY}\n")
    os.link(secret, work / "docs" / "linked.md")
    config = make_test_config(work, plugins=("builtin_tools",), protect_private_files=False)
    agent = Agent(config, chat=ScriptedChat([]))
    try:
        refused = await _call(agent, "docs_read", {"path": "linked.md"})
        unfound = await _call(agent, "docs_search", {"query": "elsewhere"})
    finally:
        await agent.aclose()
    allowed_config = make_test_config(
        work, plugins=("builtin_tools",), protect_private_files=False,
        tools={"docs_read": {"allow_hard_links": True}})
    allowing = Agent(allowed_config, chat=ScriptedChat([]))
    try:
        allowed = await _call(allowing, "docs_read", {"path": "linked.md"})
    finally:
        await allowing.aclose()
    assert refused.error is not None
    assert "hard links" in refused.error
    assert CANARY not in unfound.output
    assert CANARY in allowed.output
