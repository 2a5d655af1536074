"""terminal reports stdout and stderr as they arrive (``tool_output``), while its result
stays exactly what it is without anyone watching."""

from __future__ import annotations

from pathlib import Path

from lich.events import Event, ToolOutput

from .conftest import Runner

HANG_S = 60
# Prints, waits for the gate file the test writes once it saw the first piece live,
# prints again (on both streams). ``\xc3`` then ``\xa9`` is one character, é, cut in two.
GATED = ("printf 'first a\\xc3'; while [ ! -e gate ]; do sleep 0.02; done; "
         "printf '\\xa9 second\\n'; echo err >&2")


class _Gate:
    """An ``emit`` that writes ``gate`` in the work dir once the first output arrived."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.texts: list[str] = []

    def __call__(self, event: Event) -> None:
        assert isinstance(event, ToolOutput)
        self.texts.append(event.text)
        if "first" in "".join(self.texts):
            (self.work / "gate").touch()


async def test_terminal_output_arrives_while_the_command_runs(run: Runner) -> None:
    gate = _Gate(run.work_dir)
    result = await run("terminal", {"command": GATED, "timeout_ms": HANG_S * 1000},
                       emit=gate)

    # The command only got past its wait because the first piece came while it ran.
    assert result.ok, result
    assert gate.texts[0] == "first a"
    live = "".join(gate.texts)
    assert live == "first aé second\nerr\n"  # the split character decoded whole
    (run.work_dir / "gate").unlink()

    # Exactly the result of the same command with nobody watching.
    (run.work_dir / "gate").touch()
    unwatched = await run("terminal", {"command": GATED})
    assert unwatched == result
    assert result.output == "first aé second\nerr\n\n[exit 0]"


async def test_a_flood_is_reported_only_up_to_the_output_cap(run: Runner) -> None:
    texts: list[str] = []

    def emit(event: Event) -> None:
        assert isinstance(event, ToolOutput)
        texts.append(event.text)

    result = await run("terminal", {"command": "head -c 3000000 /dev/zero | tr '\\0' x"},
                       settings={"max_output_chars": 5000}, emit=emit)

    assert result.ok
    assert "".join(texts) == "x" * 5000  # the call's cap, then nothing more
    assert result.output.endswith("\n[exit 0]")
    assert len(result.output) <= 5000
