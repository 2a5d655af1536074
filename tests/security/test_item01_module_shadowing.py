"""#28.1 attacked again: a cloned repository whose top level holds ``click.py``.

``python -m lich`` (how the suite, and many users, start lich) puts the current
directory first on ``sys.path``: a repository file named like one of lich's
libraries would be imported — and run — in place of it, before any trust. A real
``python -m lich`` in such a directory: none of them runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli.conftest import run_lich
from lich_env import lich_env

SHADOWS = ["click", "httpx", "platformdirs", "rich", "attrs", "pluggy", "tomllib",
           "tree_sitter_bash"]


@pytest.mark.parametrize("args", [("--help",), ("plugins",), ("config", "show")],
                         ids=" ".join)
def test_library_names_in_the_work_dir_are_not_imported(tmp_path: Path,
                                                        args: tuple[str, ...]) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    marker = tmp_path / "imported"
    for name in SHADOWS:
        (repo / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\n", encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir()
    proc = run_lich(*args, cwd=repo, env=lich_env(home))
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), marker.read_text()
