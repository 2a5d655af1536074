"""The slash-command table shared by ``lich chat`` and the TUI: parsing, suggestions, /help."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from lich.slash import SLASH_COMMANDS, FrontEnd, SlashCommand, SlashTable

# The interactive front ends whose own commands SLASH_COMMANDS holds (the gateway has
# its own, GATEWAY_COMMANDS).
FRONT_ENDS: tuple[FrontEnd, ...] = ("chat", "tui")

DOCS = Path(__file__).resolve().parents[2] / "docs"

# A table with a command in only one front end, to see what the other one says.
PARTIAL = SlashTable(
    (
        SlashCommand("help", "list them", front_ends=FRONT_ENDS),
        SlashCommand("clear", "clear the screen", front_ends={"tui"}),
        SlashCommand("resume", "continue", arg_hint="ID", arg_required=True,
                     front_ends=FRONT_ENDS),
        SlashCommand("exit", "quit", aliases=("quit", "q"), front_ends=FRONT_ENDS),
    )
)


def test_every_command_is_in_both_front_ends() -> None:
    # Today chat and the TUI have the same commands; a front-end-only one would
    # need a reason (and this test changed with it).
    names = [c.name for c in SLASH_COMMANDS.commands]
    assert names == ["help", "model", "usage", "clear", "sessions", "resume", "new", "exit"]
    for front_end in FRONT_ENDS:
        assert SLASH_COMMANDS.for_front_end(front_end) == SLASH_COMMANDS.commands


@pytest.mark.parametrize(
    "text", ["hello", "  what is a/b? ", "use /help please", "", "   "]
)
def test_text_that_is_not_a_command(text: str) -> None:
    assert not SLASH_COMMANDS.is_command(text)
    assert SLASH_COMMANDS.parse(text, "chat") is None


@pytest.mark.parametrize(
    ("text", "name", "args"),
    [
        ("/help", "help", ""),
        ("  /resume   latest  ", "resume", "latest"),
        ("/RESUME abc", "resume", "abc"),
        ("/resume\tabc", "resume", "abc"),
        ("/model  my model:7b ", "model", "my model:7b"),  # the rest of the line, inside kept
        ("/quit", "exit", ""),
        ("/Q", "exit", ""),
        ("/exit now", "exit", "now"),
        ("/new extra words", "new", "extra words"),
    ],
)
def test_parse_finds_the_command_and_its_argument(text: str, name: str, args: str) -> None:
    for front_end in FRONT_ENDS:
        parsed = SLASH_COMMANDS.parse(text, front_end)
        assert parsed is not None
        assert parsed.error is None
        assert parsed.command is not None
        assert (parsed.name, parsed.command.name, parsed.args) == (name, name, args)


def test_a_missing_required_argument_is_a_usage_error() -> None:
    parsed = SLASH_COMMANDS.parse("/resume   ", "tui")
    assert parsed is not None
    assert parsed.command is not None
    assert parsed.command.name == "resume"
    assert parsed.error == (
        "usage: /resume ID|latest — continue a recorded session (/sessions lists them)"
    )
    # An optional argument may be left out.
    model = SLASH_COMMANDS.parse("/model", "chat")
    assert model is not None
    assert model.error is None
    assert model.args == ""


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("/sesions", "unknown command /sesions: did you mean /sessions? (/help lists them)"),
        ("/hepl", "unknown command /hepl: did you mean /help? (/help lists them)"),
        ("/ses", "unknown command /ses: did you mean /sessions? (/help lists them)"),
        ("/res latest", "unknown command /res: did you mean /resume? (/help lists them)"),
        ("/qiut", "unknown command /qiut: did you mean /quit? (/help lists them)"),
        ("/bogus", "unknown command /bogus (/help lists the commands)"),
        ("/", "unknown command / (/help lists the commands)"),
        ("/ help", "unknown command / (/help lists the commands)"),
    ],
)
def test_an_unknown_command_gets_a_suggestion_or_a_clear_error(typed: str, message: str) -> None:
    for front_end in FRONT_ENDS:
        parsed = SLASH_COMMANDS.parse(typed, front_end)
        assert parsed is not None
        assert parsed.command is None
        assert parsed.error == message


def test_an_ambiguous_prefix_is_not_guessed() -> None:
    # A prefix two commands share picks neither; one more letter settles it.
    table = SlashTable((SlashCommand("sessions", "a"), SlashCommand("settings", "b")))
    assert table.suggest("se", "chat") is None
    assert table.suggest("ses", "chat") == "sessions"
    assert SLASH_COMMANDS.suggest("qu", "tui") == "quit"  # the alias typed, not /exit


def test_a_command_of_the_other_front_end_says_where_it_is() -> None:
    parsed = PARTIAL.parse("/clear", "chat")
    assert parsed is not None
    assert parsed.command is None
    assert parsed.error == "/clear is not available in lich chat (only in the TUI)"
    tui = PARTIAL.parse("/clear", "tui")
    assert tui is not None
    assert tui.error is None
    # Nor is it suggested for a typo in the front end that lacks it.
    assert PARTIAL.suggest("cler", "chat") is None
    assert PARTIAL.get("clear", "chat") is None


@pytest.mark.parametrize("front_end", FRONT_ENDS)
def test_help_lines_list_each_command_once_aligned(front_end: FrontEnd) -> None:
    lines = SLASH_COMMANDS.help_lines(front_end)
    assert len(lines) == len(SLASH_COMMANDS.for_front_end(front_end))
    for line, command in zip(lines, SLASH_COMMANDS.for_front_end(front_end), strict=True):
        assert line.startswith(f"  {command.synopsis} ")
        assert line.endswith(f"  {command.help}")
    # The help texts start in one column.
    columns = {line.index(c.help, len(c.synopsis) + 2)
               for line, c in zip(lines, SLASH_COMMANDS.for_front_end(front_end), strict=True)}
    assert len(columns) == 1
    assert "  /exit, /quit, /q" in "\n".join(lines)
    assert "  /resume ID|latest" in "\n".join(lines)
    assert "  /model [NAME]" in "\n".join(lines)


def test_help_follows_the_front_end() -> None:
    assert PARTIAL.help_lines("chat") == [
        "  /help             list them",
        "  /resume ID        continue",
        "  /exit, /quit, /q  quit",
    ]
    assert "/clear" in "\n".join(PARTIAL.help_lines("tui"))
    assert "/clear" not in "\n".join(PARTIAL.help_lines("chat"))


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"name": "Help", "help": "x"}, "lower case"),
        ({"name": "two words", "help": "x"}, "lower case"),
        ({"name": "/help", "help": "x"}, "lower case"),
        ({"name": "", "help": "x"}, "lower case"),
        ({"name": "x", "help": "x", "aliases": ("Y",)}, "lower case"),
        ({"name": "x", "help": "x", "arg_required": True}, "arg_hint"),
        ({"name": "x", "help": "x", "front_ends": set()}, "front_ends"),
        ({"name": "x", "help": "x", "front_ends": {"web"}}, "front_ends"),
    ],
)
def test_a_malformed_command_is_refused(kwargs: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        SlashCommand(**kwargs)  # type: ignore[arg-type]


def test_a_name_listed_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="/q is listed twice"):
        SlashTable((SlashCommand("quit", "a", aliases=("q",)), SlashCommand("q", "b")))


def test_the_table_imports_nothing_heavy() -> None:
    # lich chat loads it at start-up: no Textual, prompt_toolkit or rich.
    code = (
        "import sys, lich.slash\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('textual', 'prompt_toolkit', 'rich', 'httpx') or m.startswith('lich.tui')]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize(("doc", "section"), [("tui.md", "## Slash commands"),
                                              ("cli.md", "## `lich chat`")])
def test_the_docs_list_every_command_and_alias(doc: str, section: str) -> None:
    text = (DOCS / doc).read_text(encoding="utf-8")
    body = text[text.index(section):]
    body = body[: body.find("\n## ", len(section))]
    rows = [line for line in body.splitlines() if line.startswith("| `/")]
    documented = {name for row in rows for name in re.findall(r"`/([a-z]+)", row.split(" | ")[0])}
    expected = {name for c in SLASH_COMMANDS.commands for name in c.names}
    assert documented == expected
