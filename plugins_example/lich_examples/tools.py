"""Read-only data tools: ``sqlite_query`` and ``json_query`` (plugin ``data_tools``).

Both tools work on files inside the work dir only (symlinks are followed and
must stay inside too), never write, and cap what they return.

``sqlite_query`` runs one read-only statement on a SQLite file. Three layers
keep it read-only: the file is opened with ``mode=ro``, ``PRAGMA query_only``
is set, and an authorizer refuses every action that is not a read (which also
refuses ``ATTACH``, so a query cannot reach a database outside the work dir).

``json_query`` selects from a JSON file with an RFC 9535 JSONPath query, through
the ``jsonpath-rfc9535`` package this distribution depends on (as any
third-party tool package would; see ``docs/plugins.md``).

Both are ``@tool`` functions: the decorator builds the JSON Schema from the
annotations and checks the arguments before the call, so the bodies only
enforce what a schema cannot say (the configured ceilings, read-only SQL,
paths inside the work dir).

Per-tool settings live in the ``[tools.<name>]`` tables of the config; the
executor applies ``timeout_s`` and ``max_output_chars`` there, and these tools
read their own keys from the same table::

    [tools.sqlite_query]
    max_rows = 200            # upper bound for the max_rows argument (default 1000)
    max_cell_chars = 2000     # longer text cells are cut (default 1000)

    [tools.json_query]
    max_file_bytes = 20_000_000   # larger files are refused (default 10 MB)
    max_results = 500             # upper bound for the max_results argument (default 1000)

Each table is a settings class (:class:`SqliteQuerySettings`,
:class:`JsonQuerySettings`, extending :class:`lich.settings.ToolSettings`);
``lich_check_config`` checks both, so a bad value or an unknown key fails
``lich config validate`` and every run, with its ``$.tools.…`` path.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from attrs import frozen

# ToolContext and Param are needed at run time: @tool reads the annotations.
from lich import Param, ToolContext, ToolError, ToolResult, hookimpl, tool
from lich.guards import resolve_in_root, truncate_text
from lich.settings import ConfigError, ToolSettings, at_least, setting, structure_settings

if TYPE_CHECKING:
    import sqlite3

    from jsonpath_rfc9535 import JSONPathQuery

    from lich import LichConfig, ToolRegistry

__all__ = [
    "JsonQuerySettings",
    "SqliteQuerySettings",
    "json_query",
    "lich_check_config",
    "lich_register_tools",
    "sqlite_query",
]

SQLITE_TIMEOUT_S = 20.0
SQLITE_DEFAULT_ROWS = 100
SQLITE_MAX_ROWS = 1000
SQLITE_MAX_CELL_CHARS = 1000
JSON_TIMEOUT_S = 20.0
JSON_DEFAULT_RESULTS = 50
JSON_MAX_RESULTS = 1000
JSON_MAX_FILE_BYTES = 10_000_000
_MAX_QUERY_CHARS = 2000
MAX_OUTPUT_CHARS = 20_000
# Room left under the output cap for the JSON envelope around the rows.
_ENVELOPE_CHARS = 300

_SQLITE_HEADER = b"SQLite format 3\x00"
_READ_KEYWORDS = ("select", "with", "explain", "values", "pragma")


@frozen
class SqliteQuerySettings(ToolSettings):
    """``[tools.sqlite_query]`` (and the executor's ``timeout_s``, ``max_output_chars``)."""

    max_rows: int = setting(SQLITE_MAX_ROWS, check=at_least(1),
                            help="upper bound for the max_rows argument")
    max_cell_chars: int = setting(SQLITE_MAX_CELL_CHARS, check=at_least(1),
                                  help="longer text cells are cut")


@frozen
class JsonQuerySettings(ToolSettings):
    """``[tools.json_query]`` (and the executor's ``timeout_s``, ``max_output_chars``)."""

    max_results: int = setting(JSON_MAX_RESULTS, check=at_least(1),
                               help="upper bound for the max_results argument")
    max_file_bytes: int = setting(JSON_MAX_FILE_BYTES, check=at_least(1),
                                  help="larger files are refused")


S = TypeVar("S", bound=ToolSettings)

_SETTINGS: dict[str, type[ToolSettings]] = {
    "sqlite_query": SqliteQuerySettings,
    "json_query": JsonQuerySettings,
}


def _tool_settings(ctx: ToolContext, tool_name: str, cls: type[S]) -> S:
    # Checked before the run (lich_check_config); a table handed to an executor
    # directly fails the call with the same words.
    try:
        return structure_settings(ctx.settings, cls, f"$.tools.{tool_name}")
    except ConfigError as exc:
        raise ToolError(f"invalid_setting: {'; '.join(exc.problems)}") from None


def _output_cap(settings: ToolSettings) -> int:
    # The envelope needs some room: never plan for less than 1000 characters.
    cap = MAX_OUTPUT_CHARS if settings.max_output_chars is None else settings.max_output_chars
    return max(1000, cap)


def _input_file(ctx: ToolContext, raw: str) -> Path:
    path = resolve_in_root(ctx.work_dir, raw)
    if not path.exists():
        raise ToolError(f"not_found: {raw}")
    if not path.is_file():
        raise ToolError(f"not_a_file: {raw}")
    return path


def _json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# ---------------------------------------------------------------------------
# sqlite_query
# ---------------------------------------------------------------------------

# Pragmas that only describe the schema; they may take a table or index name.
_INTROSPECTION_PRAGMAS = frozenset(
    {
        "table_info", "table_xinfo", "table_list", "index_list", "index_info",
        "index_xinfo", "foreign_key_list", "collation_list", "function_list",
        "module_list", "pragma_list", "database_list",
    }
)
# Pragmas that are settings: reading them is fine, assigning them is not.
_READABLE_PRAGMAS = frozenset(
    {"user_version", "schema_version", "application_id", "page_count", "page_size",
     "encoding", "freelist_count"}
)


_AUTHORIZER_ACTIONS = (
    "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE",
    "CREATE_TEMP_TRIGGER", "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE",
    "DROP_INDEX", "DROP_TABLE", "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER",
    "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW", "INSERT", "PRAGMA", "READ", "SELECT",
    "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE",
    "CREATE_VTABLE", "DROP_VTABLE", "FUNCTION", "SAVEPOINT", "RECURSIVE",
)


def _first_keyword(sql: str) -> str:
    """The statement's first word, after whitespace and comments."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace() or sql[i] == "(":
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            break
    j = i
    while j < n and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    return sql[i:j].lower()


class _Authorizer:
    """SQLite authorizer allowing reads only; remembers what it refused, for the error."""

    def __init__(self, sqlite: Any) -> None:
        self.sqlite = sqlite
        self.allowed = {sqlite.SQLITE_SELECT, sqlite.SQLITE_READ, sqlite.SQLITE_FUNCTION,
                        sqlite.SQLITE_RECURSIVE}
        # Only the authorizer's action codes: other SQLITE_* constants reuse the numbers.
        self.names = {
            getattr(sqlite, f"SQLITE_{name}"): name.lower().replace("_", " ")
            for name in _AUTHORIZER_ACTIONS
            if hasattr(sqlite, f"SQLITE_{name}")
        }
        self.denied: str | None = None

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if action in self.allowed:
            return int(self.sqlite.SQLITE_OK)
        if action == self.sqlite.SQLITE_PRAGMA and arg1 is not None:
            name = arg1.lower()
            if name in _INTROSPECTION_PRAGMAS or (name in _READABLE_PRAGMAS and arg2 is None):
                return int(self.sqlite.SQLITE_OK)
        if self.denied is None:
            what = self.names.get(action, f"action {action}")
            self.denied = f"{what} {arg1}" if arg1 else what
        return int(self.sqlite.SQLITE_DENY)


def _cell(value: Any, max_chars: int) -> Any:
    if isinstance(value, bytes):
        return f"<blob {len(value)} bytes>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return truncate_text(value, max_chars, style="inline")
    return value


@tool(
    description=(
        "Run one read-only SQL statement (SELECT, WITH, EXPLAIN, VALUES or a schema PRAGMA "
        "such as table_info) on a SQLite database file inside the work dir. Returns JSON "
        "with columns and rows; use ? placeholders with params for values. Writes, ATTACH "
        "and settings changes are refused. List tables with: SELECT name FROM sqlite_master "
        "WHERE type='table'."
    ),
    timeout_s=SQLITE_TIMEOUT_S,
    max_output_chars=MAX_OUTPUT_CHARS,
)
def sqlite_query(
    path: str,
    sql: str,
    params: list[str | int | float | bool | None] | None = None,
    max_rows: Annotated[
        int,
        Param(
            f"Return at most this many rows (at most {SQLITE_MAX_ROWS} unless the "
            "configuration says otherwise).",
            minimum=1,
        ),
    ] = SQLITE_DEFAULT_ROWS,
    *,
    ctx: ToolContext,
) -> ToolResult:
    """Run one read-only SQL statement on a SQLite file inside the work dir.

    Returns ``{"columns": [...], "rows": [[...]], "row_count": N, "truncated": null}``
    as JSON; ``truncated`` is ``"max_rows"`` when more rows exist and
    ``"max_output_chars"`` when the output cap stopped it.

    :param path: The database file, relative to the work dir.
    :param sql: One read-only SQL statement.
    :param params: Values bound to the statement's ? placeholders, in order.
    """
    import sqlite3

    settings = _tool_settings(ctx, "sqlite_query", SqliteQuerySettings)
    # The configured ceiling clamps the argument rather than refusing it.
    max_rows = min(max_rows, settings.max_rows)
    max_cell = settings.max_cell_chars
    max_chars = _output_cap(settings)
    timeout_s = SQLITE_TIMEOUT_S if settings.timeout_s is None else settings.timeout_s

    keyword = _first_keyword(sql)
    if keyword not in _READ_KEYWORDS:
        shown = keyword.upper() or "an empty statement"
        raise ToolError(
            "read_only: only SELECT, WITH, EXPLAIN, VALUES and read-only PRAGMA statements "
            f"are allowed, got {shown}"
        )
    db_file = _input_file(ctx, path)
    with open(db_file, "rb") as fh:
        header = fh.read(len(_SQLITE_HEADER))
    if header and header != _SQLITE_HEADER:
        raise ToolError(f"not_a_database: {path} is not a SQLite database")

    from urllib.parse import quote

    uri = f"file:{quote(str(db_file))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=2.0, check_same_thread=False)
    except sqlite3.Error as exc:
        raise ToolError(f"sqlite_error: cannot open {path}: {exc}") from exc
    try:
        return _run_query(conn, sql, params or [], max_rows, max_cell, max_chars, timeout_s, ctx)
    finally:
        conn.close()


def _run_query(
    conn: sqlite3.Connection,
    sql: str,
    params: list[Any],
    max_rows: int,
    max_cell: int,
    max_chars: int,
    timeout_s: float,
    ctx: ToolContext,
) -> ToolResult:
    import sqlite3

    conn.execute("PRAGMA query_only = ON")
    authorizer = _Authorizer(sqlite3)
    conn.set_authorizer(authorizer)
    # The executor's timeout abandons the worker thread; this stops the query itself
    # (a runaway recursive CTE would otherwise keep a core busy). It fires a little
    # before the executor's limit so the model gets the clearer message.
    deadline = time.monotonic() + timeout_s * 0.9
    stopped: list[str] = []

    def progress() -> int:
        if ctx.cancel.cancelled:
            stopped.append("cancelled")
            return 1
        if time.monotonic() > deadline:
            stopped.append(f"timeout: query exceeded {timeout_s:g}s")
            return 1
        return 0

    conn.set_progress_handler(progress, 2000)
    try:
        cursor = conn.execute(sql, params)
        columns = [d[0] for d in cursor.description or ()]
        rows: list[list[Any]] = []
        used = len(_json_dumps(columns)) + _ENVELOPE_CHARS
        truncated: str | None = None
        while True:
            row = cursor.fetchone()
            if row is None:
                break
            if len(rows) >= max_rows:
                truncated = "max_rows"
                break
            cells = [_cell(v, max_cell) for v in row]
            size = len(_json_dumps(cells)) + 1
            if used + size > max_chars:
                truncated = "max_output_chars"
                break
            used += size
            rows.append(cells)
    except sqlite3.DatabaseError as exc:
        if stopped:
            raise ToolError(stopped[0]) from exc
        if authorizer.denied is not None:
            raise ToolError(f"read_only: statement needs {authorizer.denied}, which is not allowed"
                            ) from exc
        message = str(exc)
        if isinstance(exc, sqlite3.ProgrammingError) and "one statement" in message:
            raise ToolError("invalid_sql: only one statement at a time") from exc
        if "readonly" in message.replace(" ", "").lower():
            raise ToolError(f"read_only: {message}") from exc
        raise ToolError(f"sqlite_error: {message}") from exc
    except sqlite3.Warning as exc:  # e.g. more than one statement on older Pythons
        raise ToolError(f"invalid_sql: {exc}") from exc
    body = {"columns": columns, "rows": rows, "row_count": len(rows), "truncated": truncated}
    return ToolResult(ok=True, output=_json_dumps(body))


# ---------------------------------------------------------------------------
# json_query
# ---------------------------------------------------------------------------


@tool(
    description=(
        "Select values from a JSON file inside the work dir with an RFC 9535 JSONPath "
        "query. Syntax: $ is the document (every query starts with it); .name or "
        "[\"name\"] a member; [0] an index ([-1] the last); [1:3] a slice; [*] or .* "
        "every item; ..name that member at any depth; [?expr] keeps items matching expr, "
        "e.g. [?@.age >= 18], [?@.tags] (exists), [?@.name == \"ada\"], joined with && "
        "and ||, with length(), count(), match(), search() and value(). Returns JSON "
        "with each match's normalized path and value."
    ),
    timeout_s=JSON_TIMEOUT_S,
    max_output_chars=MAX_OUTPUT_CHARS,
)
def json_query(
    path: str,
    query: str = "$",
    max_results: Annotated[
        int,
        Param(
            f"Return at most this many matches (at most {JSON_MAX_RESULTS} unless the "
            "configuration says otherwise).",
            minimum=1,
        ),
    ] = JSON_DEFAULT_RESULTS,
    *,
    ctx: ToolContext,
) -> ToolResult:
    """Select values from a JSON file inside the work dir with an RFC 9535 JSONPath query.

    Returns ``{"count": N, "results": [{"path": "$['a'][0]", "value": ...}],
    "truncated": null}``.

    :param path: The JSON file, relative to the work dir.
    :param query: The JSONPath query, e.g. $.users[?@.active].email
    """
    import jsonpath_rfc9535 as jsonpath

    settings = _tool_settings(ctx, "json_query", JsonQuerySettings)
    # The configured ceiling clamps the argument rather than refusing it.
    max_results = min(max_results, settings.max_results)
    max_bytes = settings.max_file_bytes
    max_chars = _output_cap(settings)
    if len(query) > _MAX_QUERY_CHARS:
        raise ToolError(f"invalid_query: longer than {_MAX_QUERY_CHARS} characters")
    try:
        compiled = jsonpath.compile(query)
    except jsonpath.JSONPathError as exc:
        raise ToolError(f"invalid_query: {exc}") from exc
    except RecursionError as exc:
        raise ToolError("invalid_query: nested too deeply") from exc

    json_file = _input_file(ctx, path)
    size = os.path.getsize(json_file)
    if size > max_bytes:
        raise ToolError(f"file_too_large: {path} is {size} bytes (limit {max_bytes})")
    try:
        text = json_file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ToolError(f"invalid_json: {path} is not UTF-8 text ({exc.reason})") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"invalid_json: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from exc
    except RecursionError as exc:
        raise ToolError("invalid_json: nesting too deep") from exc

    results: list[dict[str, Any]] = []
    used = _ENVELOPE_CHARS
    truncated: str | None = None
    count = 0
    for where, value in _matches(compiled, document):
        count += 1
        if truncated is not None:
            continue  # keep counting so the model knows how many there are
        if len(results) >= max_results:
            truncated = "max_results"
            continue
        item: dict[str, Any] = {"path": where, "value": value}
        encoded = _json_dumps(item)
        if used + len(encoded) + 1 > max_chars:
            # One huge value: show its start rather than nothing.
            room = max_chars - used - len(where) - 80
            if not results and room > 200:
                item = {"path": where, "value_preview": _json_dumps(value)[:room],
                        "value_chars": len(_json_dumps(value))}
                results.append(item)
            truncated = "max_output_chars"
            continue
        used += len(encoded) + 1
        results.append(item)
    body = {"count": count, "results": results, "truncated": truncated}
    return ToolResult(ok=True, output=_json_dumps(body))


def _matches(query: JSONPathQuery, document: Any) -> Iterator[tuple[str, Any]]:
    """Each match's normalized path (``$['users'][0]``) and value, lazily: past the
    caps they are only counted."""
    import jsonpath_rfc9535 as jsonpath

    try:
        for node in query.finditer(document):
            yield node.path(), node.value
    except jsonpath.JSONPathError as exc:  # e.g. ".." deeper than the library recurses
        raise ToolError(f"query_failed: {exc}") from exc


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[tools.sqlite_query]`` and ``[tools.json_query]``, every problem at once."""
    problems: list[str] = []
    for tool_name, cls in _SETTINGS.items():
        try:
            structure_settings(config.tool_settings(tool_name), cls, f"$.tools.{tool_name}")
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)


@hookimpl
def lich_register_tools(registry: ToolRegistry) -> None:
    """Register ``sqlite_query`` and ``json_query``."""
    registry.register(sqlite_query)
    registry.register(json_query)
