"""``lich demo``: a real run with no network and no keys.

A scripted model (:class:`lich.testing.ScriptedServer`) is served on
127.0.0.1 in every wire dialect it speaks, at one root URL; the agent talks to
it over HTTP through whichever provider plugin comes first in the plugin list
(the demo names no provider: a provider is found as for any run) and uses the
builtin tools in a fresh temporary work dir — write a file, read it back, list
the directory — then answers. Nothing but the loopback interface is touched, and
no one is asked: its config allows exactly its one write (``[approvals] allow``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lich.cli.common import CommandError, echo_error, setup_logging
from lich.cli.options import JSON_OPTION, CliSettings, get_settings

if TYPE_CHECKING:
    from lich.agent import RunResult
    from lich.events import EventHandler

__all__ = ["DEMO_FILE", "DEMO_TASK", "demo", "demo_command"]

DEMO_FILE = "hello.txt"
DEMO_TASK = f"Write a greeting to {DEMO_FILE}, read it back, then list the work directory."


def _no_proxy_for_loopback() -> None:
    # A proxy from the environment must not be asked for 127.0.0.1: the demo promises
    # no network at all.
    hosts = "127.0.0.1,localhost,::1"
    for var in ("NO_PROXY", "no_proxy"):
        current = os.environ.get(var, "")
        os.environ[var] = f"{current},{hosts}" if current else hosts


@click.command("demo")
@JSON_OPTION
@click.option("--no-stream", "no_stream", is_flag=True, default=None, expose_value=False,
              callback=lambda ctx, _p, v: setattr(get_settings(ctx), "no_stream", True)
              if v else None, help="Whole answers instead of streamed text.")
@click.pass_context
def demo_command(ctx: click.Context) -> None:
    """A real run with no network and no keys.

    Starts a scripted model server on 127.0.0.1; the agent reaches it over HTTP
    through a provider plugin and uses the builtin tools in a temporary work dir
    (write a file, read it back, list the directory).
    """
    ctx.exit(demo(get_settings(ctx)))


def demo(settings: CliSettings) -> int:
    """Run the demo; returns the exit code."""
    from lich.cli._render import HumanRenderer, JsonRenderer, make_err_console
    from lich.cli.common import assemble
    from lich.cli.run import execute
    from lich.config import BUILTIN_PLUGINS, LichConfig, ProviderConfig
    from lich.testing import DIALECTS, ScriptedModel, ScriptedServer, demo_responder

    err = make_err_console()
    setup_logging(settings.log_level, err)
    _no_proxy_for_loopback()
    work_dir = Path(tempfile.mkdtemp(prefix="lich-demo-"))
    model = ScriptedModel(responder=demo_responder(DEMO_FILE))
    with ScriptedServer(model, dialects=tuple(DIALECTS)) as server:
        values: dict[str, Any] = {
            # No kind: the first provider plugin's, as for LICH_MODEL alone. Every
            # dialect is served at the root URL, so whichever it is finds its path.
            "providers": (
                ProviderConfig(name="demo", model="lich-demo-model", base_url=server.root_url),
            ),
            "work_dir": str(work_dir),
            "plugins": (*BUILTIN_PLUGINS, *settings.plugins),
            "stream": not settings.no_stream,
            "log_level": settings.log_level or "info",
            # Unattended on a fresh install: exactly the one write of the script is
            # allowed (inside the fresh temp dir); its read and listing are read-only.
            "tables": {"approvals": {"allow": [f"write_file({DEMO_FILE})"]}},
        }
        try:
            built = assemble(settings, config=LichConfig(**values), console=err)
        except CommandError as exc:
            echo_error(f"the demo could not start: {exc}")
            return exc.code
        assert built.agent is not None
        human = None if settings.json else HumanRenderer(err)
        renderer: EventHandler = JsonRenderer() if human is None else human
        if human is not None:
            human.note(f"demo: scripted model at {server.root_url} (loopback only, no keys); "
                       f"work dir {work_dir}", always=True)
            human.note(f"task: {DEMO_TASK}", always=True)

        def summary(result: RunResult) -> None:
            _summary(err, result, work_dir)

        return execute(built.agent, DEMO_TASK, renderer, human, summary=summary)


def _summary(err: Any, result: RunResult, work_dir: Path) -> None:
    from rich.text import Text

    from lich.cli.run import outcome_line

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
