"""``lich run TASK`` (and ``lich TASK``): one-shot runs, and Ctrl-C handling for every run.

Ctrl-C (SIGINT) fires the run's :class:`~lich.cancel.CancelToken`: the loop
stops wherever it is, closes open tool calls, records ``run_end`` with
``stopped_reason="aborted"`` and returns, so the transcript stays readable.
A second Ctrl-C cancels the run's task outright (the agent still records the
abort). SIGTERM is handled like the first Ctrl-C.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from attrs import frozen

from lich.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    CommandError,
    assemble,
    echo_error,
)
from lich.cli.options import CliSettings, get_settings, run_options

if TYPE_CHECKING:
    from lich.agent import Agent, RunResult
    from lich.cancel import CancelToken
    from lich.events import EventHandler
    from lich.types import Message, ProviderError

__all__ = [
    "Interruptible",
    "describe_provider_error",
    "exit_code_for",
    "one_shot",
    "outcome_line",
    "run_agent",
]


@frozen
class Interruptible:
    """How an interruptible run ended.

    ``result`` is ``None`` when the run's task was cancelled outright (second
    Ctrl-C). ``signal_name`` names the signal that stopped it, if any.
    """

    result: RunResult | None
    signal_name: str | None = None


def _install(loop: asyncio.AbstractEventLoop, signum: int, handler: Callable[[], None]) -> Any:
    try:
        loop.add_signal_handler(signum, handler)
        return "loop"
    except (NotImplementedError, RuntimeError, ValueError):
        # No loop signal support (Windows, or not the main thread): a plain handler that
        # hands over to the loop.
        try:
            return signal.signal(signum, lambda *_: loop.call_soon_threadsafe(handler))
        except (ValueError, OSError):
            return None


def _uninstall(loop: asyncio.AbstractEventLoop, signum: int, token: Any) -> None:
    if token == "loop":
        loop.remove_signal_handler(signum)
    elif token is not None:
        signal.signal(signum, token)


async def run_agent(
    agent: Agent,
    text: str,
    *,
    history: list[Message] | None = None,
    session_id: str | None = None,
    on_event: EventHandler | None = None,
    on_signal: Callable[[str, int], None] | None = None,
    cancel: CancelToken | None = None,
) -> Interruptible:
    """Run ``text`` on ``agent``; Ctrl-C and SIGTERM cancel the run, not the process.

    ``on_signal(name, count)`` is told about each signal (to print a notice).
    ``cancel`` lets the caller cancel the run too (e.g. when stdout is gone).
    Provider failures propagate as :class:`~lich.types.ProviderError`.
    """
    from lich.cancel import CancelToken

    loop = asyncio.get_running_loop()
    cancel = cancel or CancelToken()
    task = asyncio.ensure_future(
        agent.run(text, history=history, session_id=session_id, cancel=cancel, on_event=on_event)
    )
    seen: list[str] = []

    def handler(name: str) -> Callable[[], None]:
        def fire() -> None:
            seen.append(name)
            if on_signal is not None:
                on_signal(name, len(seen))
            if len(seen) == 1:
                cancel.cancel()
            else:
                task.cancel()

        return fire

    installed = [(signum, _install(loop, signum, handler(name)))
                 for signum, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM"))]
    try:
        result = await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if seen and (current is None or not current.cancelling()):
            return Interruptible(None, seen[0])
        raise
    finally:
        for signum, token in installed:
            _uninstall(loop, signum, token)
    return Interruptible(result, seen[0] if seen else None)


def exit_code_for(outcome: Interruptible) -> int:
    """0 final; 1 budget or aborted; 130 / 143 when a signal stopped the run."""
    result = outcome.result
    if outcome.signal_name and (result is None or result.stopped_reason == "aborted"):
        return EXIT_TERMINATED if outcome.signal_name == "SIGTERM" else EXIT_INTERRUPTED
    if result is not None and result.stopped_reason == "final":
        return EXIT_OK
    return EXIT_STOPPED


def describe_provider_error(exc: ProviderError) -> str:
    """``model call failed: <who and where>: <kind>: <why>``, and any attempt of a
    router whose cause its message does not already say (each cause once)."""
    text = str(exc)
    lines = [f"model call failed: {text}"]
    for provider, attempt, kind, message in exc.attempts:
        if message in text:  # the router's message already says it (e.g. cut to fit)
            continue
        text += message
        lines.append(f"  {provider} attempt {attempt}: {kind}: {message}")
    return "\n".join(lines)


def read_task(words: tuple[str, ...]) -> str | None:
    """The task: the words, or stdin when there are none and stdin is not a terminal."""
    text = " ".join(words).strip()
    if text:
        return text
    stdin = sys.stdin
    if stdin is None or stdin.isatty():
        return None
    return stdin.read().strip() or None


@click.command("run")
@run_options
@click.argument("task", nargs=-1)
@click.pass_context
def run_command(ctx: click.Context, task: tuple[str, ...]) -> None:
    """Run one task (what `lich TASK...` does).

    The answer streams to stdout, progress goes to stderr. With no TASK and
    stdin not a terminal, the task is read from stdin. Use `lich run -- TASK`
    when the task starts with a command's name or a dash.
    """
    ctx.exit(one_shot(get_settings(ctx), task))


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def one_shot(settings: CliSettings, words: tuple[str, ...]) -> int:
    """``lich TASK…``: run the task once; returns the exit code."""
    from lich.cli._render import HumanRenderer, JsonRenderer, make_err_console
    from lich.sessions import SessionNotFound

    task = read_task(words)
    if task is None:
        echo_error("no task: give it as words (lich \"do this\") or on stdin "
                   "(echo \"do this\" | lich); `lich --help` lists the commands")
        return EXIT_USAGE
    err = make_err_console()
    try:
        built = assemble(settings, console=err)
    except CommandError as exc:
        return exc.report()
    assert built.agent is not None
    if not settings.yes and _stdin_is_terminal():
        from lich.cli.approve import install_terminal_approver

        # Asks on the terminal when stdin is one; otherwise there is no approver (nor an
        # import of the prompt's code), and a call that needs approval is denied
        # (approval_unavailable), said on stderr.
        install_terminal_approver(built.host, built.loaded, err)
    session_id = None
    if settings.resume:
        try:
            session_id = built.agent.sessions.resolve(settings.resume)
        except (SessionNotFound, ValueError, OSError) as exc:  # OSError: a store's failure
            echo_error(f"--resume: {exc}")
            built.agent.sessions.close()
            return EXIT_USAGE
    human = None if settings.json else HumanRenderer(err)
    renderer: EventHandler = JsonRenderer() if human is None else human
    return execute(built.agent, task, renderer, human, session_id=session_id)


def execute(
    agent: Agent,
    task: str,
    renderer: EventHandler,
    human: Any,
    *,
    session_id: str | None = None,
    summary: Callable[[RunResult], None] | None = None,
) -> int:
    """Run ``task`` to its end on a fresh event loop and report it; returns the exit code."""
    from lich.cancel import CancelToken
    from lich.types import ProviderError

    # Nobody reads stdout any more (`lich … | head`): stop the run instead of paying for it.
    cancel = CancelToken()
    if hasattr(renderer, "on_closed"):
        renderer.on_closed = cancel.cancel

    def on_signal(name: str, count: int) -> None:
        if human is None:
            return
        human.close()
        if count == 1:
            human.note(f"{name}: cancelling the run (press Ctrl-C again to stop at once)",
                       "yellow", always=True)

    async def go() -> Interruptible:
        try:
            return await run_agent(agent, task, session_id=session_id, on_event=renderer,
                                   on_signal=on_signal, cancel=cancel)
        finally:
            await agent.aclose()

    try:
        outcome = asyncio.run(go())
    except ProviderError as exc:
        if human is not None:
            human.close()
        echo_error(describe_provider_error(exc))
        return EXIT_STOPPED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        if human is not None:
            human.close()
    result = outcome.result
    if result is not None:
        if summary is not None:
            summary(result)
        elif human is not None:
            _summary(human, result, priced=agent.host.has_impls("lich_price_call"))
    return exit_code_for(outcome)


def outcome_line(result: RunResult, *, priced: bool = False) -> str:
    """``final after 4 turns, 1,204 tokens, $0.0031``: how a run ended, for the closing
    line. The cost is there when ``priced`` (a plugin prices calls): ``cost unknown``
    when it could not price them all. ``1,204 tokens (estimated)`` when a provider
    reported no usage for some call."""
    from lich.cli._render import counted
    from lich.money import format_cost

    turns = result.outcome.turns_used
    cost = f", {format_cost(result.cost_usd)}" if priced else ""
    # The provider reported no usage for some call: lich's chars / 4 estimate.
    estimated = " (estimated)" if result.usage.estimated else ""
    return (f"{result.stopped_reason} after {counted(turns, 'turn')}, "
            f"{counted(result.usage.total_tokens, 'token')}{estimated}{cost}")


def _summary(human: Any, result: RunResult, *, priced: bool = False) -> None:
    where = f"; transcript {result.session_path}" if result.session_path else ""
    human.note(f"{outcome_line(result, priced=priced)}; session {result.session_id}{where}",
               always=False)
