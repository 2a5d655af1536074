"""Tools: what they are and where they are registered — the authoring API.

* :class:`Tool` — a name, a description, a JSON Schema and an ``execute``
  function (sync or async) with its own timeout and output cap.
* :func:`tool` — the decorator that makes a :class:`Tool` from a typed function.
* :class:`ToolContext` — what a running tool may know about its surroundings.
* :class:`ToolRegistry` — what ``lich_register_tools`` fills.

How a call is run is :mod:`lich.executor`; its :class:`ToolExecutor` is
importable from here too.
"""

from __future__ import annotations

import builtins
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

import attrs
from attrs import Factory, field, frozen

from lich import _schema
from lich.cancel import CancelToken
from lich.guards import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TOOL_TIMEOUT_S
from lich.hooks import RunInfo
from lich.lazy import lazy_exports
from lich.processes import DIRECT, ProcessRunner
from lich.protected import ProtectedPaths
from lich.registry import DuplicateNameError, Registry
from lich.types import ToolDefinition, ToolResult

if TYPE_CHECKING:
    from lich.executor import ToolExecutor

__all__ = [
    "DuplicateToolError",
    "Tool",
    "ToolContext",
    "ToolExecutor",
    "ToolRegistry",
    "no_output",
    "tool",
    "validate_args",
]

validate_args = _schema.validate_args
"""``validate_args(args, schema)``: the first problem with ``args`` against a tool's JSON
Schema as a coded message (``missing_arg: x``, ...), or ``None`` — the check the
executor makes before every call, for a front end that lets a person edit arguments."""

ToolFn: TypeAlias = Callable[
    [dict[str, Any], "ToolContext"], "Awaitable[ToolResult] | ToolResult"
]

PrimaryKind: TypeAlias = Literal["shell", "path", "url", "text"]
"""How an approval rule's pattern reads a tool's primary argument: ``shell`` (a command
line, split into its simple commands), ``path`` (resolved against the work dir),
``url`` or plain ``text``."""

PreviewFn: TypeAlias = Callable[[Mapping[str, Any], Path], "str | None"]
"""``preview(args, work_dir)``: what a call would do, for the person approving it (a
unified diff for a file write), or ``None``. Called in a worker thread; it must not
change anything."""


def no_output(text: str, /) -> None:
    """The :attr:`ToolContext.output` of a call nobody watches: does nothing."""


@frozen
class ToolContext:
    """What a running tool may know about its surroundings.

    ``settings`` is the tool's ``[tools.<name>]`` config table; ``env`` the
    extra environment lich passes to tools; ``cancel`` fires when the run is
    cancelled or the call exceeds its timeout (async tools are also cancelled
    as tasks; tools in a worker thread should poll ``cancel.cancelled``).
    ``secret_env_names`` are the environment variables holding provider keys
    (every registered kind's default key variable and every ``api_key_env``
    of the config): a tool must never show their values to the model.
    ``protected`` is what no tool may read, list or search (lich's own files,
    secret files): check resolved paths with :func:`lich.protected.is_protected`.
    ``process_runner`` starts every process the tool runs (:mod:`lich.processes`):
    enter ``process_runner.launch(Launch(...))`` and start what it yields, so an OS
    sandbox plugin confines the tool's processes too.
    ``check_path`` (set for a tool declaring ``primary_kind="path"`` when the run
    has tool-call checks) re-judges the call on the path the tool is about to open
    for its primary argument: call ``check_path(rel)`` with the resolved path
    relative to the work dir right before opening it (as the ``check`` of
    :func:`lich.guards.open_beneath`); it raises :class:`~lich.guards.ToolError`
    (``path_changed: …``) when the checks would not allow the call with that path
    — a directory swapped for a link after the approval rules judged the path.
    ``output(text)`` reports output while the tool runs, for a person watching (the
    TUI's tool block, ``lich --json``'s ``tool_output`` events): call it with each new
    piece, from the event loop or from a worker thread; it never blocks and never
    raises for a call that has ended. It is not the result: the tool still returns
    everything the model should read. The executor coalesces the pieces (at most one
    event per :data:`lich.executor.LIVE_OUTPUT_INTERVAL_S`) and drops what comes past
    the tool's output cap. :attr:`watched` says whether anyone listens, so a tool
    can skip the work of producing live text when nobody does.
    """

    work_dir: Path
    env: Mapping[str, str] = field(factory=dict)
    cancel: CancelToken = field(factory=CancelToken, eq=False)
    settings: Mapping[str, Any] = field(factory=dict)
    run: RunInfo | None = None
    call_id: str = ""
    secret_env_names: frozenset[str] = frozenset()
    protected: ProtectedPaths = field(factory=ProtectedPaths)
    process_runner: ProcessRunner = field(default=DIRECT, eq=False)
    check_path: Callable[[str], None] | None = field(default=None, eq=False)
    output: Callable[[str], None] = field(default=no_output, eq=False)

    @property
    def watched(self) -> bool:
        """Whether :attr:`output` goes anywhere (``False``: it is :func:`no_output`)."""
        return self.output is not no_output


