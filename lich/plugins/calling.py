"""Calling the run-time hooks: the before/after tool-call hooks, the run observers
and ``lich_event``.

Every implementation runs under the host's ``hook_timeout_s``: an ``async def``
one on the event loop, a plain one in a daemon thread (:mod:`lich.threads`), so
a hook that blocks cannot freeze the loop or keep lich from exiting — unless it is
marked :func:`lich.hooks.runs_inline` (quick and never waiting): then it is called
directly, in the caller's task, and its time checked against the deadline after. A failure
never escapes: a before-hook that fails blocks the call (fail closed), any other
hook is skipped with a warning naming its plugin.

Before-hooks compose one at a time — a :class:`~lich.hooks.Rewrite` chains into
the next hook, the first :class:`~lich.hooks.Block` wins, an :class:`~lich.hooks.Ask`
is collected and the chain goes on — then the check-hooks judge the final
arguments (they can only block), and after-hooks may each replace the result.
The approver (``lich_request_approval``) runs under ``approval_timeout_s``, not
``hook_timeout_s``: a person is slower than a hook. Each before- and check-hook
gets its own copy of the call (nothing in it that can change is shared, see
``_own_call``), so the arguments that run are exactly the ones the last check saw.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
import math
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy
from attrs import evolve, frozen

from lich._eager import start_eagerly
from lich.hooks import (
    RUNS_INLINE_ATTR,
    Approval,
    ApprovalRequest,
    Ask,
    Block,
    Rewrite,
    RunInfo,
    RunOutcome,
    Stop,
)
from lich.threads import _plugin_error, run_in_daemon_thread
from lich.types import ToolCall, ToolResult, Usage

if TYPE_CHECKING:
    from lich.config import LichConfig, ProviderConfig
    from lich.events import Envelope
    from lich.tools import ToolRegistry

__all__ = ["ApprovalAnswer", "HookCaller", "ToolDecision"]

# The host's one logger, whichever of its modules logs: the CLI quiets it by this name.
log = logging.getLogger("lich.plugins")


@frozen
class ToolDecision:
    """The outcome of the before- and check-hooks for one call.

    ``asked_by`` names the plugins that answered :class:`~lich.hooks.Ask` (their
    reasons in ``ask_reasons``): the call runs only if a person approves.
    """

    call: ToolCall
    rewritten_by: tuple[str, ...] = ()
    blocked_by: str | None = None
    reason: str | None = None
    asked_by: tuple[str, ...] = ()
    ask_reasons: tuple[str, ...] = ()


@frozen
class ApprovalAnswer:
    """What came of asking the approvers about one call.

    ``approval`` is the first answer (``None``: no approver answered); ``plugin``
    the plugin that gave it; ``error`` says why the approvers failed (one raised,
    answered something else, or ``timed_out``) — the call is then denied.
    """

    approval: Approval | None = None
    plugin: str | None = None
    error: str | None = None
    timed_out: bool = False


# Exactly these types (not subclasses, which may carry mutable state) are immutable
# values a hook's copy of the arguments can share with the original.
_IMMUTABLE: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def _own_call(call: ToolCall) -> ToolCall:
    """``call`` with arguments of its own, for one hook: nothing a hook can change in
    place is shared with ``call``.

    The new dict is the ``ToolCall`` converter's (a copy of the top level); a value
    of an immutable scalar type is shared, since nothing can change it in place —
    ``copy.deepcopy`` itself hands back these very objects, by the same exact-type
    test — and every other value (a list, a dict, anything else) is deep-copied.
    Arguments are JSON objects whose values are mostly strings and numbers, so most
    calls cost one dict copy instead of a ``copy.deepcopy`` walk and an
    ``attrs.evolve``. (What differs from one deep copy of the whole dict: two
    top-level values that were one object become two; JSON has no such sharing.)

    Why not less. A read-only or copy-on-write view cannot see a change made through
    a nested list or dict it handed out, and hooks expect plain JSON values; a
    marker by which a plugin declares that it does not change its arguments is a
    promise no one checks, and one broken promise (or a task the hook left behind
    that changes them later) would reach the tool unseen. Sharing only what cannot
    change is sound whatever the hook does.

    Every field of ``ToolCall`` is passed on (a test compares with ``attrs.evolve``).
    """
    own = ToolCall(call.id, call.name, call.args, call.args_error)
    args = own.args
    for key, value in args.items():
        if type(value) not in _IMMUTABLE:
            args[key] = copy.deepcopy(value)  # replaces a value: the dict keeps its size
    return own


def _changed(copied: Mapping[str, Any], original: Mapping[str, Any]) -> bool:
    """Whether a hook changed its copy of the arguments; a comparison that fails
    (a value a Rewrite put there whose ``==`` raises) counts as a change."""
    try:
        return bool(copied != original)
    except Exception:
        return True


def _outcome(task: asyncio.Future[Any]) -> Any:
    """A finished hook's answer, or what it raised.

    Only the hook caller ever cancels a hook's task, and then it never asks for the
    result (:meth:`HookCaller._until` gives up on it). So a ``CancelledError`` here is
    the hook's own — raised, or its code cancelled its own task — and so is a
    ``GeneratorExit``: a failure of the hook, handed on as a ``RuntimeError`` that
    blocks the call like any other (fail closed). Re-raised as they are, they would
    reach the run as if *it* had been cancelled and end it. ``KeyboardInterrupt`` and
    ``SystemExit`` stay as they are: asyncio ends the event loop with them.
    """
    try:
        return task.result()
    except (Exception, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise _plugin_error(exc) from exc


def _collect(task: asyncio.Future[Any]) -> None:
    """Take the outcome of a finished hook whose answer no longer counts (it timed
    out), so that a failure is logged here and not as never retrieved."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("a timed-out hook failed after its deadline: %s", task.exception())


