"""Configuration: the :class:`LichConfig` type, where it is found, and how it is overridden.

Order of precedence, lowest first: defaults, the config file, environment
variables (``LICH_*``), command-line flags. The file is, in order: the one
given with ``--config`` (TOML or JSON), the nearest ``.lich/config.toml`` in
the work dir or its parents (as git finds ``.git``; see :func:`locate_config`),
or ``config.toml`` in the user config dir. Unknown keys and bad values are
:class:`ConfigError` naming the file and the ``$.path``.

Secrets never live here: a provider names the environment variable that holds
its key (``api_key_env``).

A project config (found in the work dir or a parent) is read only when no other
local user could have written it (:func:`lich.trust.unsafe_reason`), and until its
project is trusted only its safe keys are used (:mod:`lich.trust`). A file given
with ``--config`` is the user's own choice, named on their command line: it is
read whole, as the user config is.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, TypeAlias, get_args

import attrs
from attrs import field, frozen

from lich._converter import PARSE, converter
from lich.backoff import Jitter
from lich.settings import (
    TOOL_LIMIT_KEYS,
    ConfigError,
    ToolSettings,
    at_least,
    between,
    each_value,
    greater_than,
    json_type_name,
    non_empty,
    setting,
    structure_settings,
)
from lich.trust import ProjectTrust

__all__ = [
    "BUILTIN_PLUGINS",
    "CORE_KEYS",
    "ConfigError",
    "ConfigLocation",
    "LichConfig",
    "LoadedConfig",
    "ModelRole",
    "ProviderConfig",
    "Source",
    "config_search_dirs",
    "find_config_file",
    "is_path_entry",
    "load_config",
    "locate_config",
    "user_config_path",
    "user_trusted_dirs",
    "with_file_lines",
]

BUILTIN_PLUGINS: tuple[str, ...] = (
    "builtin_tools",
    "approvals",
    "openai_compat",
    "anthropic",
    "ollama",
    "failover",
    "gateway",
    "budgets",
    "mcp",
    "postgres",
)
LogLevel: TypeAlias = Literal["debug", "info", "warn", "warning", "error"]
Source: TypeAlias = Literal["default", "file", "env", "flag"]


def _tools_enabled(value: Any) -> tuple[str, ...] | None:
    if value is None or value == "all":
        return None
    return tuple(value)


def _parse_tools_enabled(value: Any) -> tuple[str, ...] | None:
    if value is None or value == "all":
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError('expected "all" or a list of tool names')
    return tuple(value)


def _tool_table(table: Any) -> dict[str, Any]:
    # Every [tools.<name>] table, whichever plugin its tool comes from, may set the
    # executor's limits: those keys are lich's to check, here. The rest is the tool's.
    if not isinstance(table, Mapping):
        raise TypeError(f"expected a table, got {json_type_name(table)}")
    converter.structure({k: table[k] for k in TOOL_LIMIT_KEYS if k in table}, ToolSettings)
    return dict(table)


def _unique_provider_names(providers: Any) -> None:
    names = [p.name for p in providers]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate provider name(s): {', '.join(dupes)}")


@frozen(kw_only=True)
class ProviderConfig:
    """One ``[[providers]]`` entry.

    ``kind`` names a provider kind some loaded plugin registered; left out,
    it is the first kind registered. ``base_url`` and ``api_key_env`` left out
    take the kind's own defaults (see :class:`lich.providers.ProviderDefaults`):
    a default key variable is sent to the kind's well-known host only.
    ``api_key_env`` is the *name* of the environment variable that holds the
    key. ``options`` carries provider-specific extras.
    """

    kind: str | None = setting(None, check=non_empty)
    name: str = setting(check=non_empty)
    model: str = setting(check=non_empty)
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float | None = setting(None, check=greater_than(0))
    think: bool | None = None
    keep_alive: str | None = None
    max_tokens: int | None = setting(None, check=greater_than(0))
    headers: Mapping[str, str] = field(factory=dict)
    options: Mapping[str, Any] = field(factory=dict)


@frozen(kw_only=True)
class ModelRole:
    """One ``[models.<role>]`` table: what an auxiliary model role (``compress`` for the
    summariser; judges, subagents) calls instead of the run's own model.

    ``provider`` names the ``[[providers]]`` entry whose kind, endpoint and key the
    role uses (the first one when left out); ``model`` replaces its model (the
    provider's own when left out). A role with no table falls back to the run's model
    (:meth:`lich.RunInfo.chat_for`).
    """

    model: str | None = setting(None, check=non_empty)
    provider: str | None = setting(None, check=non_empty)


@frozen
class LichConfig:
    """The effective configuration of an agent. Build one with :func:`load_config`
    or directly (tests, scripts); everything has a default but ``providers``,
    which an agent needs before it can call a model.
    """

    providers: tuple[ProviderConfig, ...] = setting(
        factory=tuple, check=_unique_provider_names)
    system_prompt: str | None = None
    max_turns: int = setting(25, check=between(1, 10_000))
    #: Per-run budgets, enforced by the ``budgets`` plugin before each model call.
    max_cost_usd: float | None = setting(None, check=greater_than(0))
    max_total_tokens: int | None = setting(None, check=greater_than(0))
    work_dir: str = field(factory=os.getcwd)
    tools_enabled: tuple[str, ...] | None = field(
        default=None, converter=_tools_enabled, metadata={PARSE: _parse_tools_enabled})
    tools_disabled: tuple[str, ...] = ()
    temperature: float | None = setting(None, check=between(0, 2))
    max_tokens: int | None = setting(None, check=greater_than(0))
    context_budget_tokens: int = setting(100_000, check=greater_than(0))
    #: The system prompt's budget: ``system_prompt`` plus the ``lich_instructions``
    #: sections, estimated as lich.context does; sections over it are cut, lowest
    #: priority first, and every cut is reported (``instructions_cut``).
    instructions_budget_tokens: int = setting(16_000, check=greater_than(0))
    #: ``[models.<role>]``: the model of each auxiliary role (``run.chat_for(role)``).
    models: Mapping[str, ModelRole] = field(factory=dict)
    compress_threshold: float = setting(0.8, check=between(0.1, 0.95))
    session_dir: str = ""
    persist_sessions: bool = True
    protect_private_files: bool = True
    plugins: tuple[str, ...] = BUILTIN_PLUGINS
    log_level: LogLevel = "info"
    tools: Mapping[str, Mapping[str, Any]] = setting(factory=dict, parse=each_value(_tool_table))
    stream: bool = True
    hook_timeout_s: float = setting(10.0, check=greater_than(0))
    #: How long a tool call waits for a person's approval (lich_request_approval) before
    #: it is denied; 0 waits for ever. Not hook_timeout_s: a person is slower than a hook.
    approval_timeout_s: float = setting(300.0, check=at_least(0))
    strict_plugins: bool = False
    #: How retries after a provider failure are spread (lich.backoff): "none" (the exact
    #: delays), "full" or "equal". Unset: "none" for a CLI run, "full" in the gateway,
    #: where many conversations retrying in lock-step against one rate-limited provider
    #: is the failure to avoid. A router plugin's own setting wins.
    retry_jitter: Jitter | None = None
    #: Every other top-level table (``[approvals]``, ``[gateway]``, ``[myplugin]``), raw,
    #: by name: each belongs to the plugin that claims it (``lich_register_config_tables``),
    #: which checks it; one that no loaded plugin claims is a configuration error.
    tables: Mapping[str, Mapping[str, Any]] = field(factory=dict)
    #: The tables given the deprecated way, as ``[plugin_settings.<name>]`` (read as
    #: ``[<name>]``; a plugin need not claim them, as it never had to).
    legacy_tables: frozenset[str] = field(default=frozenset(), converter=frozenset)

    def __attrs_post_init__(self) -> None:
        # session_dir follows work_dir unless it was given.
        if not self.session_dir:
            object.__setattr__(
                self, "session_dir", str(Path(self.work_dir) / ".lich" / "sessions")
            )

    def tool_settings(self, name: str) -> Mapping[str, Any]:
        """The ``[tools.<name>]`` table, or an empty mapping."""
        return self.tools.get(name, {})

    def table(self, name: str) -> Mapping[str, Any]:
        """The raw top-level table ``[<name>]`` (a plugin's own), or an empty mapping.

        The plugin that claims it structures it with its settings class
        (:func:`lich.settings.structure_settings`, path ``$.<name>``).
        """
        return self.tables.get(name, _NO_TABLE)

    @property
    def plugin_settings(self) -> Mapping[str, Mapping[str, Any]]:
        """Deprecated (one release): every plugin table by name, as :attr:`tables`.

        ``config.plugin_settings.get("x")`` keeps finding ``[x]`` and the old
        ``[plugin_settings.x]`` alike; read :meth:`table` instead.
        """
        return self.tables


@frozen
class LoadedConfig:
    """A loaded configuration and where each top-level value came from."""

    config: LichConfig
    file: str | None
    sources: Mapping[str, Source]
    location: ConfigLocation | None = None
    """Which file and why (``None``: no file)."""
    trust: ProjectTrust | None = None
    """A project config's trust, and what was ignored of it (``None``: not a project's)."""
    warnings: tuple[str, ...] = ()
    """Config files passed over (another user could have written them): one line each."""
    notices: tuple[str, ...] = ()
    """What the user should change although the config works (deprecated spellings)."""


def user_config_path() -> Path:
    """``config.toml`` in the user config dir (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("lich")) / "config.toml"


ConfigReason: TypeAlias = Literal["flag", "work_dir", "parent", "user"]


@frozen
class ConfigLocation:
    """Which config file is used, and why.

    ``reason``: ``flag`` (``--config``), ``work_dir`` (the work dir's own
    ``.lich/config.toml``), ``parent`` (that of a parent directory, found as git finds
    ``.git``), ``user`` (the user config dir). ``project_dir`` is the directory holding
    the ``.lich/`` of a project config (``None`` for the others).
    """

    path: Path
    reason: ConfigReason
    project_dir: Path | None = None

    def describe(self) -> str:
        """One line saying why this file is the one."""
        if self.reason == "flag":
            return "given with --config"
        if self.reason == "work_dir":
            return "the work dir's own .lich/config.toml"
        if self.reason == "parent":
            return (f"the nearest .lich/config.toml above the work dir: the project "
                    f"{self.project_dir}, whose .lich/sessions the transcripts go to")
        return "the user config (no .lich/config.toml in the work dir or its parents)"


def config_search_dirs(work_dir: str | os.PathLike[str]) -> list[Path]:
    """Where a project's ``.lich/config.toml`` is looked for, nearest first: the work
    dir, then its parents up to the filesystem root — or, under ``$HOME``, up to but
    not including ``$HOME`` (a ``~/.lich`` would otherwise claim every project in the
    home directory; the user config is for that)."""
    start = Path(work_dir).resolve()
    home_value = os.environ.get("HOME")
    home = Path(home_value).resolve() if home_value else None
    dirs = [start]
    for parent in start.parents:
        if parent == home:
            break
        dirs.append(parent)
    return dirs


def locate_config(
    work_dir: str | os.PathLike[str], explicit: str | None = None,
    *, passed_over: list[str] | None = None,
) -> ConfigLocation | None:
    """The config file to use and why: ``explicit``, else the nearest project's
    ``.lich/config.toml`` (:func:`config_search_dirs`), else the user's.

    A project config that another local user could have written (owned by someone
    else, or in a directory others can write: :func:`lich.trust.unsafe_reason`) is
    passed over, and the search goes on above it.

    :param passed_over: gets one line for each config passed over.
    :raises ConfigError: ``explicit`` names no file.
    """
    from lich.trust import unsafe_reason

    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError([f"config not found: {path}"])
        return ConfigLocation(path, "flag")
    dirs = config_search_dirs(work_dir)
    for directory in dirs:
        candidate = directory / ".lich" / "config.toml"
        if candidate.is_file():
            reason = unsafe_reason(directory)
            if reason is not None:
                if passed_over is not None:
                    passed_over.append(f"ignored {candidate}: {reason} (only a config "
                                       "the user or root owns, in directories only they "
                                       "can write, is read)")
                continue
            return ConfigLocation(candidate, "work_dir" if directory == dirs[0] else "parent",
                                  directory)
    user = user_config_path()
    return ConfigLocation(user, "user") if user.is_file() else None


def find_config_file(work_dir: str | os.PathLike[str], explicit: str | None = None) -> Path | None:
    """The path of :func:`locate_config`'s file, or ``None``."""
    location = locate_config(work_dir, explicit)
    return location.path if location else None


_ADD = "+"
_NO_TABLE: Mapping[str, Any] = MappingProxyType({})  # one object: a cache keyed on it holds


def _expand_additions(raw: dict[str, Any], file_name: str | None) -> None:
    """``plugins = ["+shout.py"]``: the default plugins plus these. Listing plugins
    without ``+`` replaces the defaults (all of them: gateway, anthropic, ollama…)."""
    listed = raw.get("plugins")
    if not isinstance(listed, list | tuple):
        return  # structure() reports the bad type with its path
    added = [isinstance(e, str) and e.startswith(_ADD) for e in listed]
    if not any(added):
        return
    problems = []
    if not all(added):
        plain = ", ".join(repr(e) for e, a in zip(listed, added, strict=True) if not a)
        problems.append(
            f"$.plugins: either add to the defaults (every entry \"+name\") or list every "
            f"plugin (no \"+\"), not both: {plain} has no \"+\""
        )
    for i, entry in enumerate(listed):
        if isinstance(entry, str) and not entry[len(_ADD):].strip():
            problems.append(f"$.plugins[{i}]: \"+\" names no plugin")
    if problems:
        raise ConfigError(problems, file_name)
    extra = dict.fromkeys(e[len(_ADD):].strip() for e in listed)  # once each, in order
    raw["plugins"] = [*BUILTIN_PLUGINS, *(e for e in extra if e not in BUILTIN_PLUGINS)]


def is_path_entry(entry: str) -> bool:
    """Whether a ``plugins`` entry names a file (it ends in ``.py`` or holds a path
    separator) rather than an entry point or a module. The one rule: the loader, the
    config's relative paths and ``--plugin`` all read an entry by it."""
    return entry.endswith(".py") or "/" in entry or os.sep in entry


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"cannot read config: {exc}"], str(path)) from exc
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        fmt = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise ConfigError([f"not valid {fmt}: {exc}"], str(path)) from exc
    if not isinstance(data, dict):
        raise ConfigError(["$: the top level must be a table/object"], str(path))
    return data


