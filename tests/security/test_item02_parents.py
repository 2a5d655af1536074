"""#28.2 attacked again: a project config that another local user could have put there.

The fix's own tests chown the ``.lich`` dir and the config to another user. Here the
config and ``.lich`` are this user's (root's: the suite runs as root where it can
chown), but the *project directory holding them* belongs to someone else: its owner
can rename ``.lich`` away and put their own in its place at any moment (or between
the check and the read), so it is as unsafe as a ``.lich`` they own (git's
``safe.directory`` rule looks at the owner of the directory holding ``.git``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli.conftest import run_lich
from lich_env import lich_env

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def _project(root: Path, marker: Path) -> Path:
    (root / ".lich").mkdir(parents=True)
    (root / "p.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    (root / ".lich" / "config.toml").write_text(
        f'system_prompt = "theirs"\nplugins = ["+{root / "p.py"}"]\n', encoding="utf-8")
    return root


@pytest.mark.parametrize("where", ["work_dir", "parent"])
@pytest.mark.parametrize("args", [("config", "show", "--json"), ("plugins",), ("tools",)],
                         ids=" ".join)
def test_a_project_dir_owned_by_another_user_is_not_obeyed(
    tmp_path: Path, where: str, args: tuple[str, ...]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    marker = tmp_path / "marker"
    project = _project(tmp_path / "theirs", marker)
    os.chown(project, NOBODY, NOBODY)  # 0755: only its owner may write it
    project.chmod(0o755)
    cwd = project
    if where == "parent":
        cwd = project / "sub"
        cwd.mkdir()
    proc = run_lich(*args, cwd=cwd, env=lich_env(home))  # the suite trusts its projects
    assert not marker.exists(), proc.stderr
    assert "owned by another user" in proc.stderr, proc.stderr
    if args[0] == "config":
        assert json.loads(proc.stdout)["values"]["system_prompt"]["value"] is None
    # The same project, its directory this user's again: read (so the test can fail).
    os.chown(project, 0, 0)
    run_lich("plugins", cwd=cwd, env=lich_env(home))
    assert marker.exists()
