"""Calling hooks: one caller for every ``lich_*`` hook, driven by the hook's
:class:`~lich.plugins.policy.HookPolicy` row.

:meth:`HookCaller.call_hook` calls a run-time hook's implementations one at a
time, in pluggy order, and settles each answer by its row: accepted (it stops
the chain, is collected, or replaces an argument the next one sees) or a
failure (an exception, a timeout, a bad answer: reported and skipped, blocking,
unloading the plugin, or raised as a configuration error), with the row's
wording. :meth:`HookCaller.call_hook_sync` does the same for the hooks called
outside a run's loop or inline (registration, ``lich_price_call``,
``lich_event``). The typed methods below (:meth:`~HookCaller.before_tool_call`,
:meth:`~HookCaller.request_approval`, ...) turn an outcome into what their call
sites use.

Every run-time implementation runs under a deadline (the host's
``hook_timeout_s``, or the one the call site gives: the approver's
``approval_timeout_s``): an ``async def`` one on the event loop, a plain one in a
daemon thread (:mod:`lich.threads`), so a hook that blocks cannot freeze the
loop or keep lich from exiting — unless it is marked :func:`lich.hooks.runs_inline`
(quick and never waiting): then it is called directly, in the caller's task, and
its time checked against the deadline after. A failure never escapes but as the
row says.

Each before- and check-hook gets its own copy of the call (nothing in it that
can change is shared, see ``_own_call``), so the arguments that run are exactly
the ones the last check saw.

pluggy's hook wrappers are refused at load (:mod:`lich.plugins.loading`): this
caller calls each implementation itself, under its deadline and in its thread,
so there is no call for a wrapper to wrap.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pluggy
from attrs import evolve, frozen

from lich._eager import start_eagerly
from lich.hooks import (
    RUNS_INLINE_ATTR,
    Approval,
    ApprovalRequest,
    Block,
    Compression,
    FollowUp,
    InstructionSection,
    RunInfo,
    RunOutcome,
    Stop,
)
from lich.plugins.policy import (
    HookPolicy,
    OnFailure,
    RefusedAnswer,
    UnloadPhase,
    policy_table,
)
from lich.settings import ConfigError
from lich.threads import _plugin_error, run_in_daemon_thread
from lich.types import Message, ToolCall, ToolDefinition, ToolResult, Usage

if TYPE_CHECKING:
    from lich.config import LichConfig, ProviderConfig
    from lich.events import Envelope
    from lich.tools import ToolRegistry

__all__ = ["Answer", "ApprovalAnswer", "HookCaller", "HookFailure", "HookOutcome",
           "PromptDecision", "ToolDecision"]

# The host's one logger, whichever of its modules logs: the CLI quiets it by this name.
log = logging.getLogger("lich.plugins")


@frozen
class Answer:
    """One implementation's accepted answer: ``value``, given by ``plugin``."""

    plugin: str
    value: Any


@frozen
class HookFailure:
    """The failure that ended a chain (a row whose failures ``"block"``).

    :param plugin: whose implementation failed.
    :param reason: the row's report (``hook_error (guard): RuntimeError: boom``).
    :param error: the failure itself (``RuntimeError: boom``, ``timed out after 10s``,
        or the row's ``timed_out`` wording).
    :param timed_out: it overran its deadline.
    """

    plugin: str
    reason: str
    error: str
    timed_out: bool = False


