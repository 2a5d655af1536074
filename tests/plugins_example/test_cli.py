"""The examples through the ``lich`` command line, in real subprocesses.

* ``lich --plugin plugins_example/my_plugin.py "..."`` against a scripted model
  server on 127.0.0.1 (openai_compat over HTTP);
* a bad guard policy and bad audit settings failing ``lich config validate``
  and ``lich run`` before any model call;
* the example distribution installed into a fresh virtual environment shows
  up in ``lich plugins available`` without any of its code being imported.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from lich_env import lich_env

from lich.testing import ScriptedModel, ScriptedServer, child_venv

from .conftest import EXAMPLES, plan

TIMEOUT_S = 120  # generous: only catches a hang


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment for ``lich`` subprocesses: no LICH_* or keys from the developer's
    shell, no user config."""
    home = tmp_path / "home"
    home.mkdir()
    return lich_env(home, PYTHONIOENCODING="utf-8")


def lich(args: Sequence[str], cwd: Path, env: dict[str, str],
         python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "lich", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=TIMEOUT_S, stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    model = ScriptedModel(responder=plan(
        ("word_count", {"path": "notes.txt"}),
        ("write_file", {"path": "poetry.lock", "content": "nope"}),
    ))
    with ScriptedServer(model) as running:
        yield running


def test_plugin_flag_adds_a_file_plugin_for_one_run(
    tmp_path: Path, env: dict[str, str], server: ScriptedServer
) -> None:
    work = tmp_path / "work"
    (work / "plugins_example").mkdir(parents=True)
    shutil.copy(EXAMPLES / "my_plugin.py", work / "plugins_example" / "my_plugin.py")
    (work / "notes.txt").write_text("one two three\nfour five\n")
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text(
        'plugins = ["builtin_tools", "openai_compat"]\n'
        "[[providers]]\n"
        'kind = "openai_compat"\n'
        'name = "scripted"\n'
        'model = "scripted-model"\n'
        f'base_url = "{server.base_url}"\n'
        'api_key_env = "LICH_EXAMPLES_TEST_KEY"\n'
    )
    env["LICH_EXAMPLES_TEST_KEY"] = "not-a-real-key"

    done = lich(["--plugin", "plugins_example/my_plugin.py", "count the words in notes.txt"],
                cwd=work, env=env)

    assert done.returncode == 0, done.stderr
    requests = server.model.requests
    assert "word_count" in requests[0].tools
    counted, blocked = (m.content for m in requests[-1].tool_results_since_user())
    assert json.loads(counted) == {"path": "notes.txt", "lines": 2, "words": 5, "chars": 24}
    assert json.loads(blocked)["error"] == (
        "blocked_by_plugin: protected_file: poetry.lock matches '*.lock' (my_plugin)"
    )
    assert not (work / "poetry.lock").exists()
    assert done.stdout.startswith("results: ")
    assert "protected_file" in done.stdout


def test_a_bad_guard_policy_fails_validate_and_every_run(
    tmp_path: Path, env: dict[str, str], server: ScriptedServer
) -> None:
    work = tmp_path / "work"
    (work / ".lich").mkdir(parents=True)
    config = work / ".lich" / "config.toml"
    config.write_text(
        'plugins = ["builtin_tools", "openai_compat", "guard", "audit"]\n'
        "[plugin_settings.guard]\n"
        "deny_commands = ['(unclosed']\n"
        "[plugin_settings.audit]\n"
        "preview_chars = -1\n"
        "[[providers]]\n"
        'kind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
        f'base_url = "{server.base_url}"\napi_key_env = "LICH_EXAMPLES_TEST_KEY"\n'
    )
    env["LICH_EXAMPLES_TEST_KEY"] = "not-a-real-key"

    validate = lich(["config", "validate"], cwd=work, env=env)
    run = lich(["run", "hello"], cwd=work, env=env)
    as_json = lich(["plugins", "--json"], cwd=work, env=env)

    assert validate.returncode == 2, validate.stderr
    assert (f"{config}: $.plugin_settings.guard.deny_commands[0]: "
            "invalid regular expression '(unclosed'") in validate.stderr
    assert f"{config}: $.plugin_settings.audit.preview_chars: must be at least 0, got -1" in (
        validate.stderr)
    assert run.returncode == 2
    assert "$.plugin_settings.guard.deny_commands[0]" in run.stderr
    assert server.model.requests == []  # refused before any model call
    # The plugins themselves load fine: it is their configuration that is wrong.
    reports = {r["entry"]: r for r in json.loads(as_json.stdout)}
    assert reports["guard"]["status"] == "loaded"
    assert reports["guard"]["distribution"] == "lich-examples"


def test_the_example_distribution_is_listed_without_being_imported(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # A copy, so the in-tree build leaves nothing in the repository; a version of its
    # own, so the listing provably comes from this installation; and a module that
    # leaves a marker file whenever it is imported.
    source = tmp_path / "src"
    shutil.copytree(EXAMPLES, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__"))
    pyproject = source / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"',
                                                       'version = "0.1.0+venvtest"', 1))
    marker = tmp_path / "imported.marker"
    with open(source / "lich_examples" / "__init__.py", "a") as fh:
        fh.write(
            "\nimport os as _os\n"
            "if _os.environ.get('LICH_EXAMPLES_MARKER'):\n"
            "    with open(_os.environ['LICH_EXAMPLES_MARKER'], 'a') as _fh:\n"
            "        _fh.write('imported\\n')\n"
        )
    venv = tmp_path / "venv"
    python = str(child_venv(venv))
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", str(source)],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=tmp_path,
    )
    assert install.returncode == 0, (
        "installing the example distribution offline needs setuptools and wheel "
        f"(the [test] extra):\n{install.stderr[-3000:]}"
    )
    work = tmp_path / "work"
    work.mkdir()
    env["LICH_EXAMPLES_MARKER"] = str(marker)

    listed = lich(["plugins", "available"], cwd=work, env=env, python=python)
    loaded = lich(["plugins", "--json"], cwd=work, env=env, python=python)

    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[1]: line for line in listed.stdout.splitlines()
            if line.startswith("│") and len(line.split()) > 3}
    for name, module in (("data_tools", "lich_examples.tools"), ("audit", "lich_examples.audit"),
                         ("guard", "lich_examples.guard")):
        assert name in rows, listed.stdout
        assert "lich-examples" in rows[name]
        assert "0.1.0+venvtest" in rows[name]
        assert module in rows[name]
        assert "yes" not in rows[name]  # installed, not enabled
    assert "yes" in rows["builtin_tools"]
    assert loaded.returncode == 0, loaded.stderr
    assert "guard" not in {r["entry"] for r in json.loads(loaded.stdout)}
    assert not marker.exists(), "listing the plugins imported their code"

    # The marker works: importing the package (as loading a plugin does) leaves it.
    imported = subprocess.run(
        [python, "-c", "import lich_examples.guard, sys; print(lich_examples.__file__)"],
        capture_output=True, text=True, timeout=TIMEOUT_S, env=env, cwd=work,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.strip().startswith(str(venv))
    assert marker.read_text() == "imported\n"
