"""#28.6 attacked again: credential files the fix's list does not spell.

``.env*`` as the issue writes it (``.envrc``, ``.env-prod``, ``.env_local``), more
tools' credential files, and a private key by content in a cloud service
account's JSON (its newlines escaped inside a string) under an innocent name.
Real files in a real work dir, through a real agent's executor and the default
policy: read, searched, listed, edited, and through the docs tools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.testing import ScriptedChat, make_test_config
from lich.types import ToolCall, ToolResult

CANARY = "CANARY-credential-77aa"
NAMED = [".envrc", ".env-prod", ".env_local", ".vault-token", ".cargo/credentials.toml",
         ".cargo/credentials", ".gem/credentials", ".s3cfg", ".boto", ".terraformrc",
         "credentials.tfrc.json", ".composer/auth.json", ".config/rclone/rclone.conf",
         "vault.kdbx", ".password-store/email.gpg"]
SERVICE_ACCOUNT = json.dumps({
    "type": "service_account", "project_id": "p", "client_email": "x@p.iam.example",
    "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwgg"
                   f"{CANARY}\n-----END PRIVATE KEY-----\n"}, indent=2)


async def _calls(work: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[ToolResult]:
    agent = Agent(make_test_config(work, plugins=("builtin_tools",)), chat=ScriptedChat([]))
    try:
        return [await agent.executor.execute(ToolCall(id=f"c{i}", name=name, args=args))
                for i, (name, args) in enumerate(calls)]
    finally:
        await agent.aclose()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "index.md").write_text("# Docs\n")
    return root


@pytest.mark.parametrize("name", NAMED)
async def test_a_credential_file_is_refused_and_hidden(work: Path, name: str) -> None:
    path = work / "project" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"token = {CANARY}\n")
    read, grep, listing, edit = await _calls(work, [
        ("read_file", {"path": f"project/{name}"}),
        ("grep_files", {"pattern": CANARY}),
        ("list_dir", {"path": "project", "depth": 3}),
        ("edit_file", {"path": f"project/{name}", "old_string": "token", "new_string": "x"}),
    ])
    assert read.error is not None, read.output
    assert read.error.startswith("forbidden_path:")
    assert CANARY not in read.output + grep.output + listing.output + str(edit.error)
    assert path.read_text() == f"token = {CANARY}\n"


async def test_a_service_account_key_in_json_is_refused_by_content(work: Path) -> None:
    (work / "deploy-sa.json").write_text(SERVICE_ACCOUNT)
    (work / "docs" / "account.md").write_text("# Account\n\n```json\n" + SERVICE_ACCOUNT
                                              + "\n```\n")
    read, grep, doc, found = await _calls(work, [
        ("read_file", {"path": "deploy-sa.json"}),
        ("grep_files", {"pattern": "private"}),
        ("docs_read", {"path": "account.md"}),
        ("docs_search", {"query": "account"}),
    ])
    assert read.error is not None
    assert "holds a private key" in read.error
    assert doc.error is not None
    assert doc.error.startswith("forbidden_path:")
    for result in (read, grep, doc, found):
        assert CANARY not in result.output
