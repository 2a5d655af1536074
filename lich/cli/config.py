"""``lich config``: write a template, show the effective values, find the file, validate.

None of these needs a model. ``validate`` checks what a run checks — the file, the
provider kinds, and every plugin's own settings (``lich_check_config``) — so a
configuration that a run would reject is never reported as valid.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lich.cli.common import (
    EXIT_OK,
    EXIT_STOPPED,
    EXIT_USAGE,
    echo_error,
    echo_warning,
    host_for,
    load_settings_config,
    named_plugin_failures,
    quiet_plugin_log,
)
from lich.cli.options import CliSettings, config_options, get_settings, json_option
from lich.cli.output import (
    add_row,
    load_or_report,
    out_console,
    print_json,
    print_table,
    refuse_json,
)
from lich.secrets import redact_urls

if TYPE_CHECKING:
    from lich.config import LichConfig, LoadedConfig, ProviderConfig
    from lich.plugins import PluginHost
    from lich.providers import ProviderKind, ProviderRegistry
    from lich.settings import ConfigTables, TableClaim

__all__ = [
    "config_group",
    "config_init",
    "config_path",
    "config_show",
    "config_template",
    "config_validate",
    "describe_config",
    "mask_secrets",
    "provider_kinds",
    "table_view",
    "toml_value",
    "write_text_atomically",
]


@click.group("config")
@json_option()
@click.pass_context
def config_group(ctx: click.Context) -> None:
    """Write, show, locate and check the configuration."""
    # They show an untrusted project's config as a run would use it, and what trust
    # would enable; they never ask to trust it (`lich trust` does).
    get_settings(ctx).ask_trust = False


@config_group.command("init")
@config_options
@click.option("--user", is_flag=True, help="Write the user config instead of the work dir's.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option("--print", "to_stdout", is_flag=True, help="Print the template instead.")
@json_option("Not supported: the template is TOML.")
@click.pass_context
def config_init_command(ctx: click.Context, user: bool, force: bool, to_stdout: bool) -> None:
    """Write a commented .lich/config.toml template."""
    if refuse_json(get_settings(ctx), "lich config init",
                   "it writes a TOML template (`lich config show --json` prints the values)"):
        ctx.exit(EXIT_USAGE)
    ctx.exit(config_init(get_settings(ctx), user=user, force=force, to_stdout=to_stdout))


@config_group.command("show")
@config_options
@json_option()
@click.pass_context
def config_show_command(ctx: click.Context) -> None:
    """The effective configuration, each value with its source
    (default, file, env, flag). Secrets are never shown."""
    settings = get_settings(ctx)
    ctx.exit(config_show(settings, settings.json))


@config_group.command("path")
@config_options
@json_option("Not supported: the path is printed alone on its line.")
@click.pass_context
def config_path_command(ctx: click.Context) -> None:
    """The config file in use (exit 1 when there is none)."""
    if refuse_json(get_settings(ctx), "lich config path",
                   "it prints the path alone on stdout (`lich config show --json` has it too)"):
        ctx.exit(EXIT_USAGE)
    ctx.exit(config_path(get_settings(ctx)))


@config_group.command("validate")
@config_options
@json_option("Not supported: the exit code is the answer.")
@click.pass_context
def config_validate_command(ctx: click.Context) -> None:
    """Check the config as a run would: errors name the file and the $.path;
    provider kinds and every plugin's own settings are checked too."""
    if refuse_json(get_settings(ctx), "lich config validate",
                   "its exit code is the answer (0 valid, 2 not) and stderr says why"):
        ctx.exit(EXIT_USAGE)
    ctx.exit(config_validate(get_settings(ctx)))


# "dsn": a database DSN ([session_store] dsn) may hold a password. Not "unauth...": a
# count of unauthenticated connections ([gateway.webhook] max_unauthenticated) is no secret.
_SECRET_KEY = re.compile(r"(key|token|secret|passw|(?<!un)auth|credential|cookie|dsn)", re.I)


def mask_secrets(value: Any, key: str = "") -> Any:
    """``value`` with anything stored under a secret-looking key replaced by ``***``,
    and the credentials of every URL in it (:func:`lich.secrets.redact_urls`).

    Keys ending in ``_env`` name an environment variable and are shown.
    """
    if key and _SECRET_KEY.search(key) and not key.lower().endswith("_env"):
        return "***" if value not in (None, "", {}, []) else value
    if isinstance(value, Mapping):
        return {str(k): mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_secrets(v) for v in value]
    if isinstance(value, str):
        return redact_urls(value)  # a bus's servers, an exporter's endpoint, a base_url
    return value