class HookOutcome:
    """What one call of a hook came to.

    Built by the caller as it walks the implementations (one object per call, no
    copy at the end: a hook called on every streamed token must cost little), and
    final once returned: read it, never change it.

    :ivar hook: the hook called.
    :ivar kwargs: its arguments after the chain (an argument a ``"chain"`` answer
        replaced holds the last replacement).
    :ivar stopped: the answer that ended the chain (a ``firstresult`` hook's
        winner, a ``Block``), if any.
    :ivar failure: the failure that ended the chain, if any.
    """

    __slots__ = ("_chained_by", "_collected", "failure", "hook", "kwargs", "policy",
                 "stopped")

    def __init__(self, policy: HookPolicy, kwargs: dict[str, Any]) -> None:
        self.policy = policy
        self.hook = policy.name
        self.kwargs = kwargs
        self.stopped: Answer | None = None
        self.failure: HookFailure | None = None
        self._collected: list[Answer] | None = None
        self._chained_by: list[str] | None = None

    @property
    def collected(self) -> tuple[Answer, ...]:
        """The ``"collect"`` answers, in call order."""
        return () if self._collected is None else tuple(self._collected)

    @property
    def chained_by(self) -> tuple[str, ...]:
        """The plugins whose ``"chain"`` answers replaced an argument, in call order."""
        return () if self._chained_by is None else tuple(self._chained_by)

    @property
    def value(self) -> Any:
        """The stopping answer's value, or ``None``."""
        return None if self.stopped is None else self.stopped.value

    def __repr__(self) -> str:
        return (f"HookOutcome({self.hook!r}, stopped={self.stopped!r}, "
                f"collected={self.collected!r}, chained_by={self.chained_by!r}, "
                f"failure={self.failure!r})")

    def _args(self) -> tuple[dict[str, Any], ToolCall | None]:
        """The arguments for the next implementation, and its own copy of the call
        (``None`` when the row shares the call)."""
        if self.policy.own_call is None:
            return self.kwargs, None
        own = _own_call(self.kwargs["call"])
        return {**self.kwargs, "call": own}, own

    def _collect(self, answer: Answer) -> None:
        if self._collected is None:
            self._collected = []
        self._collected.append(answer)

    def _chain(self, plugin: str, replaced: Mapping[str, Any]) -> None:
        self.kwargs = {**self.kwargs, **replaced}
        if self._chained_by is None:
            self._chained_by = []
        self._chained_by.append(plugin)


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
class PromptDecision:
    """What the ``lich_user_prompt`` hooks made of a submitted message: the ``text``
    to run (context added), who changed it, or who refused it and why."""

    text: str
    edited_by: tuple[str, ...] = ()
    blocked_by: str | None = None
    reason: str | None = None


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


def _run_id(kwargs: Mapping[str, Any]) -> str:
    """The run a hook call belongs to (by its ``run`` or ``event`` argument)."""
    for name in ("run", "event"):
        run_id = getattr(kwargs.get(name), "run_id", None)
        if isinstance(run_id, str):
            return run_id
    return ""