_ENV_BOOL_TRUE = {"1", "true", "yes", "on"}


def load_config(
    *,
    work_dir: str | os.PathLike[str] | None = None,
    config_path: str | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    trust: bool | None = None,
) -> LoadedConfig:
    """Build the effective configuration.

    :param work_dir: the ``--work-dir`` flag (also where ``.lich/config.toml`` is looked for).
    :param config_path: the ``--config`` flag.
    :param env: the environment (``os.environ`` by default).
    :param flags: command-line overrides by config key, plus the provider flags
        ``model``, ``provider_kind``, ``base_url``, ``api_key_env``; ``None``
        values are ignored.
    :param data: use this mapping instead of reading a file (``file`` is then ``None``).
    :param trust: of a project config: ``True`` trust it for this call (``--trust``),
        ``False`` do not, ``None`` as recorded (:func:`lich.trust.trust_of`). An
        untrusted one keeps only its safe keys (:func:`lich.trust.untrusted_view`).
    :raises ConfigError: naming the file and every bad ``$.path``.
    """
    env = os.environ if env is None else env
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    base_dir = Path(work_dir or flags.get("work_dir") or os.getcwd()).resolve()
    file: Path | None = None
    location: ConfigLocation | None = None
    passed_over: list[str] = []
    project_trust: ProjectTrust | None = None
    if data is None:
        location = locate_config(base_dir, config_path, passed_over=passed_over)
        file = location.path if location else None
        raw: dict[str, Any] = _read_file(file) if file else {}
    else:
        raw = dict(data)
    file_name = str(file) if file else None
    _pop_trusted_dirs(raw, file_name, location)
    if location is not None and location.project_dir is not None:
        # Filtered raw, before anything is structured: what is left out never reaches
        # a class, a plugin or a provider.
        from lich.trust import trust_of, untrusted_view

        user = _user_raw()
        project_trust = trust_of(location.project_dir, location.path, flag=trust, env=env,
                                 trusted_dirs=user_trusted_dirs(user))
        if not project_trust.trusted:
            user_plugins = _user_plugins(user)
            raw, ignored = untrusted_view(raw, user_plugins)
            if user_plugins != BUILTIN_PLUGINS:
                raw["plugins"] = list(user_plugins)
            project_trust = attrs.evolve(project_trust, ignored=ignored)
    sources: dict[str, Source] = {k: "file" for k in raw}
    _expand_additions(raw, file_name)
    # A project config found in a parent of the work dir: its relative paths are the
    # project's, wherever below it lich was started.
    above = location.project_dir if location is not None and location.reason == "parent" else None
    if above is not None and isinstance(raw.get("plugins"), list):
        raw["plugins"] = [
            str(above / Path(e).expanduser()) if isinstance(e, str) and is_path_entry(e)
            and not Path(e).expanduser().is_absolute() else e
            for e in raw["plugins"]
        ]

    if "work_dir" in raw and isinstance(raw["work_dir"], str) and file is not None:
        raw["work_dir"] = str((file.parent.parent if file.parent.name == ".lich" else file.parent)
                              .joinpath(Path(raw["work_dir"]).expanduser()).resolve())
    raw.setdefault("work_dir", str(base_dir))
    if "work_dir" in flags:
        raw["work_dir"] = str(Path(flags["work_dir"]).resolve())
        sources["work_dir"] = "flag"
    if (file is not None and "work_dir" in sources) or "work_dir" in flags:
        # Never created: a mistyped work dir is an error, not a new empty project.
        where = "$.work_dir" if sources.get("work_dir") == "file" else "work_dir"
        if isinstance(raw["work_dir"], str) and not Path(raw["work_dir"]).is_dir():
            raise ConfigError([f"{where}: no such directory: {raw['work_dir']}"],
                              file_name if where == "$.work_dir" else None)
    # A session_dir written in the file is relative to the work dir the file names, else
    # to the project (which is the work dir unless the file was found in a parent: the
    # work dir stays where lich was started, the agent works where you are), and may
    # start with "~".
    relative_to = Path(raw["work_dir"]) if isinstance(raw["work_dir"], str) else base_dir
    if above is not None and sources.get("work_dir") != "file":
        relative_to = above
    session_dir = raw.get("session_dir")
    if isinstance(session_dir, str) and session_dir:
        path = Path(session_dir).expanduser()
        raw["session_dir"] = str(path if path.is_absolute() else relative_to / path)
    elif above is not None and not session_dir:
        # Transcripts go to the project's .lich/sessions wherever in the tree lich was
        # started (a --session-dir flag still wins, below).
        raw["session_dir"] = str(above / ".lich" / "sessions")

    # Environment, then flags, for plain keys.
    if env.get("LICH_STRICT_PLUGINS", "").strip().lower() in _ENV_BOOL_TRUE:
        raw["strict_plugins"] = True
        sources["strict_plugins"] = "env"
    env_level = env.get("LICH_LOG_LEVEL", "").strip().lower()
    if env_level and "log_level" not in flags:
        if env_level not in get_args(LogLevel):
            # The variable's fault, not the file's: no file name, no $.log_level.
            raise ConfigError([
                f"LICH_LOG_LEVEL: {env['LICH_LOG_LEVEL']!r} is not a log level; use one of "
                + ", ".join(get_args(LogLevel))
            ])
        raw["log_level"] = env_level
        sources["log_level"] = "env"
    for key in (
        "system_prompt",
        "session_dir",
        "log_level",
        "max_turns",
        "max_cost_usd",
        "max_total_tokens",
        "strict_plugins",
        "stream",
    ):
        if key in flags:
            raw[key] = flags[key]
            sources[key] = "flag"
    if "plugins" in flags:  # --plugin adds to the configured list (once: not a second load)
        listed = raw.get("plugins", BUILTIN_PLUGINS)
        if isinstance(listed, list | tuple):
            listed = [*listed, *(p for p in flags["plugins"] if p not in listed)]
        raw["plugins"] = listed
        sources["plugins"] = "flag"

    provider_source = _apply_provider_overrides(raw, env, flags)
    if provider_source:
        sources["providers"] = provider_source

    problems: list[str] = []
    if "api_key" in raw:
        problems.append(
            "$.api_key: secrets never live in the config; name the env var in api_key_env"
        )
    for i, p in enumerate(raw.get("providers") or []):
        if isinstance(p, Mapping) and "api_key" in p:
            problems.append(
                f"$.providers[{i}].api_key: secrets never live in the config; "
                "set api_key_env to the name of the environment variable holding the key"
            )
    notices = _split_tables(raw, problems)
    if problems:
        raise ConfigError(_with_lines(problems, file, sources), file_name)
    try:
        config = structure_settings(raw, LichConfig)
    except ConfigError as exc:
        raise ConfigError(_with_lines(exc.problems, file, sources), file_name) from exc
    return LoadedConfig(config=config, file=file_name, sources=sources, location=location,
                        trust=project_trust, warnings=tuple(passed_over),
                        notices=notices)


