"""The slash commands of lich's interactive front ends, in one table.

``lich chat`` (:mod:`lich.cli.chat`), ``lich tui`` (:mod:`lich.tui.app`) and the
gateway's chats (:mod:`lich.gateway.bus`) read one :class:`SlashTable`, made by
the plugin host from ``lich_register_slash_commands``
(:meth:`lich.plugins.PluginHost.slash_commands`): each command is listed once,
with its aliases, its argument hint, its help text and the front ends that have
it. The front ends' own commands (:data:`SLASH_COMMANDS`, :data:`GATEWAY_COMMANDS`)
register through that hook too, first, from this module; a plugin's command
brings its own ``run``. Every front end parses its input with
:meth:`SlashTable.parse`, dispatches on the canonical name it finds, and builds
``/help`` from :meth:`SlashTable.help_lines`, so they cannot drift apart.

A plugin adds one like this::

    from lich import hookimpl
    from lich.slash import SlashCommand, SlashContext

    def _weather(context: SlashContext) -> str:
        return f"sunny in {context.args or 'here'}"

    @hookimpl
    def lich_register_slash_commands(registry):
        registry.register(SlashCommand("weather", "say the weather", arg_hint="[CITY]",
                                       run=_weather))

Slash commands are handled by the front end and never sent to the model.

This module imports nothing heavy (``lich chat`` loads it at start-up, and it
must not pull in Textual or prompt_toolkit).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias

from attrs import evolve, field, frozen

from lich.hooks import hookimpl
from lich.registry import Registry
from lich.suggest import closest

if TYPE_CHECKING:
    from lich.config import LichConfig, ProviderConfig
    from lich.plugins import PluginHost

__all__ = [
    "BUILTIN_PLUGIN",
    "FRONT_ENDS",
    "GATEWAY_COMMANDS",
    "SLASH_COMMANDS",
    "FrontEnd",
    "SlashCommand",
    "SlashContext",
    "SlashInput",
    "SlashRegistry",
    "SlashTable",
    "lich_register_slash_commands",
    "model_lines",
    "run_slash_command",
]

FrontEnd: TypeAlias = Literal["chat", "tui", "gateway"]
"""An interactive front end: ``lich chat``, ``lich tui`` or the gateway's chats."""

FRONT_ENDS: tuple[FrontEnd, ...] = ("chat", "tui", "gateway")

_FRONT_END_NAMES: dict[FrontEnd, str] = {"chat": "lich chat", "tui": "the TUI",
                                         "gateway": "the gateway"}

BUILTIN_PLUGIN = "lich"
"""The name the front ends' own commands are registered under."""

_SUGGEST_CUTOFF = 0.6
"""How alike a typo must be to a command to be suggested (:func:`difflib.get_close_matches`)."""


_NAME_AND_ARGS = re.compile(r"(\S*)\s*(.*)", re.DOTALL)
"""After the ``/``: the name (up to the first whitespace), then the argument."""


def model_lines(providers: Sequence[ProviderConfig], default_kind: str = "") -> list[str]:
    """What ``/model`` with no argument says, in both front ends: one line per
    configured provider, the first (``model``) then the fallbacks, in failover order.

    ``default_kind`` names the kind a provider without one gets.
    """
    lines = []
    for i, p in enumerate(providers):
        lead = "model" if i == 0 else "fallback"
        lines.append(f"{lead}: {p.model or '?'} (provider {p.name}, "
                     f"kind {p.kind or default_kind or '?'})")
    return lines


def _is_name(value: str) -> bool:
    return bool(value) and value == value.lower() and re.search(r"[\s/]", value) is None


def _front_ends(value: Iterable[FrontEnd]) -> frozenset[FrontEnd]:
    return frozenset(value)


@frozen
class SlashContext:
    """What a plugin's slash command runs with.

    :param args: the rest of the line after the name, trimmed.
    :param front_end: where it was typed (``chat``, ``tui`` or ``gateway``).
    :param session_id: the session of the conversation (``None`` before the first
        message of ``lich chat`` and the TUI).
    :param config: the effective configuration (``config.table(name)`` for the
        plugin's own table).
    :param user_id: who typed it, in the gateway (``platform:id``); empty elsewhere.
    :param host: the plugin host of the front end's agent: how a command calls hooks
        (its plugin's own, ``lich_add_hookspecs``, included).
    """

    args: str
    front_end: FrontEnd
    session_id: str | None = None
    config: LichConfig | None = field(default=None, eq=False, repr=False)
    user_id: str = ""
    host: PluginHost | None = field(default=None, eq=False, repr=False)


SlashRun: TypeAlias = Callable[[SlashContext], "str | Awaitable[str | None] | None"]
"""A plugin command's function: the text to show for it, or ``None``."""


