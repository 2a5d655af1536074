"""Settings: the one way lich and its plugins turn a raw table into checked values.

A plugin describes its settings as a frozen attrs class, its fields typed and,
where a type alone does not say enough, declared with :func:`setting` (a check
of the value, or a parser for a shape of its own). :func:`structure_settings`
then builds the class from the raw table of the config and reports **every**
problem at once, each with its ``$.path``, as a :class:`ConfigError`::

    from attrs import frozen
    from lich.settings import at_least, setting, structure_settings

    @frozen
    class GreeterSettings:
        greeting: str = "hello"
        repeat: int = setting(1, check=at_least(1))
        shout: bool = False

    @hookimpl
    def lich_register_config_tables(tables):
        tables.claim("greeter", GreeterSettings)  # the [greeter] table is this plugin's

    settings = structure_settings(config.table("greeter"), GreeterSettings, "$.greeter")

Types are strict, as JSON and TOML are typed: a string is no number, ``1.5``
is no integer, ``true`` is no number, a string is no array. Unknown keys are
errors (with the closest known key as a hint). A plugin that checks its
settings in ``lich_check_config`` gets them reported by ``lich config
validate`` as well as before any run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar, overload
from urllib.parse import urlsplit

import attrs
import cattrs
from cattrs.errors import IterableValidationError, IterableValidationNote

from lich._converter import CHECK, PARSE, converter, describe_errors, json_type_name
from lich.registry import Registry

__all__ = [
    "TOOL_LIMIT_KEYS",
    "ConfigError",
    "ConfigTables",
    "TableClaim",
    "ToolSettings",
    "at_least",
    "at_most",
    "between",
    "each",
    "each_value",
    "greater_than",
    "json_type_name",
    "non_empty",
    "one_of",
    "setting",
    "structure_settings",
    "tool_limits",
    "url",
]

T = TypeVar("T")
Check = Callable[[Any], None]


class ConfigError(ValueError):
    """The configuration is unusable. ``problems`` are ``"$.path: message"`` lines."""

    def __init__(self, problems: Sequence[str], file: str | None = None) -> None:
        self.problems = list(problems)
        self.file = file
        where = f"{file}: " if file else ""
        if len(self.problems) == 1:
            text = f"{where}{self.problems[0]}"
        else:
            text = f"{where}invalid configuration:\n" + "\n".join(f"  {p}" for p in self.problems)
        super().__init__(text)


def structure_settings(raw: Any, cls: type[T], path: str = "$") -> T:
    """Build ``cls`` (an attrs class) from the raw table ``raw``.

    :param raw: the table as read from TOML or JSON (``None`` counts as empty).
    :param cls: the settings class; nested attrs classes are nested tables.
    :param path: where ``raw`` sits in the config, for the messages
        (``"$.my_plugin"``).
    :raises ConfigError: listing every problem as ``"<path>.<key>: <message>"``.
    """
    if not raw and isinstance(raw, Mapping | None) and _all_defaulted(cls):
        # An absent section (every plugin's, on every start): its defaults are the whole
        # answer, without cattrs generating (compiling) a structure function for it.
        try:
            return cls()
        except Exception:  # a default its own check refuses: reported as cattrs would
            pass
    try:
        return converter.structure({} if raw is None else raw, cls)
    except Exception as exc:  # cattrs raises exception groups and plain errors alike
        raise ConfigError(describe_errors(exc, path)) from exc


def _all_defaulted(cls: type[Any]) -> bool:
    """Whether ``cls`` is an attrs class whose every ``__init__`` field has a default."""
    return attrs.has(cls) and all(
        f.default is not attrs.NOTHING for f in attrs.fields(cls) if f.init)


@overload
def setting(default: T, *, check: Check | None = ..., parse: Callable[[Any], T] | None = ...,
            help: str = ...) -> T: ...


@overload
def setting(*, factory: Callable[[], T], check: Check | None = ...,
            parse: Callable[[Any], T] | None = ..., help: str = ...) -> T: ...


@overload
def setting(*, check: Check | None = ..., parse: Callable[[Any], Any] | None = ...,
            help: str = ...) -> Any: ...


def setting(
    default: Any = attrs.NOTHING,
    *,
    factory: Callable[[], Any] | None = None,
    check: Check | None = None,
    parse: Callable[[Any], Any] | None = None,
    help: str = "",
) -> Any:
    """An attrs field for a settings class.

    :param default: the value when the key is absent (no default: the key is required).
    :param factory: makes the default instead (for mutable defaults).
    :param check: called with the structured value; raises ``ValueError`` with a
        message (``"must be at least 1, got 0"``) when it is wrong. It also
        guards direct construction of the class.
    :param parse: turns the raw value into the field's value itself, instead of
        structuring it by the field's type; raises ``TypeError``/``ValueError``
        with a message (see :func:`each` for arrays).
    :param help: one line describing the setting (for documentation).
    """
    metadata: dict[str, Any] = {"help": help}
    validator = None
    if check is not None:
        metadata[CHECK] = check
        validator = _as_validator(check)
    if parse is not None:
        metadata[PARSE] = parse
    if factory is not None:
        return attrs.field(factory=factory, validator=validator, metadata=metadata)
    return attrs.field(default=default, validator=validator, metadata=metadata)


def _as_validator(check: Check) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def validate(_: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        try:
            check(value)
        except ValueError as exc:
            # Named, so that a direct construction says which field; structure_settings
            # moves the name into the path.
            raise ValueError(f"{attribute.name}: {exc}") from None

    return validate


# -------------------------------------------------------------------- checks


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounded(test: Callable[[float], bool], words: str) -> Check:
    def check(value: Any) -> None:
        if value is None:
            return
        if _number(value) and (math.isnan(value) or not test(value)):
            raise ValueError(f"must be {words}, got {value!r}")

    return check


def at_least(lo: float) -> Check:
    """The number is ``>= lo`` (``None`` passes: make the field optional for that)."""
    return _bounded(lambda v: v >= lo, f"at least {lo:g}")


def at_most(hi: float) -> Check:
    """The number is ``<= hi``."""
    return _bounded(lambda v: v <= hi, f"at most {hi:g}")


def greater_than(lo: float) -> Check:
    """The number is ``> lo``."""
    return _bounded(lambda v: v > lo, f"greater than {lo:g}")


def between(lo: float, hi: float) -> Check:
    """The number is within ``[lo, hi]``."""
    return _bounded(lambda v: lo <= v <= hi, f"between {lo:g} and {hi:g}")


def non_empty(value: Any) -> None:
    """The string (or collection) is not empty or blank."""
    if value is None:
        return
    if (isinstance(value, str) and not value.strip()) or (
        not isinstance(value, str) and hasattr(value, "__len__") and len(value) == 0
    ):
        raise ValueError("must not be empty")


def one_of(*choices: Any) -> Check:
    """The value is one of ``choices``."""

    def check(value: Any) -> None:
        if value not in choices:
            raise ValueError(
                f"must be one of {', '.join(repr(c) for c in choices)}, got {value!r}"
            )

    return check


def url(*schemes: str) -> Check:
    """The string is an absolute URL with one of ``schemes`` (``url("http", "https")``)."""

    def check(value: Any) -> None:
        if value is None:
            return
        try:
            parts = urlsplit(value)
            ok = parts.scheme in schemes and bool(parts.netloc)
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"expected a {' or '.join(schemes)} URL, got {value!r}")

    return check


# ------------------------------------------------------------------- parsers


def each(item: Callable[[Any], Any], *, into: Callable[[Iterable[Any]], Any] = tuple,
         what: str = "an array") -> Callable[[Any], Any]:
    """A parser for an array whose items ``item`` parses; every bad item is reported
    with its index (``$.path[2]: ...``). ``into`` collects the parsed items."""

    def parse(value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected {what}, got {json_type_name(value)}")
        out: list[Any] = []
        errors: list[Exception] = []
        for i, raw in enumerate(value):
            try:
                out.append(item(raw))
            except (TypeError, ValueError, cattrs.BaseValidationError) as exc:
                exc.__notes__ = [*getattr(exc, "__notes__", []),
                                 IterableValidationNote(f"item @ index {i}", i, Any)]
                errors.append(exc)
        if errors:
            raise IterableValidationError("invalid items", errors, list[Any])
        return into(out)

    return parse



def each_value(item: Callable[[Any], T], *, what: str = "a table") -> Callable[[Any], dict[str, T]]:
    """A parser for a table whose values ``item`` parses (the keys are free); every bad
    value is reported at its key (``$.path.key: ...``)."""

    def parse(value: Any) -> dict[str, T]:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected {what}, got {json_type_name(value)}")
        out: dict[str, T] = {}
        errors: list[Exception] = []
        for key, raw in value.items():
            try:
                out[str(key)] = item(raw)
            except (TypeError, ValueError, cattrs.BaseValidationError) as exc:
                exc.__notes__ = [*getattr(exc, "__notes__", []),
                                 IterableValidationNote(f"value @ key {key!r}", key, Any)]
                errors.append(exc)
        if errors:
            raise IterableValidationError("invalid values", errors, dict[str, Any])
        return out

    return parse

# --------------------------------------------------------------- tool tables


@attrs.frozen
class ToolSettings:
    """The keys of a ``[tools.<name>]`` table that lich's executor reads for every tool.

    A tool with settings of its own extends it, so that its table accepts these
    as well and its own keys are checked like any settings::

        @frozen
        class QuerySettings(ToolSettings):
            max_rows: int = setting(1000, check=at_least(1))

        structure_settings(config.tool_settings("query"), QuerySettings, "$.tools.query")

    ``None`` means "the tool's own" (``Tool.timeout_s``, ``Tool.max_output_chars``,
    ``Tool.runs_inline``).
    """

    timeout_s: float | None = setting(None, check=greater_than(0),
                                      help="the executor's time limit for one call")
    max_output_chars: int | None = setting(None, check=greater_than(0),
                                           help="the output cap of one call")
    runs_inline: bool | None = setting(
        None, help="false: run the tool in a worker thread although it declares "
                   "runs_inline (true: on the event loop, for a plain tool that never blocks)")


TOOL_LIMIT_KEYS: tuple[str, ...] = tuple(a.name for a in attrs.fields(ToolSettings))
"""The keys every ``[tools.<name>]`` table may hold, whichever plugin the tool is from."""


def tool_limits(table: Any, tool: str) -> ToolSettings:
    """The executor's keys of the ``[tools.<tool>]`` table ``table``, checked.

    Only :data:`TOOL_LIMIT_KEYS` are read: the table's other keys are the tool's own.

    :raises ConfigError: naming every bad key as ``$.tools.<tool>.<key>``.
    """
    path = f"$.tools.{tool}"
    if table is not None and not isinstance(table, Mapping):
        raise ConfigError([f"{path}: expected a table, got {json_type_name(table)}"])
    own = {k: table[k] for k in TOOL_LIMIT_KEYS if k in table} if table else {}
    return structure_settings(own, ToolSettings, path)


# --------------------------------------------------------------- config tables


@attrs.frozen
class TableClaim:
    """A plugin's claim on a top-level config table (``[<table>]``).

    :param table: the table's name.
    :param settings: the settings class (a frozen attrs class) its values are built into.
    :param plugin: the plugin that claimed it (``"lich"``: the core).
    :param kind: for a table whose ``kind`` key picks its owner (``[bus]``,
        ``[session_store]``), the kind this claim is for; ``None``: the whole table.
    :param default: a kind claim that also owns the table when ``kind`` is left out.
    :param parse: builds ``settings`` from the raw table and its ``$.path``
        (default :func:`structure_settings`; a custom one must use it too).
    :param help: one line describing the table (``lich config init`` writes it).
    """

    table: str
    settings: type[Any]
    plugin: str
    kind: str | None = None
    default: bool = False
    parse: Callable[[Any, str], Any] | None = None
    help: str = ""

    def structure(self, raw: Any) -> Any:
        """The table's settings, built from ``raw``.

        A kind claim whose settings class has no ``kind`` field is given the table
        without its ``kind`` key (the key chose the claim; it is no setting).

        :raises ConfigError: every problem, with its ``$.<table>...`` path.
        """
        path = f"$.{self.table}"
        if raw is not None and not isinstance(raw, Mapping):
            raise ConfigError([f"{path}: expected a table, got {json_type_name(raw)}"])
        if (self.kind is not None and raw and "kind" in raw and attrs.has(self.settings)
                and "kind" not in attrs.fields_dict(self.settings)):
            raw = {k: v for k, v in raw.items() if k != "kind"}
        if self.parse is None:
            return structure_settings(raw, self.settings, path)
        return self.parse(raw if raw is not None else {}, path)


class ConfigTables(Registry[TableClaim]):
    """The top-level config tables the loaded plugins claim, filled by
    ``lich_register_config_tables(tables)``.

    A plugin claims its tables as it registers tools: ``tables.claim("myplugin",
    MySettings)``. lich then checks every claimed table with the claim's settings
    class (``lich config validate``, before any run), shows it with its defaults
    (``lich config show``) and writes it into the template (``lich config init``);
    a table no loaded plugin claims is a configuration error.

    Entries are named ``<table>`` for a whole-table claim and ``<table> (kind
    <kind>)`` for a kind claim; a name claimed twice keeps its first claim.
    """

    what: ClassVar[str] = "config_table"

    def claim(
        self,
        table: str,
        settings: type[Any],
        *,
        kind: str | None = None,
        default: bool = False,
        parse: Callable[[Any, str], Any] | None = None,
        help: str = "",
    ) -> None:
        """Claim the table ``[<table>]`` for the calling plugin.

        :param settings: the frozen attrs class the table is structured into.
        :param kind: claim only the table whose ``kind`` key is this (several
            plugins may then share one table name, each for its kinds).
        :param default: (with ``kind``) also claim the table when ``kind`` is left out.
        :param parse: ``(raw, path) -> settings``, when the table needs more than
            :func:`structure_settings` (which it must still use).
        :param help: one line for ``lich config init``.
        :raises ValueError: a table name that is no bare lower-case key, a
            settings class that is no attrs class, or ``default`` without ``kind``.
        """
        if not table or not table.replace("_", "a").isalnum() or table != table.lower():
            raise ValueError(f"table name {table!r}: lower case letters, digits and _ only")
        if default and kind is None:
            raise ValueError(f"[{table}]: default=True needs a kind")
        if not attrs.has(settings):
            raise ValueError(f"[{table}]: settings must be an attrs class, not {settings!r}")
        key = table if kind is None else f"{table} (kind {kind})"
        # A whole-table claim and a kind claim of one table cannot both hold, nor two
        # default kinds: the first claim of the table's name is the one kept.
        rival = next((c for c in self.items() if c.table == table and (
            c.kind is None or kind is None or (default and c.default))), None)
        if rival is not None:
            key = rival.table if rival.kind is None else f"{rival.table} (kind {rival.kind})"
        self._add(key, TableClaim(table, settings, self.current_plugin or "lich", kind=kind,
                                  default=default, parse=parse, help=help))

    @property
    def claims(self) -> tuple[TableClaim, ...]:
        """Every claim, in registration order."""
        return tuple(self.items())

    def in_plugin_order(self) -> list[TableClaim]:
        """Every claim, the core's first, then by plugin in the order the plugins
        were registered (hooks are called last-registered first)."""
        order = list(dict.fromkeys(c.plugin for c in self.items()))
        rank = {p: (p != "lich", -i) for i, p in enumerate(order)}
        return sorted(self.items(), key=lambda c: rank[c.plugin])

    def tables(self) -> list[str]:
        """The claimed table names, each once, in registration order."""
        return list(dict.fromkeys(c.table for c in self.items()))

    def of_plugin(self, plugin: str) -> list[str]:
        """What ``plugin`` claims: ``gateway``, ``bus (kind memory)``."""
        return [n for n in self.names() if self.plugin_of(n) == plugin]

    def claim_for(self, table: str, raw: Any) -> TableClaim | None:
        """The claim that owns ``raw`` as the table ``[<table>]``: the whole-table
        claim, or the claim of its ``kind`` (the default claim when it has none)."""
        kind = raw.get("kind") if isinstance(raw, Mapping) else None
        for claim in self.items():
            if claim.table == table and (
                    claim.kind is None or claim.kind == kind
                    or (kind is None and claim.default)):
                return claim
        return None

    def kinds(self, table: str) -> list[str]:
        """The kinds claimed for ``[<table>]`` (empty: no kind claims)."""
        return [c.kind for c in self.items() if c.table == table and c.kind is not None]