def with_file_lines(loaded: LoadedConfig, problems: Sequence[str]) -> list[str]:
    """``problems`` (``"$.path: message"`` lines, a plugin's settings check's too) with
    `` (line N)``: where each path stands in the loaded TOML file, when it came from
    there."""
    return _with_lines(list(problems), Path(loaded.file) if loaded.file else None,
                       loaded.sources)


def _with_lines(problems: list[str], file: Path | None,
                sources: Mapping[str, Source]) -> list[str]:
    """``problems`` with the line of the TOML file each ``$.path`` stands on (read again,
    only now there is something to report); a key the environment or a flag set keeps
    its problem as it is."""
    if file is None or file.suffix.lower() == ".json":
        return problems
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return problems
    from lich.toml_lines import with_lines

    return with_lines(text, problems, frozenset(k for k, v in sources.items() if v != "file"))


def _pop_trusted_dirs(
    raw: dict[str, Any], file_name: str | None, location: ConfigLocation | None = None
) -> tuple[str, ...]:
    """Take ``trusted_dirs`` out of ``raw`` (no class has it): the user config's list of
    directories whose projects are trusted. In any other file it is an error: a project
    cannot vouch for itself (an untrusted one has it dropped with its other unsafe keys)."""
    if "trusted_dirs" not in raw:
        return ()
    if location is not None and location.reason != "user":
        if location.project_dir is not None:
            return ()  # the filter drops it, or (trusted) structuring reports it
        raise ConfigError(["$.trusted_dirs: only the user config "
                           f"({user_config_path()}) lists trusted directories"], file_name)
    value = raw.pop("trusted_dirs")
    if not isinstance(value, list) or not all(
            isinstance(v, str) and Path(v).expanduser().is_absolute() for v in value):
        raise ConfigError(["$.trusted_dirs: expected a list of absolute paths"], file_name)
    return tuple(value)