@frozen
class Tool:
    """A tool the model can call.

    ``execute(args, ctx)`` may be a plain function (run in a worker thread so
    it cannot block the event loop, unless ``runs_inline``) or a coroutine function. It returns a
    :class:`ToolResult`, or raises :class:`lich.guards.ToolError` for a coded
    failure. ``timeout_s`` and ``max_output_chars`` are the tool's own limits;
    ``[tools.<name>]`` in the config may override them.

    What approvals need to know (see ``docs/tools.md``):

    * ``read_only`` — the tool only reads: allowed without asking unless a rule
      names it, and the only kind ``--read-only`` keeps.
    * ``requires_approval`` — ask before every call even where the config's
      ``[approvals] mode`` would allow it. It only ever tightens: ``False`` loosens
      nothing.
    * ``primary_arg`` / ``primary_kind`` — the argument a rule's pattern matches
      (``terminal(git status*)`` matches ``command``) and how it is read. Left
      out, the argument is the first required string parameter and the kind
      follows its name (``command`` → shell, ``path``/``file`` → path, ``url`` →
      url, anything else text).
    * ``preview`` — a :data:`PreviewFn` showing the approver what the call does.

    What a durable turn needs to know (``docs/tools.md``, ``docs/cluster.md``):

    * ``idempotent`` — running the call again with the same arguments has no
      effect beyond the first run's (reading, writing a whole file). A turn
      resumed after its process died runs such a call again; a call of any other
      tool that may have started is not run twice, and the model is told so.
      Default: ``read_only``.

    ``runs_inline`` — a plain function that returns at once and never blocks (pure
    computation on its arguments) runs on the event loop itself, without the hop to a
    worker thread and back (about a tenth of a millisecond). While it runs nothing else
    in the process does: no other run, no cancel, no timer. Its ``timeout_s`` still
    holds, measured when it returns (a result that came too late is a timeout failure),
    and one that takes more than :data:`lich.executor.SLOW_INLINE_S` is logged as a
    warning. Only for plain functions: a coroutine function runs on the loop already.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    execute: ToolFn = field(eq=False, repr=False)
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    plugin: str | None = None
    read_only: bool = False
    requires_approval: bool = False
    primary_arg: str | None = field(default=None)
    primary_kind: PrimaryKind | None = None
    preview: PreviewFn | None = field(default=None, eq=False, repr=False)
    # After read_only: its default is read_only's value.
    idempotent: bool = field(default=Factory(lambda self: self.read_only, takes_self=True))
    runs_inline: bool = False
    is_async: bool = field(init=False, eq=False, repr=False)

    @primary_arg.validator
    def _check_primary_arg(self, _attribute: attrs.Attribute[Any], value: str | None) -> None:
        # A rule pattern over an argument the tool does not take would silently match
        # nothing; say so where the tool is made.
        properties = self.parameters.get("properties")
        if value is not None and isinstance(properties, Mapping) and value not in properties:
            raise ValueError(f"tool {self.name!r}: primary_arg {value!r} is not one of its "
                             f"parameters ({', '.join(properties) or 'none'})")

    @is_async.default
    def _is_async(self) -> bool:
        # A callable object counts as async when its ``__call__`` is a coroutine function.
        fn = self.execute
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )

    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return ToolDefinition(self.name, self.description, self.parameters)


def _is_context_param(name: str, hint: Any) -> bool:
    return hint is ToolContext or name in ("ctx", "context")


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    read_only: bool = False,
    requires_approval: bool = False,
    primary_arg: str | None = None,
    primary_kind: PrimaryKind | None = None,
    preview: PreviewFn | None = None,
    idempotent: bool | None = None,
    runs_inline: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    read_only: bool = False,
    requires_approval: bool = False,
    primary_arg: str | None = None,
    primary_kind: PrimaryKind | None = None,
    preview: PreviewFn | None = None,
    idempotent: bool | None = None,
    runs_inline: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a typed function.

    The function's name is the tool name, the first paragraph of its docstring
    the description (``:param x:`` lines or an ``Args:`` block describe the
    parameters, as does ``Annotated[T, "text"]`` or ``Annotated[T, lich.Param(...)]``),
    and its annotated parameters the JSON Schema: ``str``, ``int``, ``float``,
    ``bool``, ``Literal``, ``Enum``, ``date``, ``datetime``, ``Path``, lists,
    sets, tuples, ``dict[str, T]``, ``TypedDict``, attrs classes and
    dataclasses, unions and ``Optional`` of these, and ``Any`` (or no
    annotation) for any JSON value. Another type is a :class:`TypeError` here,
    naming the parameter. A parameter annotated :class:`ToolContext` (or named
    ``ctx``) receives the context.

    Arguments are checked against the schema before the call (``missing_arg:
    x``, ``invalid_arg: x: expected integer, got string``) and converted to
    the annotated types: the function gets an ``Enum`` member, a ``date``, a
    ``Path``, a ``tuple``, never the raw JSON string or list. Return a ``str``
    (the output), a :class:`ToolResult`, or anything JSON-able.

    ``read_only``, ``requires_approval``, ``primary_arg``, ``primary_kind`` and
    ``preview`` are the :class:`Tool` fields approvals read; ``idempotent`` (default:
    ``read_only``) is what a resumed turn reads; ``runs_inline`` runs a plain function
    that never blocks on the event loop, without the worker thread. Usable bare
    (``@tool``) or with options (``@tool(timeout_s=5, read_only=True)``)."""

    def build(func: Callable[..., Any]) -> Tool:
        signature = _schema.compile_signature(func, _is_context_param)
        is_coro = inspect.iscoroutinefunction(func)
        if is_coro and runs_inline:
            raise TypeError(f"tool {name or func.__name__!r}: runs_inline is for plain "
                            "functions; a coroutine function runs on the event loop already")

        def call_kwargs(args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
            kwargs = signature.bind(args)  # raises ToolError for a bad argument
            for ctx_name in signature.skipped:
                kwargs[ctx_name] = ctx
            return kwargs

        execute: ToolFn
        if is_coro:

            async def execute_async(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
                return _as_result(await func(**call_kwargs(args, ctx)))

            execute = execute_async
        else:

            def execute_sync(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
                return _as_result(func(**call_kwargs(args, ctx)))

            execute = execute_sync

        return Tool(
            name=name or func.__name__,
            description=description or _schema.doc_summary(func.__doc__) or (name or func.__name__),
            parameters=signature.schema,
            execute=execute,
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            read_only=read_only,
            requires_approval=requires_approval,
            primary_arg=primary_arg,
            primary_kind=primary_kind,
            preview=preview,
            idempotent=read_only if idempotent is None else idempotent,
            runs_inline=runs_inline,
        )

    return build(fn) if fn is not None else build


def _as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(ok=True, output=value)
    if value is None:
        return ToolResult(ok=True, output="")
    return ToolResult(ok=True, output=json.dumps(value, ensure_ascii=False, default=str))


class DuplicateToolError(DuplicateNameError):
    """``duplicate_tool: <name>`` — a tool of that name is registered already."""


class ToolRegistry(Registry[Tool]):
    """The tools an agent offers, in registration order.

    While a plugin's ``lich_register_tools`` runs, the host sets
    :attr:`current_plugin` so every tool is attributed to its plugin.

    :param inspect_only: the registry is filled to look at the tools, not to run
        them (``lich config validate``): a plugin must not start a process or open
        a connection for it. One whose tools cannot be known without that registers
        none and says so with :meth:`unlisted` (the MCP plugin does).
    """

    what = "tool"

    def __init__(self, *, inspect_only: bool = False) -> None:
        super().__init__()
        self.inspect_only = inspect_only
        #: What each plugin left unlisted for an inspect-only registry, by plugin.
        self.left_out: dict[str, str] = {}
        self._definitions: tuple[ToolDefinition, ...] | None = None
        self._filter: tuple[frozenset[str] | None, frozenset[str]] = (None, frozenset())
        self._refreshers: builtins.list[Callable[[], None]] = []
        self._listeners: dict[object, Callable[[], None]] = {}

    def _changed(self) -> None:
        self._definitions = None
        self._tell_listeners()

    def unlisted(self, what: str) -> None:
        """Say (for an inspect-only registry) that the registering plugin has tools it
        did not list, and which (``"the tools of the MCP servers git, docs"``)."""
        self.left_out[self.current_plugin or "?"] = what

    def _tell_listeners(self) -> None:
        for listener in list(self._listeners.values()):
            try:
                listener()
            except Exception:  # a listener's bug must not fail a registration
                logging.getLogger("lich.tools").exception("a tool registry listener failed")

    def register(self, item: Tool) -> None:
        """Add ``item``; raises :class:`DuplicateToolError` if its name is taken."""
        if not isinstance(item, Tool):
            raise TypeError(f"registry.register() takes a lich.Tool, got {type(item).__name__}")
        if item.plugin is None and self.current_plugin is not None:
            item = attrs.evolve(item, plugin=self.current_plugin)
        try:
            self._add(item.name, item)
        except DuplicateNameError as exc:
            raise DuplicateToolError(str(exc)) from None

    def list(self) -> builtins.list[Tool]:
        """All tools in registration order."""
        return self.items()

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """What the model is told; cached until the registry changes.

        The loop asks before every model call, so a plugin's :meth:`add_refresher`
        callbacks run first: a tool list that changed since the last turn is in place
        before the model sees it."""
        self.refresh()
        if self._definitions is None:
            self._definitions = tuple(t.definition() for t in self._items.values())
        return self._definitions

    def filter(self, enabled: Iterable[str] | None, disabled: Iterable[str] = ()) -> None:
        """Keep only ``enabled`` (all when ``None``) minus ``disabled``."""
        keep = set(self._items) if enabled is None else set(enabled)
        self._filter = (None if enabled is None else frozenset(enabled), frozenset(disabled))
        self._keep(keep - set(disabled))

    def add_refresher(self, refresh: Callable[[], None]) -> None:
        """Call ``refresh()`` at the start of every :meth:`definitions`, on the thread
        that asks: where a plugin whose tools change at run time (an MCP server
        announcing a new list on another thread) applies the change with
        :meth:`replace_plugin`. It must be quick and must not raise."""
        self._refreshers.append(refresh)

    def refresh(self) -> None:
        """Run the :meth:`add_refresher` callbacks now, on the calling thread:
        :meth:`definitions` does before every model call; a holder that serves the
        tools without asking for definitions (``lich mcp serve``) does when
        :meth:`refresh_wanted` tells it to."""
        for refresh in self._refreshers:
            refresh()

    def refresh_wanted(self) -> None:
        """Say, from any thread, that a refresher has a change to apply (an MCP server
        announced a new tool list): every :meth:`add_listener` callback is called, so
        a holder that does not call :meth:`definitions` by itself knows to call
        :meth:`refresh`."""
        self._tell_listeners()

    def add_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change of the tools (a registration, a
        removal, :meth:`filter`, :meth:`replace_plugin`: once per change, on the
        thread that made it) and at every :meth:`refresh_wanted` (on the thread that
        called it). It must be quick, safe from any thread, and must not change the
        registry; one that raises is logged. Returns the call that removes it."""
        token = object()
        self._listeners[token] = listener

        def remove() -> None:
            self._listeners.pop(token, None)

        return remove

    def replace_plugin(self, plugin: str, tools: Iterable[Tool]) -> builtins.list[str]:
        """Replace everything ``plugin`` registered with ``tools``; returns the names
        now registered for it.

        ``tools_enabled`` / ``tools_disabled`` (:meth:`filter`) apply as they did at
        assembly. A name another plugin holds stays that plugin's: the new tool is
        reported like any duplicate and left out.
        """
        self.remove_plugin(plugin)
        enabled, disabled = self._filter
        previous = self.current_plugin
        self.current_plugin = plugin
        added: builtins.list[str] = []
        try:
            for item in tools:
                if item.name in disabled or (enabled is not None and item.name not in enabled):
                    continue
                if item.name in self._items:
                    owner = self._owners.get(item.name)
                    message = (f"duplicate_tool: {item.name} (already registered by {owner}); "
                               "skipped")
                    if self.on_duplicate is not None:
                        self.on_duplicate(plugin, message)
                    continue
                self.register(item)
                added.append(item.name)
        finally:
            self.current_plugin = previous
        return added


# lich.executor imports this module, so its ToolExecutor is imported on first use here:
# ``from lich.tools import ToolExecutor`` keeps working, without an import cycle.
__getattr__, __dir__ = lazy_exports(globals(), {"ToolExecutor": "lich.executor"})