@frozen
class SlashCommand:
    """One slash command.

    :param name: the canonical name, without the ``/`` (``exit``).
    :param help: one line for ``/help``.
    :param aliases: other names that run it (``quit``, ``q``).
    :param arg_hint: how the argument is written in ``/help`` (``ID|latest``,
        ``[NAME]`` when it is optional); empty when the command takes none.
    :param arg_required: the command cannot run without an argument.
    :param front_ends: the front ends that have the command (all by default).
    :param run: what a plugin's command does (``def`` or ``async def``, given a
        :class:`SlashContext`, returning the text to show); ``None`` for a front
        end's own command, which the front end runs itself.
    """

    name: str
    help: str
    aliases: tuple[str, ...] = ()
    arg_hint: str = ""
    arg_required: bool = False
    front_ends: frozenset[FrontEnd] = field(default=frozenset(FRONT_ENDS),
                                            converter=_front_ends)
    run: SlashRun | None = field(default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        # A mistake in the table should fail at import, not when a user types the command.
        for name in self.names:
            if not _is_name(name):
                raise ValueError(f"slash command name {name!r}: lower case, no spaces or '/'")
        if self.arg_required and not self.arg_hint:
            raise ValueError(f"/{self.name}: a required argument needs an arg_hint")
        if not self.front_ends or not self.front_ends <= set(FRONT_ENDS):
            raise ValueError(f"/{self.name}: front_ends must be a non-empty subset of "
                             f"{FRONT_ENDS}, not {sorted(self.front_ends)}")

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical name, then the aliases."""
        return (self.name, *self.aliases)

    @property
    def usage(self) -> str:
        """``/resume ID|latest``: the command with its argument hint."""
        return f"/{self.name} {self.arg_hint}".rstrip()

    @property
    def synopsis(self) -> str:
        """``/exit, /quit, /q``: every name, then the argument hint (``/help``'s left column)."""
        names = ", ".join(f"/{name}" for name in self.names)
        return f"{names} {self.arg_hint}".rstrip()


@frozen
class SlashInput:
    """A line of input that is a slash command, looked up in one front end's commands.

    :param typed: the name as typed, lower-cased, without the ``/``.
    :param args: the rest of the line, trimmed.
    :param command: the command found, or ``None`` when the front end has none by that name.
    :param error: why the command cannot run (unknown, or a required argument is
        missing), ready to show; ``None`` when it can run.
    """

    typed: str
    args: str
    command: SlashCommand | None
    error: str | None = None

    @property
    def name(self) -> str:
        """The canonical name (``exit`` for ``/q``), or what was typed for an unknown command."""
        return self.command.name if self.command is not None else self.typed


class SlashTable:
    """The slash commands of every front end, each listed once.

    :raises ValueError: two commands share a name or an alias.
    """

    def __init__(self, commands: Iterable[SlashCommand]) -> None:
        self._commands = tuple(commands)
        self._by_name: dict[str, SlashCommand] = {}
        for command in self._commands:
            for name in command.names:
                if name in self._by_name:
                    raise ValueError(f"/{name} is listed twice (/{self._by_name[name].name} "
                                     f"and /{command.name})")
                self._by_name[name] = command

    @property
    def commands(self) -> tuple[SlashCommand, ...]:
        """Every command, in ``/help`` order."""
        return self._commands

    def for_front_end(self, front_end: FrontEnd) -> tuple[SlashCommand, ...]:
        """The commands ``front_end`` has, in ``/help`` order."""
        return tuple(c for c in self._commands if front_end in c.front_ends)

    def get(self, name: str, front_end: FrontEnd) -> SlashCommand | None:
        """The command ``front_end`` runs for ``name`` (a name or an alias, without ``/``)."""
        command = self._by_name.get(name.lower())
        return command if command is not None and front_end in command.front_ends else None

    @staticmethod
    def is_command(text: str) -> bool:
        """Whether ``text`` is a slash command: it starts with ``/`` once trimmed.

        A slash later in a message (``what is a/b?``) is just text for the model.
        """
        return text.strip().startswith("/")

    def parse(self, text: str, front_end: FrontEnd) -> SlashInput | None:
        """The command in ``text`` for ``front_end``, or ``None`` when ``text`` is a
        message for the model.

        The name runs up to the first whitespace and is not case-sensitive; the
        rest, trimmed, is the argument. ``/`` alone is the unknown command ``""``.
        An unknown command or a missing required argument comes back with its
        :attr:`SlashInput.error` set.
        """
        if not self.is_command(text):
            return None
        match = _NAME_AND_ARGS.match(text.strip()[1:])
        assert match is not None  # the pattern matches any text
        typed, args = match[1].lower(), match[2].strip()
        command = self.get(typed, front_end)
        if command is None:
            return SlashInput(typed, args, None, self.unknown_message(typed, front_end))
        if command.arg_required and not args:
            return SlashInput(typed, args, command, f"usage: {command.usage} — {command.help}")
        return SlashInput(typed, args, command)

    def suggest(self, typed: str, front_end: FrontEnd) -> str | None:
        """The name (or alias) ``typed`` was probably meant to be, if one is close enough.

        A prefix of one command's names wins (``ses`` → ``sessions``); otherwise
        the closest name or alias (:func:`lich.suggest.closest`)
        (``hepl`` → ``help``, ``qiut`` → ``quit``).
        """
        if not typed:
            return None
        commands = self.for_front_end(front_end)
        prefixed = [c for c in commands if any(n.startswith(typed) for n in c.names)]
        if len(prefixed) == 1:
            return next(n for n in prefixed[0].names if n.startswith(typed))
        names = [n for c in commands for n in c.names]
        return closest(typed, names, cutoff=_SUGGEST_CUTOFF)

    def unknown_message(self, typed: str, front_end: FrontEnd) -> str:
        """What to tell the user about ``/typed``, which ``front_end`` does not have."""
        other = self._by_name.get(typed)
        if other is not None and front_end not in other.front_ends:
            where = " and ".join(_FRONT_END_NAMES[f] for f in FRONT_ENDS if f in other.front_ends)
            return f"/{typed} is not available in {_FRONT_END_NAMES[front_end]} (only in {where})"
        guess = self.suggest(typed, front_end)
        if guess is not None:
            return f"unknown command /{typed}: did you mean /{guess}? (/help lists them)"
        return f"unknown command /{typed} (/help lists the commands)"

    def help_lines(self, front_end: FrontEnd) -> list[str]:
        """``/help`` for ``front_end``: one aligned line per command, generated from the table.

        Each front end adds its own line about keys.
        """
        commands = self.for_front_end(front_end)
        width = max((len(c.synopsis) for c in commands), default=0)
        return [f"  {c.synopsis.ljust(width)}  {c.help}" for c in commands]


_INTERACTIVE: frozenset[FrontEnd] = frozenset({"chat", "tui"})

SLASH_COMMANDS = SlashTable(
    SlashCommand(c.name, c.help, c.aliases, c.arg_hint, c.arg_required, _INTERACTIVE) for c in (
        SlashCommand("help", "list the commands and keys"),
        SlashCommand(
            "model", "show the model, or switch the first provider to NAME", arg_hint="[NAME]"
        ),
        SlashCommand("usage", "show the tokens used so far"),
        SlashCommand("clear", "clear the screen (the conversation is kept)"),
        SlashCommand("sessions", "list recent sessions (* marks the current one)"),
        SlashCommand(
            "resume",
            "continue a recorded session (/sessions lists them)",
            arg_hint="ID|latest",
            arg_required=True,
        ),
        SlashCommand("new", "start a new session (forget this conversation)"),
        SlashCommand("exit", "quit", aliases=("quit", "q")),
    )
)
"""The own slash commands of ``lich chat`` and ``lich tui``."""

GATEWAY_COMMANDS = SlashTable((
    SlashCommand("start", "say hello (Telegram's greeting)", front_ends={"gateway"}),
    SlashCommand("approve", "let the tool call ID run (session: and its like for the session)",
                 arg_hint="ID [session]", arg_required=True, front_ends={"gateway"}),
    SlashCommand("deny", "refuse the tool call ID", arg_hint="ID", arg_required=True,
                 front_ends={"gateway"}),
))
"""The gateway's own slash commands (:mod:`lich.gateway.bus` runs them); its ``/new``
is the one of :data:`SLASH_COMMANDS`, offered there too."""

#: Commands of :data:`SLASH_COMMANDS` the gateway has as well (one name, one command).
_ALSO_IN_THE_GATEWAY = frozenset({"new"})


class SlashRegistry(Registry[SlashCommand]):
    """What ``lich_register_slash_commands(registry)`` fills: every command by each of
    its names. A name or alias taken already is reported on the later plugin's load
    report (``duplicate_slash_command``) and that command is left out whole.
    """

    what: ClassVar[str] = "slash_command"

    def register(self, command: SlashCommand) -> None:
        """Add ``command``.

        :raises TypeError: ``command`` is no :class:`SlashCommand`, or a plugin's
            command has no ``run`` (only the front ends' own commands do without).
        """
        if not isinstance(command, SlashCommand):
            raise TypeError(f"expected a SlashCommand, got {type(command).__name__}")
        if command.run is None and self.current_plugin not in (None, BUILTIN_PLUGIN):
            raise TypeError(f"/{command.name}: a plugin's slash command needs a run function")
        taken = [n for n in command.names if n in self]
        if taken:
            # Checked before adding any name: a command is offered whole or not at all.
            self._add(taken[0], command)
            return
        for name in command.names:
            self._add(name, command)

    def table(self) -> SlashTable:
        """The commands as one :class:`SlashTable`, in registration order."""
        return SlashTable(dict.fromkeys(self.items()))


async def run_slash_command(command: SlashCommand, context: SlashContext) -> str | None:
    """Run a plugin's ``command``: its text, or ``None``.

    :raises Exception: whatever ``run`` raised (the front end shows it as an error).
    """
    if command.run is None:
        return None
    result: Any = command.run(context)
    if inspect.isawaitable(result):
        result = await result
    return None if result is None else str(result)


@hookimpl(tryfirst=True)
def lich_register_slash_commands(registry: SlashRegistry) -> None:
    """The front ends' own commands, registered before any plugin's."""
    for command in SLASH_COMMANDS.commands:
        if command.name in _ALSO_IN_THE_GATEWAY:
            command = evolve(command, front_ends={*command.front_ends, "gateway"})
        registry.register(command)
    for command in GATEWAY_COMMANDS.commands:
        registry.register(command)