def _provider_view(p: ProviderConfig, registry: ProviderRegistry | None) -> dict[str, Any]:
    from lich.config import ConfigError

    if registry is not None:
        try:  # as the run will use it: the kind's defaults filled in
            p = registry.resolve(p)
        except ConfigError:
            pass  # shown as configured; `lich config validate` says what is wrong
    view: dict[str, Any] = {
        "name": p.name,
        "kind": p.kind,
        "model": p.model,
        "base_url": redact_urls(p.base_url) if p.base_url else p.base_url,
        "api_key_env": p.api_key_env,
        # Whether the variable is set, never its value.
        "api_key_set": bool(p.api_key_env and os.environ.get(p.api_key_env)),
    }
    for name in ("timeout_s", "think", "keep_alive", "max_tokens"):
        if getattr(p, name) is not None:
            view[name] = getattr(p, name)
    if p.headers:
        view["headers"] = {k: "***" for k in p.headers}  # headers usually carry credentials
    if p.options:
        view["options"] = mask_secrets(dict(p.options))
    return view


def _jsonable(value: Any) -> Any:
    """An unstructured settings value as JSON data: sets as sorted arrays."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted((_jsonable(v) for v in value), key=repr)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def table_view(claim: TableClaim, raw: Mapping[str, Any] | None) -> Any:
    """The effective values of a claimed table: ``raw`` structured with the claim's
    settings class, defaults filled in, as JSON-able data (``raw`` itself when it does
    not structure: `lich config validate` says why)."""
    from lich.serialization import unstructure
    from lich.settings import ConfigError

    try:
        value = _jsonable(unstructure(claim.structure(raw or {})))
    except ConfigError:
        return dict(raw or {})
    if claim.kind is not None and isinstance(value, dict):
        value = {"kind": claim.kind, **value}
    return value


def describe_config(
    loaded: LoadedConfig, registry: ProviderRegistry | None = None,
    tables: ConfigTables | None = None,
) -> list[tuple[str, Any, str]]:
    """Every setting as ``(key, JSON-able value, source)``; secrets masked.

    With ``registry``, providers are shown as they will be used (kind defaults applied).
    With ``tables`` (the loaded plugins' claims), every claimed table is shown with its
    defaults filled in, whether the file has it or not; a table of the file no plugin
    claims is shown as written, with the source ``file (unclaimed)``.
    """
    import attrs

    from lich.config import CORE_KEYS, LichConfig

    config = loaded.config
    rows: list[tuple[str, Any, str]] = []
    for field in attrs.fields(LichConfig):
        name = field.name
        if name not in CORE_KEYS:
            continue  # the plugin tables follow, one row each
        value = getattr(config, name)
        source = loaded.sources.get(name, "default")
        if name == "providers":
            value = [_provider_view(p, registry) for p in value]
        elif name == "tools_enabled":
            value = "all" if value is None else list(value)
        elif isinstance(value, Mapping):
            value = mask_secrets(dict(value))
        elif isinstance(value, tuple):
            value = list(value)
        rows.append((name, value, source))
    shown = set()
    for claim in tables.in_plugin_order() if tables is not None else ():
        raw = config.tables.get(claim.table)
        assert tables is not None
        if claim.table in shown or tables.claim_for(claim.table, raw) is not claim:
            continue  # a kind claim the table does not have
        shown.add(claim.table)
        rows.append((claim.table, mask_secrets(table_view(claim, raw)),
                     loaded.sources.get(claim.table, "default")))
    for name, raw in config.tables.items():
        if name not in shown:
            how = ("[plugin_settings], deprecated" if name in config.legacy_tables
                   else "unclaimed")
            rows.append((name, mask_secrets(dict(raw)),
                         f"{loaded.sources.get(name, 'file')} ({how})"))
    return rows


def _show_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def config_show(settings: CliSettings, as_json: bool) -> int:
    """``lich config show``: the effective configuration with where each value came from."""
    loaded = load_or_report(settings)
    if loaded is None:
        return EXIT_USAGE
    kinds = provider_kinds(settings, loaded.config)
    with quiet_plugin_log():
        # Claiming imports the plugins of the config (trust has left out the ones it
        # would not run) and starts nothing: no tool is registered, no server started.
        tables = host_for(settings, loaded.config).config_tables()
    rows = describe_config(loaded, kinds, tables)
    if as_json:
        print_json({"file": loaded.file, "trust": trust_view(loaded),
                     "values": {k: {"value": v, "source": s} for k, v, s in rows}})
        return EXIT_OK
    from rich.table import Column, Table

    console = out_console()
    console.print(f"config file: {loaded.file or 'none (defaults, environment and flags only)'}",
                  markup=False, soft_wrap=True)
    trust = trust_view(loaded)
    if trust is not None:
        console.print(f"project trust: {trust['state']}" + (
            f" (trust would enable: {', '.join(trust['ignored'])})" if trust["ignored"] else ""),
            markup=False, soft_wrap=True)
    table = Table(Column("key", no_wrap=True), "value", Column("source", no_wrap=True),
                  box=None, pad_edge=False)
    for key, value, source in rows:
        if key == "providers":
            if not value:
                add_row(table, "providers", "none (no model configured)", source)
            for i, p in enumerate(value):
                key_state = "set" if p.pop("api_key_set") else "not set"
                env = p.pop("api_key_env")
                text = " ".join(f"{k}={_show_value(v)}" for k, v in p.items() if v is not None)
                if env:
                    text += f" api_key_env={env} ({key_state})"
                add_row(table, f"providers[{i}]", text, source)
            continue
        add_row(table, key, _show_value(value), source)
    print_table(console, table)
    return EXIT_OK


def trust_view(loaded: LoadedConfig) -> dict[str, Any] | None:
    """A project config's trust as JSON-able data (``None``: not a project's config):
    ``state`` (``trusted (how)``, ``not trusted``, ``changed since trusted``) and
    ``ignored``, what trusting it would enable."""
    trust = loaded.trust
    if trust is None:
        return None
    state = (f"trusted ({trust.how})" if trust.trusted
             else "changed since trusted" if trust.changed else "not trusted")
    return {"project": str(trust.project_dir), "state": state, "ignored": list(trust.ignored)}


def config_path(settings: CliSettings) -> int:
    """``lich config path``: the config file in use on stdout, why on stderr (exit 1
    when there is none, with the places looked in)."""
    from lich.config import ConfigError, config_search_dirs, locate_config, user_config_path

    work_dir = Path(settings.work_dir or os.getcwd()).resolve()
    passed_over: list[str] = []
    try:
        found = locate_config(work_dir, settings.config_path, passed_over=passed_over)
    except ConfigError as exc:
        echo_error(str(exc))
        return EXIT_USAGE
    for line in passed_over:
        echo_warning(line)
    if found is None:
        click.echo("no config file found; looked for:", err=True)
        for directory in config_search_dirs(work_dir):
            click.echo(f"  {directory / '.lich' / 'config.toml'}", err=True)
        click.echo(f"  {user_config_path()}", err=True)
        click.echo("`lich config init` writes one.", err=True)
        return EXIT_STOPPED
    click.echo(str(found.path.resolve()))
    click.echo(f"({found.describe()})", err=True)
    if found.project_dir is not None:
        from lich.config import user_trusted_dirs
        from lich.trust import trust_of

        trust = trust_of(found.project_dir, found.path, flag=settings.trust,
                         trusted_dirs=user_trusted_dirs())
        click.echo("(trusted)" if trust.trusted else
                   f"(not trusted: `lich trust {found.project_dir}` to use all of it; "
                   "`lich config show` says what is ignored)", err=True)
    return EXIT_OK


def toml_value(value: Any) -> str:
    """``value`` as one line of TOML, written by a real TOML writer (any string round-trips)."""
    import tomli_w

    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


def _toml_lines(path: str, value: Mapping[str, Any]) -> list[str]:
    """``value`` as the TOML table ``[path]``, one line per key (arrays on one line), its
    nested tables after it; values TOML cannot hold (``None``) are left out."""
    head, nested = [f"[{path}]"], []
    for key, item in value.items():
        if isinstance(item, Mapping):
            if item:
                nested += _toml_lines(f"{path}.{key}", item)
        elif item is not None and not (isinstance(item, list)
                                       and any(isinstance(i, Mapping) for i in item)):
            head.append(f"{key} = {toml_value(item)}")
    return head + nested


def _table_lines(claim: TableClaim, others: Sequence[TableClaim] = ()) -> list[str]:
    """The commented template of one claimed table: its defaults, as TOML; ``others``
    are the other kinds claimed for the same table (named, not written out)."""
    value = table_view(claim, {"kind": claim.kind} if claim.kind is not None else {})
    owner = "lich" if claim.plugin == "lich" else f"plugin {claim.plugin}"
    lines = [f"# {claim.table} ({owner}): {claim.help or 'its settings'}"]
    if others:
        kinds = ", ".join(f"{c.kind!r} ({'lich' if c.plugin == 'lich' else c.plugin})"
                          for c in others)
        lines.append(f"# (other kinds of this table: {kinds})")
    body = _toml_lines(claim.table, value if isinstance(value, Mapping) else {})
    lines += [f"# {line}" for line in body]
    return lines


def config_template(
    settings: CliSettings | None = None, kinds: Sequence[ProviderKind] = (),
    tables: ConfigTables | None = None,
) -> str:
    """The commented ``config.toml`` that ``lich config init`` writes.

    A provider is filled in from ``--model`` / ``LICH_MODEL`` (and the kind, base URL and
    key variable flags or variables) when one is given; otherwise the example stays
    commented out, so lich says "no model configured" instead of calling a made-up model.
    ``kinds`` are the provider kinds the loaded plugins registered: the template names
    them and their defaults; ``tables`` the tables they claim, each written with its
    defaults, commented out (builtin and third-party plugins alike). A key variable is
    written only when one was given: left
    out, the kind's default variable is sent to the kind's own host and nowhere else.
    """
    from lich.config import BUILTIN_PLUGINS

    env = os.environ
    s = settings or CliSettings()
    by_name = {k.name: k for k in kinds}
    model = s.model or env.get("LICH_MODEL")
    kind_name = s.provider_kind or env.get("LICH_PROVIDER_KIND") or (
        kinds[0].name if kinds else "MY_KIND")
    kind = by_name.get(kind_name)
    base_url = s.base_url or env.get("LICH_BASE_URL") or (kind.defaults.base_url if kind else None)
    key_env = s.api_key_env or env.get("LICH_API_KEY_ENV")
    plugins = toml_value(list(BUILTIN_PLUGINS))
    known = ", ".join(by_name) or "none registered"

    lines = [
        "# lich configuration (TOML).",
        "#",
        "# lich reads <work dir>/.lich/config.toml, else config.toml in your user config dir",
        "# (`lich config path` says which). Environment variables (LICH_MODEL,",
        "# LICH_PROVIDER_KIND, LICH_BASE_URL, LICH_API_KEY_ENV) and command-line flags",
        "# override it; `lich config show` prints the effective values and their source.",
        "# Secrets never go in this file: a provider names the environment variable",
        "# that holds its key (api_key_env).",
        "",
        "# Most model calls per run.",
        "# max_turns = 25",
        "# Stop a run before its next model call once it cost this much (US dollars; needs",
        "# the `prices` plugin) or used this many tokens (docs/cli.md, Cost and budgets).",
        "# max_cost_usd = 0.50",
        "# max_total_tokens = 200000",
        "# A system prompt instead of the default one.",
        '# system_prompt = "You are a careful assistant. Use the tools when they help."',
        "# Sampling temperature (0 to 2) and answer length cap, when the provider takes them.",
        "# temperature = 0.2",
        "# max_tokens = 4096",
        "# The context budget in tokens, and the fraction of it that triggers compression.",
        "# context_budget_tokens = 100000",
        "# compress_threshold = 0.8",
        "# Stream answers as they are generated.",
        "# stream = true",
        "# Transcripts (JSONL, one file per conversation).",
        '# session_dir = ".lich/sessions"',
        "# persist_sessions = true",
        "# Keep tools away from .lich/, the transcripts and secret files (.env, keys);",
        "# false lets your own runs read them (the gateway always keeps them away).",
        "# protect_private_files = true",
        "# Log level: debug, info, warn or error.",
        '# log_level = "info"',
        "# Plugins to load: entry-point names, module names or .py files (relative to the",
        "# work dir). The default is the builtins; add yours to the list.",
        f"# plugins = {plugins}",
        "# Exit with an error when a plugin fails to load (instead of a warning).",
        "# strict_plugins = false",
        "# Seconds a run-time hook may take before it counts as failed.",
        "# hook_timeout_s = 10.0",
        "# How retries after a provider failure are spread: \"none\" (exact delays),",
        "# \"full\" or \"equal\" jitter. Unset: none for a CLI run, full in the gateway.",
        '# retry_jitter = "full"',
        '# Which tools the model may use: "all", or a list of names; and tools to hide.',
        '# tools_enabled = "all"',
        '# tools_disabled = ["terminal"]',
        "",
        "# The models, tried in this order by the failover router.",
    ]
    provider = [
        "[[providers]]",
        f"kind = {toml_value(kind_name)}  # registered kinds: {known}",
        'name = "main"',
        f"model = {toml_value(model or 'MODEL-NAME')}",
    ]
    provider.append(f"base_url = {toml_value(base_url)}" if base_url else '# base_url = ""')
    if key_env:
        provider.append(f"api_key_env = {toml_value(key_env)}  # the NAME of the variable")
    elif kind and kind.defaults.key_env:
        hosts = ", ".join(kind.defaults.key_hosts)
        provider.append(
            f"# api_key_env = {toml_value(kind.defaults.key_env)}  # the default; sent to "
            f"{hosts} only: name it here to send it elsewhere")
    else:
        provider.append('# api_key_env = "MY_API_KEY"  # the NAME of the variable holding the key')
    provider += ["# timeout_s = 120", "# max_tokens = 4096"]
    if model:
        lines += provider
    else:
        lines += ["# Fill in a provider and uncomment it (or set LICH_MODEL instead)."]
        lines += [line if line.startswith("#") else f"# {line}" for line in provider]
    fallback = next((k for k in kinds if k.name != kind_name), None)
    lines += ["", "# A fallback, used when the first provider keeps failing.", "# [[providers]]"]
    if fallback is not None:
        lines.append(f"# kind = {toml_value(fallback.name)}")
    lines += ['# name = "fallback"', '# model = "MODEL-NAME"']
    if fallback is not None and fallback.defaults.base_url:
        lines.append(f"# base_url = {toml_value(fallback.defaults.base_url)}")
    lines += [
        "",
        "# Per-tool limits: [tools.<name>] with timeout_s and max_output_chars.",
        "# [tools.terminal]",
        "# timeout_s = 300",
        "# max_output_chars = 20000",
        "",
        "# The tables of the plugins: each is claimed by one (`lich plugins` says which),",
        "# shown here with its defaults.",
    ]
    claims = tables.in_plugin_order() if tables is not None else []
    for claim in claims:
        same = [c for c in claims if c.table == claim.table and c is not claim]
        if claim.kind is not None and not claim.default and any(c.default for c in same):
            continue  # written with its table's default kind
        lines += ["", *_table_lines(claim, same if claim.kind is not None else ())]
    lines.append("")
    return "\n".join(lines)


def provider_kinds(settings: CliSettings, config: LichConfig | None = None) -> ProviderRegistry:
    """The provider kinds the plugins of ``config`` register (the defaults without one)."""
    from lich.config import LichConfig
    from lich.providers import ProviderRegistry

    if config is None:
        config = LichConfig(work_dir=str(Path(settings.work_dir or os.getcwd()).resolve()))
    registry = ProviderRegistry()
    with quiet_plugin_log():
        host_for(settings, config).register_providers(registry)
    return registry


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, then a rename."""
    import tempfile

    from lich.dotlich import make_dirs

    make_dirs(path.parent)  # a new .lich/ gets its .gitignore
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def config_init(settings: CliSettings, *, user: bool, force: bool, to_stdout: bool) -> int:
    """``lich config init``: write the commented template."""
    from lich.config import ConfigError, user_config_path

    try:
        config: LichConfig | None = load_settings_config(settings).config
    except ConfigError:
        config = None  # a broken config is what `init --force` replaces: use the defaults
    kinds = provider_kinds(settings, config).ordered()
    from lich.config import LichConfig

    if config is None:
        config = LichConfig(work_dir=str(Path(settings.work_dir or os.getcwd()).resolve()))
    with quiet_plugin_log():
        tables = host_for(settings, config).config_tables()
    text = config_template(settings, kinds, tables)
    if to_stdout:
        click.echo(text, nl=False)
        return EXIT_OK
    if user:
        path = user_config_path()
    else:
        path = Path(settings.work_dir or os.getcwd()).resolve() / ".lich" / "config.toml"
    if path.exists() and not force:
        echo_error(f"{path} exists already (--force overwrites it)")
        return EXIT_USAGE
    try:
        write_text_atomically(path, text)
    except OSError as exc:
        echo_error(f"cannot write {path}: {exc}")
        return EXIT_USAGE
    if not user:
        from lich.trust import record_trust

        # The user's own new project config: trusted as written (lich.trust); an edit
        # by anyone else (a pull) makes it untrusted again.
        try:
            record_trust(path.parent.parent, path)
        except OSError as exc:
            echo_warning(f"could not record the new project as trusted ({exc}); "
                         f"`lich trust {path.parent.parent}` does")
    click.echo(f"wrote {path}")
    # With --model the provider is written: what is left is to check it (and its key).
    step = ("next: `lich config validate`, then `lich \"hello\"`." if settings.model
            else "next: fill in a provider (or set LICH_MODEL), then `lich config validate`.")
    click.echo(step, err=True)
    return EXIT_OK


