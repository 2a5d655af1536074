"""``lich demo``: a real run with no network and no keys.

A scripted model (:class:`lich.testing.ScriptedServer`, OpenAI dialect) is
served on 127.0.0.1; the agent talks to it over HTTP through the
``openai_compat`` provider plugin and uses the builtin tools in a fresh
temporary work dir — write a file, read it back, list the directory — then
answers. Nothing but the loopback interface is touched.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lich._cli_app import (
    EXIT_USAGE,
    build_agent,
    echo_error,
    setup_logging,
    warn_plugin_failures,
)
from lich._cli_options import Settings

if TYPE_CHECKING:
    from lich.agent import RunResult
    from lich.events import EventHandler

__all__ = ["DEMO_TASK", "demo"]

DEMO_TASK = "Write a greeting to hello.txt, read it back, then list the work directory."


def _no_proxy_for_loopback() -> None:
    # A proxy from the environment must not be asked for 127.0.0.1: the demo promises
    # no network at all.
    hosts = "127.0.0.1,localhost,::1"
    for var in ("NO_PROXY", "no_proxy"):
        current = os.environ.get(var, "")
        os.environ[var] = f"{current},{hosts}" if current else hosts


def demo(settings: Settings) -> int:
    """Run the demo; returns the exit code."""
    from lich._cli_render import HumanRenderer, JsonRenderer, make_err_console
    from lich._cli_run import execute
    from lich.config import BUILTIN_PLUGINS, ConfigError, LichConfig, ProviderConfig
    from lich.plugins import PluginLoadError
    from lich.testing import ScriptedModel, ScriptedServer, demo_responder

    err = make_err_console()
    setup_logging(settings.log_level, err)
    _no_proxy_for_loopback()
    work_dir = Path(tempfile.mkdtemp(prefix="lich-demo-"))
    with ScriptedServer(ScriptedModel(responder=demo_responder())) as server:
        values: dict[str, Any] = {
            "providers": (
                ProviderConfig(kind="openai_compat", name="demo", model="lich-demo-model",
                               base_url=server.base_url),
            ),
            "work_dir": str(work_dir),
            "plugins": (*BUILTIN_PLUGINS, *settings.plugins),
            "stream": not settings.no_stream,
            "log_level": settings.log_level or "info",
        }
        config = LichConfig(**values)
        try:
            agent = build_agent(settings, config)
        except (ConfigError, PluginLoadError) as exc:
            echo_error(f"the demo could not start: {exc}")
            return EXIT_USAGE
        warn_plugin_failures(agent.host)
        human = None if settings.json else HumanRenderer(err)
        renderer: EventHandler = JsonRenderer() if human is None else human
        if human is not None:
            human.note(f"demo: scripted model at {server.base_url} (loopback only, no keys); "
                       f"work dir {work_dir}", always=True)
            human.note(f"task: {DEMO_TASK}", always=True)

        def summary(result: RunResult) -> None:
            _summary(err, result, work_dir)

        return execute(agent, DEMO_TASK, renderer, human, summary=summary)


def _summary(err: Any, result: RunResult, work_dir: Path) -> None:
    from rich.text import Text

    from lich._cli_run import outcome_line

    lines = [
        outcome_line(result),
        f"work dir:   {work_dir}",
        f"transcript: {result.session_path}",
        f"read it with: lich sessions show {result.session_id} "
        f"--session-dir {Path(result.session_path or '').parent}",
    ]
    for line in lines:
        prefix = "" if err.is_terminal else "[lich] "
        err.print(Text(prefix + line, style="dim" if err.is_terminal else ""), soft_wrap=True)
