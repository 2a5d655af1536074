"""`--json` output and the documented event schema (lich/schemas/events.schema.json)."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest

from lich import events as ev
from lich.serialization import envelope_to_dict
from lich.testing import Fail, Reply, ScriptRequest
from lich.types import AssistantMessage, ChatResult, ToolCall, ToolResult, Usage

from .conftest import SCHEMA_PATH, json_lines, write_config

ENVELOPE_KEYS = {"v", "run_id", "session_id", "seq", "ts"}
EVENT_CLASSES: tuple[type[Any], ...] = typing.get_args(ev.Event)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "events.md"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _type_of(cls: type[Any]) -> str:
    return str(attrs.fields_dict(cls)["type"].default)


def test_the_schema_is_shipped_with_the_package() -> None:
    from importlib.resources import files

    shipped = files("lich").joinpath("schemas/events.schema.json").read_text(encoding="utf-8")
    assert json.loads(shipped)["$defs"]["run_end"]


def test_schema_covers_every_event_field_for_field() -> None:
    """A field added to an event class without a schema change fails here."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    defs = schema["$defs"]
    assert schema["properties"]["v"]["const"] == ev.EVENT_SCHEMA_VERSION
    assert set(schema["properties"]["type"]["enum"]) == {_type_of(c) for c in EVENT_CLASSES}
    for cls in EVENT_CLASSES:
        name = _type_of(cls)
        definition = defs[name]
        fields = {f.name for f in attrs.fields(cls)}
        assert set(definition["properties"]) == fields | ENVELOPE_KEYS, name
        assert definition["additionalProperties"] is False
        assert set(definition["required"]) == fields | ENVELOPE_KEYS, name
        assert {"$ref": f"#/$defs/{name}"} in schema["oneOf"]


def _samples() -> list[ev.Event]:
    usage = Usage(10, 5, 15)
    call = ToolCall("c1", "read_file", {"path": "a.txt"})
    bad_call = ToolCall("c2", "read_file", {}, args_error="not JSON")
    message = AssistantMessage("hello", (call,))
    result = ChatResult(message, usage, "tool_calls", "m", "p")
    final = AssistantMessage("done")
    return [
        ev.RunStart("task", "/w", "m"),
        ev.TurnStart(1),
        ev.CompressStart(9000),
        ev.CompressEnd(120, 3000, True),
        ev.CompressEnd(0),
        ev.LlmStart(1),
        ev.TextDelta("he", "p"),
        ev.StreamReset("p", "network: reset by peer"),
        ev.Retry("p", 1, "rate_limit", 1.5, "slow down"),
        ev.Failover("p", "q", "network", "refused"),
        ev.LlmEnd(1, result),
        ev.ToolCallStart(1, call),
        ev.ToolOutput("c1", "line 1\nline"),
        ev.ApprovalRequested("3f2a", call, "read_file needs approval", ("approvals",),
                             ("read_file(a.txt)",), 300.0),
        ev.ApprovalRequested("3f2b", call, "ask"),
        ev.ApprovalResolved("3f2a", "c1", True, "session", "terminal", {"path": "b.txt"},
                            None, 812.5),
        ev.ApprovalResolved("3f2b", "c1", False, "once", None, None,
                            "approval_timeout: no answer within 300s; the call was not run", 0),
        ev.ToolCallEnd(1, call, ToolResult.success("text"), 1.5),
        ev.ToolCallEnd(1, bad_call, ToolResult.failure("blocked_by_plugin: no"), 0.0, ("a",),
                       "guard", None),
        ev.ToolCallEnd(1, call, ToolResult.failure("not_found: a.txt"), 2.0, (), None, "audit"),
        ev.Final(final, ChatResult(final, usage, "stop", "m", "p")),
        ev.BudgetExhausted(25),
        ev.TurnEnd(2),
        ev.ErrorEvent("auth", "bad key"),
        ev.RunStart("hi", "/w", "m", (ev.InstructionReport("AGENTS.md", 5, 40),
                                      ev.InstructionReport("skills", 0, 900, True, False))),
        ev.InstructionsCut("skills", 0, 900, 500),
        ev.PromptBlocked("looks like a key", "keyguard"),
        ev.CompressSkipped(9000, "mid-refactor", "pinner"),
        ev.RunContinued(1, "Run the tests.", "insist"),
        ev.RunEnd("blocked", 0, Usage()),
        ev.RunEnd("final", 2, usage),
        ev.RunEnd("error", 1, Usage(), "ProviderError: auth"),
    ]