class HookCaller:
    """Calls the run-time hooks of the plugins registered in a pluggy manager.

    :class:`~lich.plugins.PluginHost` is a hook caller over its own manager.

    :param pm: the manager, with lich's hook specifications added.
    :param hook_timeout_s: how long a run-time hook may take before it counts
        as failed (a before-hook then blocks the call).
    """

    def __init__(self, pm: pluggy.PluginManager, *, hook_timeout_s: float = 10.0) -> None:
        self.pm = pm
        self.hook_timeout_s = hook_timeout_s
        self._pending_events: set[asyncio.Task[Any]] = set()
        # Hooks that overran hook_timeout_s, cancelled but maybe still running
        # (one may catch the cancellation): referenced until they finish.
        self._abandoned: set[asyncio.Future[Any]] = set()
        # plugin name -> the run whose lich_event failure was last logged as a warning
        self._event_warned: dict[str, str] = {}

    def _describe(self, exc: BaseException) -> str:
        """A hook's failure for a log line or a ``hook_error``: ``ErrorType: message``,
        or ``timed out after <hook_timeout_s>s`` for a :class:`TimeoutError`."""
        if isinstance(exc, TimeoutError):
            return f"timed out after {self.hook_timeout_s:g}s"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def _impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        # pluggy calls implementations last-registered first; keep that order.
        caller = getattr(self.pm.hook, hook_name)
        return list(reversed(caller.get_hookimpls()))

    def has_impls(self, hook_name: str) -> bool:
        """Whether any loaded plugin implements ``hook_name``."""
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    async def _call_timed(
        self, impl: pluggy.HookImpl, kwargs: Mapping[str, Any], timeout_s: float | None = -1.0
    ) -> Any:
        """Call ``impl`` under ``timeout_s`` (``hook_timeout_s`` by default; ``None``:
        no limit): inline if it is marked so, an ``async def`` as a task of its own,
        a plain ``def`` in a worker thread."""
        args = {name: kwargs[name] for name in impl.argnames}
        if timeout_s is not None and timeout_s < 0:
            timeout_s = self.hook_timeout_s
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        if getattr(impl.function, RUNS_INLINE_ATTR, False):
            return self._call_inline(impl, args, loop, deadline)
        if inspect.iscoroutinefunction(impl.function):
            return await self._until(impl.function(**args), deadline)
        # A plain function may block; a worker thread keeps a hanging hook from
        # freezing the event loop, and lets the timeout apply. A daemon thread, so a
        # hook that never returns cannot keep the process from exiting (see _threads).
        result = await self._until(run_in_daemon_thread(impl.function, **args), deadline)
        if inspect.isawaitable(result):
            # One budget for the whole hook: a plain function handing back a
            # coroutine does not earn a second hook_timeout_s.
            result = await self._until(result, deadline)
        return result

    def _call_inline(self, impl: pluggy.HookImpl, args: Mapping[str, Any],
                     loop: asyncio.AbstractEventLoop, deadline: float | None) -> Any:
        """``impl`` (marked :func:`lich.hooks.runs_inline`) called right here: on the
        loop, in the caller's task, with no thread and no task of its own.

        Held to its deadline as an ``async def`` hook's first step is (see
        :meth:`_until`): nothing can interrupt synchronous code, so the time is
        measured afterwards, and an answer — or a failure — in hand only after the
        deadline is a timed-out hook's. Its exceptions are hook failures: a
        ``CancelledError`` or ``GeneratorExit`` is its own code's (nobody cancelled
        anything: no await happened), handed on as a ``RuntimeError`` so that it
        blocks the call instead of ending the run, and a ``StopIteration`` likewise
        (raised out of a coroutine it would become an anonymous ``RuntimeError``).
        ``KeyboardInterrupt`` and ``SystemExit`` propagate: on the loop's thread they
        may be a real signal or exit.
        """
        failure: BaseException | None = None
        try:
            answer = impl.function(**args)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            failure, answer = _plugin_error(exc), None
        if deadline is not None and deadline <= loop.time():
            if failure is not None:
                log.debug("a timed-out inline hook failed after its deadline: %s", failure)
            if inspect.iscoroutine(answer):
                answer.close()  # never awaited: no "never awaited" warning
            raise TimeoutError("timed out")
        if failure is not None:
            raise failure
        if inspect.isawaitable(answer):
            # Refused rather than awaited: the marker promises an answer at once, and
            # a hook handing back something to wait for breaks that promise (most
            # likely a plain wrapper around an async function, which must not be
            # marked). Failing says so; awaiting would hide it.
            if inspect.iscoroutine(answer):
                answer.close()
            name = getattr(impl.function, "__name__", "the hook")
            raise TypeError(f"{name} is marked runs_inline but returned "
                            f"an awaitable ({type(answer).__name__}); an inline hook answers "
                            "at once (a hook that waits is an async def, not marked)")
        return answer

    async def _until(self, awaitable: Awaitable[Any], deadline: float | None) -> Any:
        """``awaitable``'s result if it settles by ``deadline``, else :class:`TimeoutError`.

        Not ``asyncio.wait_for``: that cancels the coroutine and then waits for it
        to finish, and returns its value if it catches the cancellation — a hook
        that swallows ``CancelledError`` and returns ``None`` would both overrun
        the timeout and have its late answer count (a before-hook allowing the
        call). Here the wait ends at the deadline whatever the hook does; the
        cancelled task finishes in the background, kept referenced until then
        and its outcome collected so it is neither garbage-collected while
        pending nor reported as an unretrieved exception. A cancelled caller
        abandons the hook the same way.

        A coroutine runs as a task of its own whose first step is taken at once
        (:func:`lich._eager.start_eagerly`): a hook that answers without waiting —
        most do — is done before this returns to the loop, with no wait at all.
        Otherwise the wait is one future woken by the task's end or by one timer
        at the deadline (not ``asyncio.wait``: no set, no extra future per call).
        A first step that held the loop past the deadline (synchronous code, which
        nothing can interrupt) times out, whatever it answered.
        """
        loop = asyncio.get_running_loop()
        if inspect.iscoroutine(awaitable):
            task: asyncio.Future[Any] = start_eagerly(awaitable)
            if deadline is not None and deadline <= loop.time():
                # The first step held the loop past the deadline (synchronous code:
                # nothing could interrupt it). Its answer came late, so it does not
                # count, as a late one would not after a wait.
                if task.done():
                    _collect(task)
                else:
                    self._abandon(task)
                raise TimeoutError("timed out")
            if task.done():
                return _outcome(task)
        else:
            task = asyncio.ensure_future(awaitable)
            if deadline is not None and deadline <= loop.time():
                self._abandon(task)
                raise TimeoutError("timed out")
        waiter: asyncio.Future[None] = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        task.add_done_callback(wake)
        timer = None if deadline is None else loop.call_at(deadline, wake)
        try:
            await waiter
        except BaseException:  # the caller was cancelled: the hook goes too
            self._abandon(task)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            task.remove_done_callback(wake)
        if not task.done():
            self._abandon(task)
            raise TimeoutError("timed out")
        return _outcome(task)

    def _abandon(self, task: asyncio.Future[Any]) -> None:
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._abandoned_done)

    def _abandoned_done(self, task: asyncio.Future[Any]) -> None:
        self._abandoned.discard(task)
        _collect(task)

    async def _observe(self, hook_name: str, kwargs: Mapping[str, Any]) -> None:
        for impl in self._impls(hook_name):
            try:
                await self._call_timed(impl, kwargs)
            except Exception as exc:
                log.warning("%s of plugin %s failed (skipped): %s", hook_name, impl.plugin_name,
                            self._describe(exc))

    async def run_start(self, run: RunInfo) -> None:
        """``lich_run_start`` for every plugin; failures are logged and skipped."""
        await self._observe("lich_run_start", {"run": run})

    async def run_end(self, run: RunInfo, outcome: RunOutcome) -> None:
        """``lich_run_end`` for every plugin; failures are logged and skipped."""
        await self._observe("lich_run_end", {"run": run, "outcome": outcome})

    def price_call(
        self, provider: ProviderConfig | None, model: str, usage: Usage, config: LichConfig
    ) -> float | None:
        """``lich_price_call``: the first implementation's price, or ``None`` (unknown).

        Inline and synchronous (it runs once per model call, before ``llm_end``);
        an implementation that raises, is ``async`` or answers something other
        than a finite number >= 0 is logged and the next one asked.
        """
        kwargs = {"provider": provider, "model": model, "usage": usage, "config": config}
        for impl in self._impls("lich_price_call"):
            try:
                answer = impl.function(**{name: kwargs[name] for name in impl.argnames})
            except Exception as exc:
                log.warning("lich_price_call of plugin %s failed (skipped): %s",
                            impl.plugin_name, self._describe(exc))
                continue
            if answer is None:
                continue
            if inspect.isawaitable(answer):
                if inspect.iscoroutine(answer):
                    answer.close()  # never awaited: no "never awaited" warning
                log.warning("lich_price_call of plugin %s is async (skipped); it must be a "
                            "plain def", impl.plugin_name)
                continue
            if (isinstance(answer, bool) or not isinstance(answer, int | float)
                    or not math.isfinite(answer) or answer < 0):
                log.warning("lich_price_call of plugin %s returned %r (skipped); expected a "
                            "cost >= 0 in US dollars or None", impl.plugin_name, answer)
                continue
            return float(answer)
        return None

    async def before_model_call(
        self, run: RunInfo, turn: int, usage: Usage, cost_usd: float | None
    ) -> tuple[Stop, str] | None:
        """``lich_before_model_call``: the first ``Stop`` and the plugin that gave it.

        Failures are logged and skipped (see the hook's docstring).
        """
        kwargs = {"run": run, "turn": turn, "usage": usage, "cost_usd": cost_usd}
        for impl in self._impls("lich_before_model_call"):
            try:
                answer = await self._call_timed(impl, kwargs)
            except Exception as exc:
                log.warning("lich_before_model_call of plugin %s failed (skipped): %s",
                            impl.plugin_name, self._describe(exc))
                continue
            if isinstance(answer, Stop):
                return answer, impl.plugin_name
            if answer is not None:
                log.warning("lich_before_model_call of plugin %s returned %s (ignored); "
                            "expected Stop or None", impl.plugin_name, type(answer).__name__)
        return None

    async def shutdown(self, registry: ToolRegistry) -> None:
        """``lich_shutdown`` for every plugin: the agent whose tools ``registry`` holds
        is closing. Failures are logged and skipped; each is bounded by
        ``hook_timeout_s``."""
        await self._observe("lich_shutdown", {"registry": registry})

    def shutdown_sync(self, registry: ToolRegistry) -> None:
        """:meth:`shutdown` outside an event loop (commands that build a registry
        without an agent: ``lich tools``, ``lich plugins``, ``lich config validate``)."""
        if self.has_impls("lich_shutdown"):
            asyncio.run(self.shutdown(registry))

    async def _ask(
        self, impl: pluggy.HookImpl, hook_name: str, call: ToolCall, kwargs: Mapping[str, Any]
    ) -> tuple[Any, str | None]:
        """One before- or check-hook on its own copy of ``call``: its answer, or
        the ``hook_error`` reason that blocks the call.

        A copy per hook rather than a read-only view: the arguments stay the plain
        JSON values a hook expects (lists, dicts), and whatever a hook does to its
        copy — at once or later, from a task it left behind — never reaches the
        tool. Changing it in place is refused, so a plugin author learns that a
        change is only ever a ``Rewrite``.
        """
        own = _own_call(call)
        try:
            answer = await self._call_timed(impl, {**kwargs, "call": own})
        except Exception as exc:
            return None, f"hook_error ({impl.plugin_name}): {self._describe(exc)}"
        if _changed(own.args, call.args):
            return None, (
                f"hook_error ({impl.plugin_name}): {hook_name} changed call.args in place; "
                "return a Rewrite instead"
            )
        return answer, None

    async def before_tool_call(self, call: ToolCall, run: RunInfo) -> ToolDecision:
        """Run the before-hooks one at a time (rewrites chain, the first block wins,
        asks are collected), then the check-hooks on the final arguments; a hook that
        fails blocks (fail closed)."""
        rewritten_by: list[str] = []
        asked_by: list[str] = []
        reasons: list[str] = []
        for impl in self._impls("lich_before_tool_call"):
            answer, error = await self._ask(impl, "lich_before_tool_call", call, {"run": run})
            if error is not None:
                return ToolDecision(call, tuple(rewritten_by), impl.plugin_name, error)
            if answer is None:
                continue
            if isinstance(answer, Block):
                return ToolDecision(call, tuple(rewritten_by), impl.plugin_name, answer.reason)
            if isinstance(answer, Ask):
                # Not decided here: a later hook may still block (a Block wins over
                # every Ask) or rewrite what the person will be asked about.
                asked_by.append(impl.plugin_name)
                reasons.append(answer.reason)
                continue
            if isinstance(answer, Rewrite):
                # A deep copy: the hook keeps no handle on the arguments that run.
                try:
                    args = copy.deepcopy(dict(answer.args))
                except Exception as exc:
                    reason = (f"hook_error ({impl.plugin_name}): its Rewrite arguments cannot "
                              f"be copied: {self._describe(exc)}")
                    return ToolDecision(call, tuple(rewritten_by), impl.plugin_name, reason)
                call = evolve(call, args=args)
                rewritten_by.append(impl.plugin_name)
                continue
            reason = (
                f"hook_error ({impl.plugin_name}): lich_before_tool_call returned "
                f"{type(answer).__name__}; expected Block, Ask, Rewrite or None"
            )
            return ToolDecision(call, tuple(rewritten_by), impl.plugin_name, reason)
        checked = await self.check_tool_call(call, run)
        if not rewritten_by and not asked_by:
            return checked  # the common case: nothing to merge
        # One question, with each plugin's reason once: the approvals plugin asks in
        # both phases about arguments no one rewrote in between.
        asks = list(dict.fromkeys([*zip(asked_by, reasons, strict=True),
                                   *zip(checked.asked_by, checked.ask_reasons, strict=True)]))
        return evolve(checked, rewritten_by=tuple(rewritten_by),
                      asked_by=tuple(dict.fromkeys(p for p, _ in asks)),
                      ask_reasons=tuple(r for _, r in asks))

    async def check_tool_call(self, call: ToolCall, run: RunInfo) -> ToolDecision:
        """Run the check-hooks on ``call`` as it will run: each may block or ask; one
        that fails blocks (fail closed). Also what judges arguments a person edited
        (whose ``Ask`` answers the caller then ignores: that person said yes)."""
        asked_by: list[str] = []
        reasons: list[str] = []
        for impl in self._impls("lich_check_tool_call"):
            answer, error = await self._ask(impl, "lich_check_tool_call", call, {"run": run})
            if error is not None:
                return ToolDecision(call, blocked_by=impl.plugin_name, reason=error)
            if answer is None:
                continue
            if isinstance(answer, Block):
                return ToolDecision(call, blocked_by=impl.plugin_name, reason=answer.reason)
            if isinstance(answer, Ask):
                asked_by.append(impl.plugin_name)
                reasons.append(answer.reason)
                continue
            reason = (
                f"hook_error ({impl.plugin_name}): lich_check_tool_call returned "
                f"{type(answer).__name__}; expected Block, Ask or None (it cannot rewrite)"
            )
            return ToolDecision(call, blocked_by=impl.plugin_name, reason=reason)
        return ToolDecision(call, asked_by=tuple(asked_by), ask_reasons=tuple(reasons))

    async def request_approval(
        self, request: ApprovalRequest, run: RunInfo, timeout_s: float | None
    ) -> ApprovalAnswer:
        """Ask the approvers (``lich_request_approval``, first answer wins) about
        ``request.call``, all of them together under ``timeout_s`` (``None``: no
        limit). Never raises but for cancellation: a failing approver is an
        :class:`ApprovalAnswer` with an ``error``, which denies the call."""
        impls = self._impls("lich_request_approval")
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        kwargs = {"call": request.call, "run": run, "reason": request.reason,
                  "request": request}
        for impl in impls:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                answer = await self._call_timed(impl, kwargs, left)
            except TimeoutError:
                return ApprovalAnswer(plugin=impl.plugin_name, timed_out=True,
                                      error=f"no answer within {timeout_s:g}s")
            except Exception as exc:
                return ApprovalAnswer(plugin=impl.plugin_name, error=(
                    f"approval_error ({impl.plugin_name}): {self._describe(exc)}"))
            if answer is None:
                continue
            if isinstance(answer, Approval):
                return ApprovalAnswer(answer, impl.plugin_name)
            return ApprovalAnswer(plugin=impl.plugin_name, error=(
                f"approval_error ({impl.plugin_name}): lich_request_approval returned "
                f"{type(answer).__name__}; expected Approval or None"))
        return ApprovalAnswer()

    async def after_tool_call(
        self, call: ToolCall, result: ToolResult, run: RunInfo
    ) -> tuple[ToolResult, str | None]:
        """Run the after-hooks; returns the (possibly replaced) result and who replaced it last."""
        replaced_by: str | None = None
        for impl in self._impls("lich_after_tool_call"):
            # Its own copy, as for the before-hooks: one after-hook changing
            # call.args in place must not alter what a later one (an audit log)
            # records as the arguments the tool ran with.
            own = _own_call(call)
            try:
                answer = await self._call_timed(impl, {"call": own, "result": result, "run": run})
            except Exception as exc:
                log.warning("lich_after_tool_call of plugin %s failed (skipped): %s",
                            impl.plugin_name, self._describe(exc))
                continue
            if _changed(own.args, call.args):
                log.warning("lich_after_tool_call of plugin %s changed call.args in place "
                            "(ignored; the arguments are what the tool ran with)",
                            impl.plugin_name)
            if isinstance(answer, ToolResult):
                result, replaced_by = answer, impl.plugin_name
            elif answer is not None:
                log.warning("lich_after_tool_call of plugin %s returned %s (ignored)",
                            impl.plugin_name, type(answer).__name__)
        return result, replaced_by

    def event(self, envelope: Envelope) -> None:
        """``lich_event`` for every plugin, synchronously; async implementations are scheduled."""
        for impl in self._impls("lich_event"):
            try:
                result = impl.function(**({"event": envelope} if impl.argnames else {}))
                if inspect.isawaitable(result):
                    task = asyncio.ensure_future(result)
                    self._pending_events.add(task)
                    task.add_done_callback(self._event_done)
            except Exception as exc:
                # Once per plugin and run: a broken observer fails on every event (every
                # streamed token), and a warning for each would drown the output.
                run_id = getattr(envelope, "run_id", "")
                if self._event_warned.get(impl.plugin_name) == run_id:
                    log.debug("lich_event of plugin %s failed again (skipped)",
                              impl.plugin_name, exc_info=True)
                    continue
                self._event_warned[impl.plugin_name] = run_id
                log.warning("lich_event of plugin %s failed (skipped; further failures in "
                            "this run are logged at debug level): %s", impl.plugin_name,
                            self._describe(exc), exc_info=True)

    def _event_done(self, task: asyncio.Task[Any]) -> None:
        self._pending_events.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("async lich_event implementation failed: %s", task.exception())

    async def drain_events(self) -> None:
        """Wait (bounded by ``hook_timeout_s``) for scheduled async ``lich_event`` calls."""
        if not self._pending_events:
            return
        pending = set(self._pending_events)
        _, late = await asyncio.wait(pending, timeout=self.hook_timeout_s)
        for task in late:
            task.cancel()