def _session_store_problems(config: LichConfig, host: PluginHost) -> list[str]:
    """What a run would refuse in ``[session_store]``: a kind no plugin provides, a
    setting the store does not take (the store is made, not connected)."""
    from lich.config import ConfigError
    from lich.sessions import open_session_store

    try:
        with quiet_plugin_log():
            store = open_session_store(config, host)
    except ConfigError as exc:
        return list(exc.problems)
    store.close()
    return []


def config_validate(settings: CliSettings) -> int:
    """``lich config validate``: config errors (file and ``$.path``), plugin and provider checks."""
    from lich.agent import build_tool_registry
    from lich.config import ConfigError, no_model_message
    from lich.providers import ProviderRegistry

    loaded = load_or_report(settings)
    if loaded is None:
        return EXIT_USAGE
    config = loaded.config
    host = host_for(settings, config)
    errors: list[str] = []
    warnings: list[str] = []
    registry = ProviderRegistry()
    with quiet_plugin_log():
        # The plugins' own settings first: what a run would reject (lich_check_config).
        errors.extend(host.check_config(config))
        host.register_providers(registry)
        # To look at: the plugins start nothing (no MCP server, no connection).
        try:
            tools = build_tool_registry(host, config, inspect_only=True)
        except ConfigError as exc:
            # A process runner that cannot start (a required sandbox) or whose table is
            # bad: what a run would refuse, said once.
            errors.extend(p for p in exc.problems if p not in errors)
            from lich.tools import ToolRegistry

            tools = ToolRegistry()
    host.shutdown_sync(tools)
    named = named_plugin_failures(settings, host)
    for report in host.failures:
        text = f"plugin {report.entry!r}: {report.status}: {report.describe_error(at=True)}"
        # A run goes on without a configured plugin that fails (a warning), but a config
        # that names one is not "ok": every failure is an error here, but an entry
        # skipped as a duplicate of one that loaded.
        failed = report.status != "skipped" or config.strict_plugins or report in named
        (errors if failed else warnings).append(text)
    for i, provider in enumerate(config.providers):
        try:
            registry.resolve(provider, i)
        except ConfigError as exc:
            errors.extend(exc.problems)
            continue
        try:
            # What the provider itself would refuse (a required key not set): this
            # environment's problem, not the file's, so a warning.
            registry.create(provider, i)
        except ConfigError as exc:
            warnings.extend(exc.problems)
    if len(config.providers) > 1 and not host.has_impls("lich_make_router"):
        errors.append("$.providers: several providers but no router plugin is loaded; "
                      "enable the 'failover' plugin")
    if not config.providers:
        warnings.append(no_model_message())
    if config.tools_enabled is not None:
        missing = sorted(set(config.tools_enabled) - set(tools.names()))
        if missing:
            unlisted = "; ".join(tools.left_out.values())
            warnings.append(f"$.tools_enabled: no loaded plugin provides {', '.join(missing)}"
                            + (f" (unless among {unlisted})" if unlisted else ""))
    from lich.approvals import unasked_warning

    unasked = unasked_warning(host, tools.list(), config)
    if unasked:
        warnings.append(unasked)
    # The plugin's lich_check_config may have said it already.
    errors.extend(p for p in _session_store_problems(config, host) if p not in errors)
    where = loaded.file or "no config file (defaults, environment and flags)"
    for text in warnings:
        echo_warning(text)
    if errors:
        from lich.config import with_file_lines

        prefix = f"{loaded.file}: " if loaded.file else ""
        for text in with_file_lines(loaded, errors):
            echo_error(prefix + text)
        return EXIT_USAGE
    click.echo(f"ok: {where}")
    return EXIT_OK