def test_every_event_kind_validates(validator: jsonschema.Draft202012Validator) -> None:
    samples = _samples()
    assert {s.type for s in samples} == {_type_of(c) for c in EVENT_CLASSES}
    for seq, event in enumerate(samples, start=1):
        line = json.loads(json.dumps(envelope_to_dict(ev.Envelope("r1", "s1", seq, 1.0, event))))
        validator.validate(line)


def test_the_schema_rejects_what_is_not_an_event(
    validator: jsonschema.Draft202012Validator,
) -> None:
    good = envelope_to_dict(ev.Envelope("r", "s", 1, 1.0, ev.TurnStart(1)))
    assert validator.is_valid(good)
    assert not validator.is_valid({**good, "turn": "one"})
    assert not validator.is_valid({**good, "type": "tea_break"})
    assert not validator.is_valid({**good, "v": ev.EVENT_SCHEMA_VERSION + 1})
    assert not validator.is_valid({**good, "v": ev.EVENT_SCHEMA_VERSION - 1})
    assert not validator.is_valid({k: v for k, v in good.items() if k != "seq"})
    assert not validator.is_valid({**good, "surprise": True})


def test_docs_describe_every_event_type() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for cls in EVENT_CLASSES:
        assert f"`{_type_of(cls)}`" in text, _type_of(cls)
    assert "events.schema.json" in text


# ------------------------------------------------------------- real runs


def _tool_then_answer(request: ScriptRequest) -> Any:
    if not request.tool_results_since_user():
        return Reply("Looking.", (ToolCall("c1", "list_dir", {"path": "."}),))
    return Reply("All done here.")


def test_json_lines_of_a_run_with_a_tool_validate(
    work: Path, scripted: Any, lich: Any, validator: jsonschema.Draft202012Validator
) -> None:
    server = scripted(responder=_tool_then_answer)
    write_config(work, server.base_url)

    result = lich("--json", "look around")

    assert result.exit_code == 0, result.stderr
    lines = json_lines(result.stdout)
    for line in lines:
        validator.validate(line)
    types = [line["type"] for line in lines]
    assert types[0] == "run_start"
    assert types[-1] == "run_end"
    for expected in ("turn_start", "llm_start", "text_delta", "llm_end", "tool_call_start",
                     "tool_call_end", "final", "turn_end"):
        assert expected in types
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert len({(line["run_id"], line["session_id"]) for line in lines}) == 1
    end = lines[-1]
    assert end["stopped_reason"] == "final"
    assert end["turns_used"] == 2
    tool_end = next(line for line in lines if line["type"] == "tool_call_end")
    assert tool_end["call"]["name"] == "list_dir"
    assert tool_end["result"]["ok"] is True
    # Nothing but JSON on stdout; the human progress lines are not printed.
    assert "[lich]" not in result.stderr


def test_json_lines_of_failed_and_budget_runs_validate(
    work: Path, scripted: Any, lich: Any, validator: jsonschema.Draft202012Validator
) -> None:
    server = scripted([Fail(401, {"error": {"message": "bad key"}}),
                       Reply(tool_calls=(ToolCall("c1", "list_dir", {"path": "."}),))])
    write_config(work, server.base_url)

    failed = lich("--json", "hi")
    budget = lich("--json", "--max-turns", "1", "hi")

    assert failed.exit_code == 1
    assert budget.exit_code == 1
    failed_lines = json_lines(failed.stdout)
    budget_lines = json_lines(budget.stdout)
    for line in failed_lines + budget_lines:
        validator.validate(line)
    assert failed_lines[-1]["stopped_reason"] == "error"
    assert "error" in [line["type"] for line in failed_lines]
    assert budget_lines[-1]["stopped_reason"] == "budget"
    assert "budget_exhausted" in [line["type"] for line in budget_lines]


