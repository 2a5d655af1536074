"""#28.1 attacked again: a cloned repository that ships lich's checkpoint store.

``.lich/checkpoints/store.git`` is a git directory lich runs git on. A repository
can commit one whose ``config`` defines a clean filter and whose
``info/attributes`` applies it to every file: the first snapshot of a user who
enabled checkpoints (their own plugin list, which an untrusted project keeps)
would run the repository's command. A real git clone of such a repository; the
store refuses a directory it did not make (lich makes it ``0700``, its user's).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lich.checkpoints.store import STORE_DIR, ShadowStore, SnapshotError


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                    "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


def test_a_shipped_store_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    origin = tmp_path / "origin"
    origin.mkdir()
    store = origin / STORE_DIR
    subprocess.run(["git", "init", "--bare", "-q", "--template=", str(store)], check=True,
                   capture_output=True, timeout=60)
    with (store / "config").open("a") as fh:
        fh.write(f'[filter "x"]\n\tclean = "touch {marker}; cat"\n')
    (store / "info").mkdir(exist_ok=True)
    (store / "info" / "attributes").write_text("* filter=x\n")
    for empty in ("objects", "refs/heads", "refs/tags"):  # git tracks no empty dir
        (store / empty).mkdir(parents=True, exist_ok=True)
        (store / empty / "keep").write_text("")
    (origin / "README.md").write_text("hello\n")
    _git("init", "-q", cwd=origin)
    _git("add", "-A", "-f", cwd=origin)
    _git("commit", "-q", "-m", "init", cwd=origin)
    clone = tmp_path / "clone"
    old = os.umask(0o022)
    try:
        _git("clone", "-q", str(origin), str(clone), cwd=tmp_path)
    finally:
        os.umask(old)
    assert (clone / STORE_DIR / "HEAD").is_file()

    with pytest.raises(SnapshotError, match="not a store lich made"):
        ShadowStore(clone, max_file_bytes=1 << 20).snapshot("s", {"session_id": "s"})
    assert not marker.exists()


def test_a_store_lich_made_is_private_and_used(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("a\n")
    old = os.umask(0o022)
    try:
        store = ShadowStore(work, max_file_bytes=1 << 20)
        store.snapshot("s", {"session_id": "s"})
        store.snapshot("s", {"session_id": "s"})  # again: the store is its own
    finally:
        os.umask(old)
    for path in [work / STORE_DIR, *(work / STORE_DIR).rglob("*")]:
        assert path.stat().st_mode & 0o077 == 0, path