def user_trusted_dirs(user: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The user config's ``trusted_dirs`` (none when it has none or a bad one).

    :param user: the user config as read (read here when not given); it loses the key.
    """
    try:
        return _pop_trusted_dirs(_user_raw() if user is None else user, None)
    except ConfigError:
        return ()  # a bad list trusts nothing (loading the user config says why)


def _user_raw() -> dict[str, Any]:
    """The user config as read, or nothing (none, or unreadable: its own load says why)."""
    path = user_config_path()
    if not path.is_file():
        return {}
    try:
        return _read_file(path)
    except ConfigError:
        return {}


def _user_plugins(user: dict[str, Any]) -> tuple[str, ...]:
    """The user's own plugin list (their user config's, or the builtins), its relative
    files read from the user config dir — never from the project lich runs in."""
    try:
        _expand_additions(user, None)
    except ConfigError:
        return BUILTIN_PLUGINS
    listed = user.get("plugins", BUILTIN_PLUGINS)
    if not isinstance(listed, list | tuple) or not all(isinstance(e, str) for e in listed):
        return BUILTIN_PLUGINS
    base = user_config_path().parent
    return tuple(str(base / Path(e).expanduser()) if is_path_entry(e)
                 and not Path(e).expanduser().is_absolute() else e for e in listed)


#: The keys of the core (``LichConfig``'s own): every other top-level table is a plugin's.
CORE_KEYS: frozenset[str] = frozenset(
    a.name for a in attrs.fields(LichConfig)) - {"tables", "legacy_tables"}
_LEGACY = "plugin_settings"


def _split_tables(raw: dict[str, Any], problems: list[str]) -> tuple[str, ...]:
    """Move every top-level table that is no core key into ``raw["tables"]`` (and each
    ``[plugin_settings.<name>]`` there as ``<name>``); the notices to show.

    Only tables move: an unknown plain key (``max_turn = 3``) stays, and is reported
    with the closest core key when the core keys are structured.
    """
    tables: dict[str, Any] = {}
    for key in [k for k in raw if k not in CORE_KEYS and k != _LEGACY]:
        if isinstance(raw[key], Mapping):
            tables[key] = raw.pop(key)
    raw.pop("tables", None)  # never a key of the file: a table named so is moved above
    raw.pop("legacy_tables", None)
    legacy = raw.pop(_LEGACY, None)
    notices: tuple[str, ...] = ()
    if legacy is not None:
        if not isinstance(legacy, Mapping):
            problems.append(f"$.{_LEGACY}: expected a table, got {json_type_name(legacy)}")
            legacy = {}
        moved = []
        for name, table in legacy.items():
            if not isinstance(table, Mapping):
                problems.append(
                    f"$.{_LEGACY}.{name}: expected a table, got {json_type_name(table)}")
            elif name in tables or name in CORE_KEYS:
                problems.append(f"$.{_LEGACY}.{name}: [{name}] is given too; keep one "
                                f"(write [{name}]: [{_LEGACY}.<name>] is deprecated)")
            else:
                tables[name] = table
                moved.append(str(name))
        raw["legacy_tables"] = moved
        if moved:
            notices = (
                f"$.{_LEGACY}: deprecated, read for one more release: write "
                + ", ".join(f"[{name}]" for name in moved) + " instead of "
                + ", ".join(f"[{_LEGACY}.{name}]" for name in moved)
                + " (docs/plugins.md, Settings)",)
    raw["tables"] = tables
    return notices


def _apply_provider_overrides(
    raw: dict[str, Any], env: Mapping[str, str], flags: Mapping[str, Any]
) -> Source | None:
    """LICH_MODEL & co. and their flags: make or adjust the first provider."""
    values: dict[str, Any] = {}
    source: Source | None = None
    for key, var in (
        ("kind", "LICH_PROVIDER_KIND"),
        ("model", "LICH_MODEL"),
        ("base_url", "LICH_BASE_URL"),
        ("api_key_env", "LICH_API_KEY_ENV"),
    ):
        flag_key = "provider_kind" if key == "kind" else key
        if flags.get(flag_key):
            values[key] = flags[flag_key]
            source = "flag"
        elif env.get(var):
            values[key] = env[var]
            source = source or "env"
    if not values:
        return None
    providers = raw.get("providers")
    if not providers:
        if "model" not in values:
            # A kind or URL alone does not make a provider; the "no model" error says what to set.
            return None
        # Only what was given: the kind's own defaults (and the key rule that goes with
        # them) apply to the rest when the provider is built. No kind: the first registered.
        raw["providers"] = [{"name": "default", **values}]
        return source
    if not isinstance(providers, list) or not isinstance(providers[0], Mapping):
        return None  # structure() reports the bad shape with its path
    first = dict(providers[0])
    if "kind" in values and values["kind"] != first.get("kind"):
        # A new kind keeps nothing endpoint-specific from the old one.
        for key in ("base_url", "api_key_env", "headers", "options", "keep_alive", "think"):
            first.pop(key, None)  # headers often carry credentials for the old endpoint
    first.update(values)
    raw["providers"] = [first, *providers[1:]]
    return source


def no_model_message() -> str:
    """What to tell a user whose configuration names no model."""
    return (
        "no model configured: set LICH_MODEL (and LICH_PROVIDER_KIND / LICH_BASE_URL), "
        "pass --model, or add a [[providers]] table to .lich/config.toml "
        "(`lich config init` writes a template)"
    )


def config_with(config: LichConfig, **changes: Any) -> LichConfig:
    """A copy of ``config`` with ``changes``; ``session_dir`` follows a new ``work_dir``."""
    if "work_dir" in changes and "session_dir" not in changes:
        default_dir = str(Path(config.work_dir) / ".lich" / "sessions")
        if config.session_dir == default_dir:
            changes["session_dir"] = ""
    return attrs.evolve(config, **changes)
