"""Output for commands, builtin and third-party alike: consoles, tables that never cut
what users copy, JSON, and loading the configuration with its error reported.

This module is public: a plugin's ``lich_register_commands`` uses it (with
:mod:`lich.cli.common` for error lines and :mod:`lich.cli.options` for the shared
flags), so that every command prints tables, JSON and errors the same way."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import click

from lich.cli.common import echo_error, load_settings_config, setup_logging
from lich.cli.options import CliSettings
from lich.visible import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from lich.config import LoadedConfig

__all__ = [
    "add_row",
    "load_or_report",
    "out_console",
    "print_json",
    "print_table",
    "refuse_json",
]

# Spaces at the end of a rendered line, before any closing style codes (a pipe gets
# none unless colour is forced, but those must survive the strip).
_TRAILING_SPACES = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$")


def out_console() -> Console:
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        # Pipes and files get long lines instead of tables wrapped at 80 columns: a path or
        # an error message must survive intact for grep and scripts, however long it is.
        console = Console(highlight=False, width=10_000)
    return console


def add_row(table: Any, *cells: Any) -> None:
    """Add a row whose strings are plain text: tool descriptions and error messages may
    contain ``[brackets]`` that rich would otherwise take for markup."""
    from rich.text import Text

    table.add_row(*(Text(visible(c)) if isinstance(c, str) else c for c in cells))


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` without cutting what users copy out of it.

    Columns made with ``no_wrap=True`` hold paths, error messages, module names: such
    a cell is never wrapped or cut. The other columns may wrap, at spaces only. When
    the console is too narrow for that (a narrow terminal; pipes are wide, see
    :func:`out_console`), each row is printed as a record of ``column: value`` lines
    instead, which the terminal may fold but which stay whole when copied.
    """
    from rich.measure import Measurement
    from rich.text import Text

    # Measured as if the console were unbounded, so that no width clamps the result.
    unbounded = console.options.update_width(1_000_000)
    for column in table.columns:
        if column.no_wrap:
            column.min_width = max(
                Measurement.get(console, unbounded, cell).maximum
                for cell in (column.header, *column.cells)
            )
    if Measurement.get(console, unbounded, table).minimum <= console.width:
        if console.is_terminal:
            console.print(table)
        else:
            _print_unpadded(console, table)
        return
    headers = [str(column.header) for column in table.columns]
    rows = zip(*(list(column.cells) for column in table.columns), strict=True)
    for n, values in enumerate(rows):
        if n:
            console.print()
        for i, (header, value) in enumerate(zip(headers, values, strict=True)):
            text = value.copy() if isinstance(value, Text) else Text(str(value))
            if not text.plain:
                continue
            label = Text(f"{header}: " if i == 0 else f"  {header}: ", style="bold")
            console.print(label.append_text(text), soft_wrap=True)


def _print_unpadded(console: Console, renderable: Any) -> None:
    """Print ``renderable`` without the spaces rich pads every cell with: in a pipe they
    end each line, where ``grep 'x$'``, ``diff`` and ``cut`` trip on them."""
    with console.capture() as captured:
        console.print(renderable)
    lines = captured.get().split("\n")
    console.file.write("\n".join(_TRAILING_SPACES.sub(r"\1", line) for line in lines))
    console.file.flush()


def refuse_json(settings: CliSettings, command: str, instead: str) -> bool:
    """True, after saying so, when ``--json`` was given to a command that cannot honour it.

    The caller exits 2: a script asking for JSON must not get text it cannot parse.
    """
    if not settings.json:
        return False
    echo_error(f"{command} cannot print JSON (--json); {instead}")
    return True


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def load_or_report(settings: CliSettings) -> LoadedConfig | None:
    """The configuration of this invocation, or ``None`` after printing why it is unusable."""
    from lich.config import ConfigError

    try:
        loaded = load_settings_config(settings)
    except ConfigError as exc:
        echo_error(str(exc))
        return None
    setup_logging(loaded.config.log_level)
    return loaded