@attrs.frozen
class _Clashing:
    """Not a lich event: its fields are named like envelope keys, which the event's
    values replace in the envelope's own places."""

    session_id: str = "the event's"
    ts: str = "late"
    type: str = "clashing"


@pytest.mark.parametrize("ts", [0.0, 1.0, 1796142905.505128, 1e22, 5e-324, -0.0,
                                float("nan"), float("inf"), 3, True])
def test_a_json_line_is_the_envelope_dict_encoded_byte_for_byte(ts: Any) -> None:
    """The ``--json`` encoder's short cuts (the run's keys encoded once, seq and ts
    written directly, a reused encoder) give exactly the documented dict's encoding."""
    import io

    from lich.cli._render import JsonRenderer

    events: list[Any] = [*_samples(), ev.TextDelta('naïve ✓ "quoted" \\ \n\t\x00 😀'),
                         _Clashing()]
    envelopes = [ev.Envelope("r1", "s1", seq, ts, event)
                 for seq, event in enumerate(events, start=1)]
    # Another run on the same renderer (chat runs many), odd ids, odd seq values.
    envelopes += [ev.Envelope("r2 ✓", 's"2', 7, ts, ev.TurnStart(1)),
                  ev.Envelope("r1", "s1", True, ts, ev.TurnStart(2)),
                  ev.Envelope("r1", "s1", 2**70, ts, ev.TurnStart(3))]
    out = io.StringIO()
    renderer = JsonRenderer(out)
    for envelope in envelopes:
        renderer(envelope)
    expected = "".join(json.dumps(envelope_to_dict(e), separators=(",", ":")) + "\n"
                       for e in envelopes)
    assert out.getvalue() == expected
    clashing = json.loads(out.getvalue().splitlines()[len(events) - 1])
    assert (clashing["session_id"], clashing["ts"]) == ("the event's", "late")


def _terminal_then_answer(request: ScriptRequest) -> Any:
    if not request.tool_results_since_user():
        command = "echo first; sleep 0.2; echo second >&2"
        return Reply("Running.", (ToolCall("c1", "terminal", {"command": command}),))
    return Reply("Ran it.")


def test_a_running_commands_output_comes_as_tool_output_lines(
    work: Path, scripted: Any, lich: Any, validator: jsonschema.Draft202012Validator
) -> None:
    server = scripted(responder=_terminal_then_answer)
    write_config(work, server.base_url)

    result = lich("--json", "--yes", "run it")

    assert result.exit_code == 0, result.stderr
    lines = json_lines(result.stdout)
    for line in lines:
        validator.validate(line)
    types = [line["type"] for line in lines]
    start, end = types.index("tool_call_start"), types.index("tool_call_end")
    live = [line for line in lines if line["type"] == "tool_output"]
    assert live
    assert all(start < lines.index(line) < end for line in live)
    assert {line["call_id"] for line in live} == {"c1"}
    assert "".join(line["text"] for line in live) == "first\nsecond\n"
    assert lines[end]["result"]["output"] == "first\nsecond\n\n[exit 0]"
    # The transcript keeps the result, not the pieces.
    session = next((work / ".lich" / "sessions").glob("*.jsonl")).read_text()
    assert "tool_output" not in session
    assert "[exit 0]" in session

    # The human renderer shows no live output: stdout is the model's answer only.
    human = lich("--yes", "run it")
    assert human.exit_code == 0, human.stderr
    assert "first" not in human.stdout
