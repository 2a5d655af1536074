"""B2 — start-up: ``lich --version``, ``lich --help`` and ``lich plugins`` as fresh processes.

Two throw-away virtual environments are made with ``--system-site-packages``
(no network, no pip: lich itself comes from the existing install), each with a
``lich`` console script written the way pip writes one. One gets P generated
plugin distributions — a module and a ``.dist-info`` directory whose entry
point is in the group ``lich`` — which no config enables, so they are only
*installed*, as a user's third-party plugins would be. Every command runs in a
clean working directory with an empty user config dir and no ``LICH_*``
variables, against ``python -c pass`` from the same environment; commands and
environments are interleaved and repeated.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import Target, fmt_ms, fmt_ratio, fmt_spread, markdown_table, summary
from lich.testing import child_venv

__all__ = ["COMMANDS", "make_env", "make_plugin_dists", "run", "tables"]

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["{python}", "-c", "pass"],
    "lich --version": ["{lich}", "--version"],
    "lich --help": ["{lich}", "--help"],
    "lich plugins": ["{lich}", "plugins"],
}

_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from lich.cli import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""

_PLUGIN = '''"""Generated benchmark plugin {n}."""

from lich import hookimpl, tool


@tool
def bench_tool_{n}(text: str) -> str:
    """Return the text."""
    return text


@hookimpl
def lich_register_tools(registry):
    registry.register(bench_tool_{n})
'''


def make_env(path: Path) -> dict[str, str]:
    """A venv at ``path`` seeing this environment's packages (:func:`lich.testing.child_venv`),
    with a ``lich`` script.

    Returns ``{"python", "lich", "site"}``.
    """
    python = child_venv(path)
    bindir = python.parent
    site = Path(sysconfig.get_path("purelib", vars={"base": str(path),
                                                      "platbase": str(path)}))
    lich = bindir / "lich"
    lich.write_text(_SCRIPT.format(python=python), encoding="utf-8")
    lich.chmod(0o755)
    return {"python": str(python), "lich": str(lich), "site": str(site)}


def make_plugin_dists(site: Path, count: int) -> list[str]:
    """Install ``count`` minimal plugin distributions into ``site``; returns their names."""
    names = []
    for n in range(count):
        name = f"lich_bench_plugin_{n:03d}"
        (site / f"{name}.py").write_text(_PLUGIN.format(n=n), encoding="utf-8")
        info = site / f"{name}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n"
            "Summary: A generated lich plugin (benchmark)\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[lich]\nbench_{n:03d} = {name}\n",
                                               encoding="utf-8")
        (info / "top_level.txt").write_text(f"{name}\n", encoding="utf-8")
        (info / "INSTALLER").write_text("lich-bench\n", encoding="utf-8")
        (info / "RECORD").write_text(
            f"{name}.py,,\n{info.name}/METADATA,,\n{info.name}/entry_points.txt,,\n"
            f"{info.name}/top_level.txt,,\n{info.name}/INSTALLER,,\n{info.name}/RECORD,,\n",
            encoding="utf-8")
        names.append(name)
    return names


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LICH_", "PYTHON", "VIRTUAL_ENV"))}
    # No user config: platformdirs looks under these.
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local" / "share"), NO_COLOR="1", COLUMNS="100")
    return env


def _time(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=120)
    return time.perf_counter() - started, proc


def run(plugins: int = 50, reps: int = 10) -> dict[str, Any]:
    """Run B2 and return its results (JSON-able)."""
    out: dict[str, Any] = {"params": {"plugins": plugins, "reps": reps}, "checks": []}
    with tempfile.TemporaryDirectory(prefix="lich-bench-b2-") as tmp:
        root = Path(tmp)
        home, cwd = root / "home", root / "work"
        home.mkdir()
        cwd.mkdir()
        env = _clean_env(home)
        envs = {0: make_env(root / "venv0"), plugins: make_env(root / f"venv{plugins}")}
        make_plugin_dists(Path(envs[plugins]["site"]), plugins)
        samples: dict[str, dict[str, list[float]]] = {
            str(p): {c: [] for c in COMMANDS} for p in envs}

        def argv(command: str, paths: dict[str, str]) -> list[str]:
            return [a.format(**paths) for a in COMMANDS[command]]

        # Sanity: the generated plugins are seen (installed, not loaded) in the one
        # environment and not in the other. This also warms the file system caches.
        for p, paths in envs.items():
            _, avail = _time([paths["lich"], "plugins", "available"], cwd, env)
            seen = avail.stdout.decode(errors="replace").count("lich_bench_plugin_")
            out.setdefault("plugins_seen", {})[str(p)] = seen
        if out["plugins_seen"].get(str(plugins), 0) < plugins or out["plugins_seen"]["0"]:
            out["checks"].append(f"`lich plugins available` listed {out['plugins_seen']} "
                                 f"generated plugins (expected 0 and {plugins})")
        for rep in range(reps):
            order = list(COMMANDS)
            shift = rep % len(order)
            for command in order[shift:] + order[:shift]:
                for p, paths in (envs.items() if rep % 2 == 0 else reversed(envs.items())):
                    elapsed, proc = _time(argv(command, paths), cwd, env)
                    samples[str(p)][command].append(elapsed)
                    if proc.returncode != 0:
                        out["checks"].append(f"{command} (P={p}) exited {proc.returncode}: "
                                             f"{proc.stderr.decode(errors='replace')[-500:]}")
    out["samples_s"] = samples
    out["summary"] = {p: {c: summary(s) for c, s in per.items()} for p, per in samples.items()}
    med = {p: {c: v["median"] for c, v in per.items()} for p, per in out["summary"].items()}
    bare = med["0"]["python -c pass"]
    out["ratios"] = {
        "version_vs_python": med["0"]["lich --version"] / bare,
        "help_vs_python": med["0"]["lich --help"] / bare,
        "help_plugins_vs_none": med[str(plugins)]["lich --help"] / med["0"]["lich --help"],
        "plugins_plugins_vs_none": med[str(plugins)]["lich plugins"] / med["0"]["lich plugins"],
        "version_plugins_vs_none":
            med[str(plugins)]["lich --version"] / med["0"]["lich --version"],
    }
    out["targets"] = [
        Target("B2 `lich --version` ÷ `python -c pass`", "<=", 4.0,
               out["ratios"]["version_vs_python"]).as_dict(),
        Target(f"B2 `lich --help` with {plugins} plugins installed ÷ with 0", "<=", 1.2,
               out["ratios"]["help_plugins_vs_none"]).as_dict(),
    ]
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    plugins = str(result["params"]["plugins"])
    summ = result["summary"]
    bare = summ["0"]["python -c pass"]["median"]
    head = ["command", "0 plugins ms", f"{plugins} plugins ms", "÷ python -c pass (0)",
            f"{plugins} ÷ 0"]
    body = []
    for command in COMMANDS:
        a, b = summ["0"][command], summ[plugins][command]
        body.append([command, fmt_spread(a, lambda x: fmt_ms(x, 1)),
                     fmt_spread(b, lambda x: fmt_ms(x, 1)), fmt_ratio(a["median"] / bare),
                     fmt_ratio(b["median"] / a["median"])])
    title = (f"B2 start-up — fresh processes, median (min–max) of {result['params']['reps']} "
             f"interleaved runs; {plugins} generated plugin distributions installed, none enabled")
    return [(title, markdown_table(head, body))]