def _finish_here(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """A registration hook's coroutine run to its end, outside the caller's loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Inside a running loop we cannot block on it here: run it on a helper loop.
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


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
    """Calls the hooks of the plugins registered in a pluggy manager, each as its
    :class:`~lich.plugins.policy.HookPolicy` says.

    :class:`~lich.plugins.PluginHost` is a hook caller over its own manager.

    :param pm: the manager, with lich's hook specifications added.
    :param hook_timeout_s: how long a run-time hook may take before it counts
        as failed (a before-hook then blocks the call).
    :param policies: the rows by hook name (:func:`lich.plugins.policy.policy_table`
        by default): a hook without a row cannot be called.
    """

    def __init__(self, pm: pluggy.PluginManager, *, hook_timeout_s: float = 10.0,
                 policies: dict[str, HookPolicy] | None = None) -> None:
        self.pm = pm
        self.hook_timeout_s = hook_timeout_s
        self.policies = policy_table() if policies is None else policies
        self._pending_events: set[asyncio.Future[Any]] = set()
        # Hooks that overran hook_timeout_s, cancelled but maybe still running
        # (one may catch the cancellation): referenced until they finish.
        self._abandoned: set[asyncio.Future[Any]] = set()
        # (hook, plugin name) -> the run whose failure was last logged as a warning
        self._warned: dict[tuple[str, str], str] = {}

    def policy(self, hook_name: str) -> HookPolicy:
        """The row of ``hook_name``.

        :raises KeyError: it has none (a hook spec added without its row).
        """
        try:
            return self.policies[hook_name]
        except KeyError:
            raise KeyError(f"no HookPolicy for {hook_name}: a hook is its spec and one "
                           "row (lich.plugins.policy)") from None

    def _describe(self, exc: BaseException) -> str:
        """A hook's failure for a log line or a ``hook_error``: ``ErrorType: message``,
        or ``timed out after <hook_timeout_s>s`` for a :class:`TimeoutError`."""
        if isinstance(exc, TimeoutError):
            return f"timed out after {self.hook_timeout_s:g}s"
        if isinstance(exc, RefusedAnswer):
            return str(exc)
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def _impls(self, hook_name: str) -> list[pluggy.HookImpl]:
        # pluggy calls implementations last-registered first; keep that order.
        caller = getattr(self.pm.hook, hook_name)
        return list(reversed(caller.get_hookimpls()))

    def has_impls(self, hook_name: str) -> bool:
        """Whether any loaded plugin implements ``hook_name``."""
        return bool(getattr(self.pm.hook, hook_name).get_hookimpls())

    async def call_hook(self, hook_name: str, /, *, limit_s: float | None = None,
                        **kwargs: Any) -> HookOutcome:
        """Call the run-time hook ``hook_name`` with ``kwargs``, as its row says.

        :param limit_s: for a row with ``timeout="given"``: the one deadline of all
            its implementations together, in seconds (``None``: none).
        :return: what the implementations answered. Never raises for a plugin's
            failure but as the row says (``"raise"``); cancellation propagates.
        """
        policy = self.policies.get(hook_name) or self.policy(hook_name)
        if policy.sync:
            raise TypeError(f"{hook_name} is called inline: use call_hook_sync")
        walk = HookOutcome(policy, kwargs)
        impls = self._impls(hook_name)
        if not impls:
            return walk
        limit = None if policy.timeout == "none" else self.hook_timeout_s
        loop, deadline = None, 0.0  # a deadline shared by all implementations ("given")
        if policy.timeout == "given":
            limit = None
            if limit_s is not None:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + limit_s
        for impl in impls:
            args, own = (walk.kwargs, None) if policy.own_call is None else walk._args()
            if loop is not None:
                limit = max(0.0, deadline - loop.time())
            try:
                answer = await self._call_timed(impl, args, limit)
            except Exception as exc:
                done = self._failed(walk, impl, exc, limit_s)
            else:
                if answer is None and own is None:
                    continue  # the common answer: nothing to settle
                done = self._settle(walk, impl, answer, own)
            if done is not None:
                return done
        return walk

    def call_hook_sync(
        self, hook_name: str, /, *,
        each: Callable[[str], AbstractContextManager[object]] | None = None,
        **kwargs: Any,
    ) -> HookOutcome:
        """Call ``hook_name`` (a row with ``sync=True``) inline, as its row says.

        :param each: a context entered around each implementation with its plugin's
            name (a registry's ``current_plugin``); it sees the implementation's
            exception before the caller settles it.
        """
        policy = self.policies.get(hook_name) or self.policy(hook_name)
        walk = HookOutcome(policy, kwargs)
        for impl in self._impls(hook_name):
            args, own = (walk.kwargs, None) if policy.own_call is None else walk._args()
            try:
                if each is None:
                    answer = self._call_now(policy, impl, args)
                else:
                    with each(impl.plugin_name):
                        answer = self._call_now(policy, impl, args)
            except Exception as exc:
                done = self._failed(walk, impl, exc, None)
            else:
                if answer is None and own is None:
                    continue  # the common answer: nothing to settle
                done = self._settle(walk, impl, answer, own)
            if done is not None:
                return done
        return walk

    def _call_now(self, policy: HookPolicy, impl: pluggy.HookImpl,
                  kwargs: Mapping[str, Any]) -> Any:
        answer = impl.function(**{name: kwargs[name] for name in impl.argnames})
        if not inspect.isawaitable(answer):
            return answer
        if policy.awaitable == "schedule":
            task = asyncio.ensure_future(answer)
            self._pending_events.add(task)
            task.add_done_callback(self._event_done)
            return None
        if inspect.iscoroutine(answer):
            if policy.awaitable == "run":
                return _finish_here(answer)
            answer.close()  # never awaited: no "never awaited" warning
        elif policy.awaitable == "run":
            return answer  # an awaitable that is not a coroutine: an answer like any other
        raise RefusedAnswer("it is async; it must be a plain def (it is called inline)")

    def _settle(self, walk: HookOutcome, impl: pluggy.HookImpl, answer: Any,
                own: ToolCall | None) -> HookOutcome | None:
        """Take one implementation's answer: the outcome if it ends the chain."""
        policy = walk.policy
        plugin = impl.plugin_name
        if own is not None and _changed(own.args, walk.kwargs["call"].args):
            if policy.own_call == "refuse":
                error = f"{policy.name} changed call.args in place; return a Rewrite instead"
                return self._fail(walk, impl, policy.on_error, policy.failed.format(
                    hook=policy.name, plugin=plugin, error=error), None, error)
            log.warning("%s of plugin %s changed call.args in place (ignored; the arguments "
                        "are what the tool ran with)", policy.name, plugin)
        if answer is None:
            return None
        action = policy.action(answer)
        problem = None
        if action is not None and policy.check is not None:
            try:
                problem = policy.check(answer)
            except Exception as exc:
                problem = self._describe(exc)
        if action is None or problem is not None:
            message = policy.bad_answer.format(hook=policy.name, plugin=plugin,
                                               type=type(answer).__name__, answer=answer,
                                               problem=problem)
            return self._fail(walk, impl, policy.on_bad_answer, message, None, message)
        if action == "stop":
            walk.stopped = Answer(plugin, answer)
            return walk
        if action == "collect":
            walk._collect(Answer(plugin, answer))
            return None
        assert policy.chain is not None, f"{policy.name}: a chain answer needs a chain"
        try:
            replaced = policy.chain(walk.kwargs, answer)
        except RefusedAnswer as exc:
            return self._failed(walk, impl, exc, None)
        walk._chain(plugin, replaced)
        return None

    def _failed(self, walk: HookOutcome, impl: pluggy.HookImpl, exc: Exception,
                limit_s: float | None) -> HookOutcome | None:
        """Take one implementation's exception or timeout: the outcome if it ends the chain."""
        policy = walk.policy
        if policy.config_error != "failure" and isinstance(exc, ConfigError):
            if policy.config_error == "raise":
                raise exc
            walk._collect(Answer(impl.plugin_name, exc))
            return None
        if isinstance(exc, TimeoutError):
            timeout = limit_s if policy.timeout == "given" else self.hook_timeout_s
            error = policy.timed_out.format(timeout=timeout)
        else:
            error = self._describe(exc)
        message = policy.failed.format(hook=policy.name, plugin=impl.plugin_name, error=error)
        return self._fail(walk, impl, policy.on_error, message, exc, error)

    def _fail(self, walk: HookOutcome, impl: pluggy.HookImpl, on: OnFailure, message: str,
              exc: Exception | None, error: str) -> HookOutcome | None:
        """Do what ``on`` says with one failure of ``impl``."""
        plugin = impl.plugin_name
        if on == "block":
            walk.failure = HookFailure(plugin, message, error, isinstance(exc, TimeoutError))
            return walk
        if on == "raise":
            raise ConfigError([message]) from exc
        if on == "unload":
            self._fail_plugin(plugin, walk.policy.phase,
                              exc if exc is not None else TypeError(message))
        elif on == "report":
            self._report_failure(walk, plugin, message, exc)
        return None

    def _report_failure(self, walk: HookOutcome, plugin: str, message: str,
                        exc: Exception | None) -> None:
        if not walk.policy.once_per_run:
            log.warning("%s", message)
            return
        # Once per plugin and run: a broken observer fails on every event (every
        # streamed token), and a warning for each would drown the output.
        key, run_id = (walk.policy.name, plugin), _run_id(walk.kwargs)
        if self._warned.get(key) == run_id:
            log.debug("%s of plugin %s failed again (skipped)", walk.policy.name, plugin,
                      exc_info=exc)
            return
        self._warned[key] = run_id
        log.warning("%s", message, exc_info=exc)

    def _fail_plugin(self, plugin_name: str, phase: UnloadPhase, exc: BaseException) -> None:
        """A row's ``"unload"``: :class:`~lich.plugins.PluginHost` fails the plugin in
        its load report and unloads it; a bare caller can only say so."""
        log.warning("plugin %s failed (%s): %s", plugin_name, phase, self._describe(
            exc) if isinstance(exc, Exception) else exc)

    async def _call_timed(
        self, impl: pluggy.HookImpl, kwargs: Mapping[str, Any], timeout_s: float | None
    ) -> Any:
        """Call ``impl`` under ``timeout_s`` (``None``: no limit): inline if it is
        marked so, an ``async def`` as a task of its own, a plain ``def`` in a
        worker thread."""
        args = {name: kwargs[name] for name in impl.argnames}
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        if getattr(impl.function, RUNS_INLINE_ATTR, False):
            return self._call_inline(impl, args, loop, deadline)
        if inspect.iscoroutinefunction(impl.function):
            return await self._until(impl.function(**args), deadline)
        # A plain function may block; a worker thread keeps a hanging hook from
        # freezing the event loop, and lets the timeout apply. A daemon thread, so a
        # hook that never returns cannot keep the process from exiting (see lich.threads).
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


    # -- the typed calls: each turns an outcome into what its call site uses --------

    async def run_start(self, run: RunInfo) -> None:
        """``lich_run_start`` for every plugin; failures are logged and skipped."""
        await self.call_hook("lich_run_start", run=run)

    async def run_end(self, run: RunInfo, outcome: RunOutcome) -> None:
        """``lich_run_end`` for every plugin; failures are logged and skipped."""
        await self.call_hook("lich_run_end", run=run, outcome=outcome)

    def price_call(
        self, provider: ProviderConfig | None, model: str, usage: Usage, config: LichConfig
    ) -> float | None:
        """``lich_price_call``: the first implementation's price, or ``None`` (unknown).

        Inline and synchronous (it runs once per model call, before ``llm_end``);
        an implementation that raises, is ``async`` or answers something other
        than a finite number >= 0 is logged and the next one asked.
        """
        price = self.call_hook_sync("lich_price_call", provider=provider, model=model,
                                    usage=usage, config=config).value
        return None if price is None else float(price)

    async def before_model_call(
        self, run: RunInfo, turn: int, usage: Usage, cost_usd: float | None
    ) -> tuple[Stop, str] | None:
        """``lich_before_model_call``: the first ``Stop`` and the plugin that gave it.

        Failures are logged and skipped (see the hook's docstring).
        """
        stopped = (await self.call_hook("lich_before_model_call", run=run, turn=turn,
                                        usage=usage, cost_usd=cost_usd)).stopped
        return None if stopped is None else (stopped.value, stopped.plugin)

    async def shutdown(self, registry: ToolRegistry) -> None:
        """``lich_shutdown`` for every plugin: the agent whose tools ``registry`` holds
        is closing. Failures are logged and skipped; each is bounded by
        ``hook_timeout_s``."""
        await self.call_hook("lich_shutdown", registry=registry)

    def shutdown_sync(self, registry: ToolRegistry) -> None:
        """:meth:`shutdown` outside an event loop (commands that build a registry
        without an agent: ``lich tools``, ``lich plugins``, ``lich config validate``)."""
        if self.has_impls("lich_shutdown"):
            asyncio.run(self.shutdown(registry))

    async def before_tool_call(self, call: ToolCall, run: RunInfo) -> ToolDecision:
        """Run the before-hooks one at a time (rewrites chain, the first block wins,
        asks are collected), then the check-hooks on the final arguments; a hook that
        fails blocks (fail closed)."""
        before = await self.call_hook("lich_before_tool_call", call=call, run=run)
        call, rewritten_by = before.kwargs["call"], before.chained_by
        blocked = _blocked(call, before, rewritten_by)
        if blocked is not None:
            return blocked
        checked = await self.check_tool_call(call, run)
        asked = before.collected
        if not rewritten_by and not asked:
            return checked  # the common case: nothing to merge
        # One question, with each plugin's reason once: the approvals plugin asks in
        # both phases about arguments no one rewrote in between.
        asks = list(dict.fromkeys([
            *((a.plugin, a.value.reason) for a in asked),
            *zip(checked.asked_by, checked.ask_reasons, strict=True)]))
        return evolve(checked, rewritten_by=rewritten_by,
                      asked_by=tuple(dict.fromkeys(p for p, _ in asks)),
                      ask_reasons=tuple(r for _, r in asks))

    async def check_tool_call(self, call: ToolCall, run: RunInfo) -> ToolDecision:
        """Run the check-hooks on ``call`` as it will run: each may block or ask; one
        that fails blocks (fail closed). Also what judges arguments a person edited
        (whose ``Ask`` answers the caller then ignores: that person said yes)."""
        checked = await self.call_hook("lich_check_tool_call", call=call, run=run)
        blocked = _blocked(call, checked, ())
        if blocked is not None:
            return blocked
        asks = checked.collected
        if not asks:
            return ToolDecision(call)
        return ToolDecision(call, asked_by=tuple(a.plugin for a in asks),
                            ask_reasons=tuple(a.value.reason for a in asks))

    async def request_approval(
        self, request: ApprovalRequest, run: RunInfo, timeout_s: float | None
    ) -> ApprovalAnswer:
        """Ask the approvers (``lich_request_approval``, first answer wins) about
        ``request.call``, all of them together under ``timeout_s`` (``None``: no
        limit). Never raises but for cancellation: a failing approver is an
        :class:`ApprovalAnswer` with an ``error``, which denies the call."""
        asked = await self.call_hook("lich_request_approval", limit_s=timeout_s,
                                     call=request.call, run=run, reason=request.reason,
                                     request=request)
        failure = asked.failure
        if failure is not None:
            return ApprovalAnswer(plugin=failure.plugin, timed_out=failure.timed_out,
                                  error=failure.error if failure.timed_out else failure.reason)
        if asked.stopped is not None:
            return ApprovalAnswer(asked.stopped.value, asked.stopped.plugin)
        return ApprovalAnswer()

    async def after_tool_call(
        self, call: ToolCall, result: ToolResult, run: RunInfo
    ) -> tuple[ToolResult, str | None]:
        """Run the after-hooks; returns the (possibly replaced) result and who replaced it last."""
        after = await self.call_hook("lich_after_tool_call", call=call, result=result, run=run)
        return after.kwargs["result"], after.chained_by[-1] if after.chained_by else None

    def event(self, envelope: Envelope, run: RunInfo | None = None) -> None:
        """``lich_event`` for every plugin, synchronously; async implementations are
        scheduled. ``run`` goes to the implementations that take it."""
        self.call_hook_sync("lich_event", event=envelope, run=run)

    async def instructions(self, run: RunInfo) -> list[InstructionSection]:
        """``lich_instructions``: every plugin's sections, in pluggy order (each
        plugin's in the order it gave them); failures are logged and left out."""
        outcome = await self.call_hook("lich_instructions", run=run)
        sections: list[InstructionSection] = []
        for answer in outcome.collected:
            value = answer.value
            sections.extend([value] if isinstance(value, InstructionSection) else value)
        return sections

    async def user_prompt(self, run: RunInfo, message: str) -> PromptDecision:
        """``lich_user_prompt``: the message as the implementations edited it, or who
        refused it (a ``Block``, or a failure: fail closed)."""
        outcome = await self.call_hook("lich_user_prompt", run=run, message=message)
        text, edited_by = outcome.kwargs["message"], outcome.chained_by
        if outcome.failure is not None:
            return PromptDecision(text, edited_by, outcome.failure.plugin,
                                  outcome.failure.reason)
        if outcome.stopped is not None:
            return PromptDecision(text, edited_by, outcome.stopped.plugin,
                                  outcome.stopped.value.reason)
        return PromptDecision(text, edited_by)

    async def prepare_tools(self, run: RunInfo, turn: int,
                            tools: tuple[ToolDefinition, ...]) -> tuple[ToolDefinition, ...]:
        """``lich_prepare_tools``: the definitions as the implementations left them;
        failures are logged and skipped (fail open)."""
        outcome = await self.call_hook("lich_prepare_tools", run=run, turn=turn, tools=tools)
        offered: tuple[ToolDefinition, ...] = outcome.kwargs["tools"]
        return offered

    async def before_compress(
        self, run: RunInfo, messages: tuple[Message, ...]
    ) -> tuple[Block | Compression, str] | None:
        """``lich_before_compress``: the first answer (a ``Block`` vetoes, a
        ``Compression`` shapes) and its plugin; failures are logged and skipped."""
        stopped = (await self.call_hook("lich_before_compress", run=run,
                                        messages=messages)).stopped
        return None if stopped is None else (stopped.value, stopped.plugin)

    async def after_final(self, run: RunInfo,
                          outcome: RunOutcome) -> tuple[FollowUp, str] | None:
        """``lich_after_final``: the first ``FollowUp`` and its plugin, or ``None`` (the
        answer stands); failures are logged and skipped."""
        stopped = (await self.call_hook("lich_after_final", run=run, outcome=outcome)).stopped
        return None if stopped is None else (stopped.value, stopped.plugin)

    def _event_done(self, task: asyncio.Future[Any]) -> None:
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


def _blocked(call: ToolCall, outcome: HookOutcome,
             rewritten_by: tuple[str, ...]) -> ToolDecision | None:
    """The decision of a tool-call phase that blocked: a failure or a ``Block``."""
    if outcome.failure is not None:
        return ToolDecision(call, rewritten_by, outcome.failure.plugin, outcome.failure.reason)
    if outcome.stopped is not None:
        block: Block = outcome.stopped.value
        return ToolDecision(call, rewritten_by, outcome.stopped.plugin, block.reason)
    return None
