"""One-shot runs: `lich TASK...`, stdin tasks, output streams, exit codes, --resume."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lich.testing import Fail, Reply, ScriptRequest
from lich.types import ToolCall

from .conftest import json_lines, run_lich, write_config


def list_then_answer(request: ScriptRequest) -> Any:
    """Call list_dir once, then answer with what it returned."""
    results = request.tool_results_since_user()
    if not results:
        return Reply("Let me look.", (ToolCall("c1", "list_dir", {"path": "."}),))
    return Reply(f"The directory holds: {results[0].content.strip()}")


def always_tools(request: ScriptRequest) -> Any:
    n = len(request.tool_results_since_user())
    return Reply(tool_calls=(ToolCall(f"c{n}", "list_dir", {"path": "."}),))


def test_one_shot_with_a_tool_call(work: Path, scripted: Any, lich: Any) -> None:
    (work / "notes.txt").write_text("x", encoding="utf-8")
    server = scripted(responder=list_then_answer)
    write_config(work, server.base_url)

    result = lich("what", "is", "here?")

    assert result.exit_code == 0, result.stderr
    assert server.user_messages(0) == ["what is here?"]
    # The answer (every reply's text) is on stdout, progress on stderr.
    assert "The directory holds:" in result.stdout
    assert "notes.txt" in result.stdout
    assert "Let me look." in result.stdout
    assert "[lich] turn 1" in result.stderr
    assert '[lich] tool list_dir(path="."): ok' in result.stderr
    assert "[lich]" not in result.stdout
    # The tool really ran: its output reached the model.
    assert "notes.txt" in server.requests[1].messages[-1].content
    # The closing line says how it ended and where the transcript is.
    (transcript,) = (work / ".lich" / "sessions").glob("*.jsonl")
    assert re.search(rf"\[lich\] final after 2 turns, [\d,]+ tokens; session {transcript.stem}; "
                     rf"transcript {re.escape(str(transcript))}", result.stderr), result.stderr


def test_one_shot_in_a_subprocess(work: Path, scripted: Any) -> None:
    (work / "notes.txt").write_text("x", encoding="utf-8")
    server = scripted(responder=list_then_answer)
    write_config(work, server.base_url)

    proc = run_lich("what is here?", cwd=work)

    assert proc.returncode == 0, proc.stderr
    assert "The directory holds:" in proc.stdout
    assert "notes.txt" in proc.stdout
    assert "tool list_dir" in proc.stderr
    assert "transcript" in proc.stderr


def test_task_from_stdin(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["piped answer"])
    write_config(work, server.base_url)

    result = lich(input="summarise this\nplease\n")

    assert result.exit_code == 0, result.stderr
    assert server.user_messages(0) == ["summarise this\nplease"]
    assert result.stdout.strip() == "piped answer"


def test_stdin_task_in_a_subprocess(work: Path, scripted: Any) -> None:
    server = scripted(["from a pipe"])
    write_config(work, server.base_url)

    proc = run_lich(cwd=work, input="echoed task\n")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "from a pipe"
    assert server.user_messages(0) == ["echoed task"]


def test_explicit_run_command_takes_command_names_as_words(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["ok"])
    write_config(work, server.base_url)

    result = lich("run", "--", "config", "--help", "me")

    assert result.exit_code == 0, result.stderr
    assert server.user_messages(0) == ["config --help me"]


def test_flags_after_the_task_apply(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(responder=always_tools)
    write_config(work, server.base_url)

    result = lich("keep going", "--max-turns", "2")

    assert result.exit_code == 1
    assert len(server.requests) == 2


def test_no_stream_prints_whole_replies(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["one whole answer"])
    write_config(work, server.base_url)

    result = lich("--no-stream", "hi")

    assert result.exit_code == 0, result.stderr
    assert result.stdout == "one whole answer\n"
    assert server.requests[0].stream is False


def test_streaming_is_the_default(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["streamed answer here"])
    write_config(work, server.base_url)

    result = lich("--json", "hi")

    assert result.exit_code == 0
    assert server.requests[0].stream is True
    deltas = [e["text"] for e in json_lines(result.stdout) if e["type"] == "text_delta"]
    assert "".join(deltas) == "streamed answer here"
    assert len(deltas) > 1


# ------------------------------------------------------------------ exit codes


def test_exit_0_on_a_final_answer(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["done"])
    write_config(work, server.base_url)
    assert lich("go").exit_code == 0


def test_exit_1_when_the_budget_runs_out(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(responder=always_tools)
    write_config(work, server.base_url)

    result = lich("--max-turns", "3", "loop forever")

    assert result.exit_code == 1
    assert "budget exhausted after 3 turns" in result.stderr
    assert len(server.requests) == 3


def test_exit_1_when_the_model_fails(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted([Fail(400, {"error": {"message": "model 'nope' does not exist"}})])
    write_config(work, server.base_url)

    result = lich("hi")

    assert result.exit_code == 1
    assert "model call failed" in result.stderr
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def test_exit_2_without_a_task(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["unused"])
    write_config(work, server.base_url)

    result = lich(input="")

    assert result.exit_code == 2
    assert "no task" in result.stderr
    assert server.requests == []


def test_exit_2_on_bad_flags(work: Path, lich: Any) -> None:
    assert lich("--max-turns", "0", "hi").exit_code == 2
    assert lich("--log-level", "loud", "hi").exit_code == 2
    bad = lich("--no-such-flag", "hi")
    assert bad.exit_code == 2
    assert "No such option" in bad.stderr


def test_exit_2_on_a_config_error_naming_file_and_path(work: Path, lich: Any) -> None:
    config = work / ".lich" / "config.toml"
    config.parent.mkdir()
    config.write_text('max_turns = "many"\n[[providers]]\nkind = "openai_compat"\n'
                      'name = "a"\nmodel = "m"\nflavour = "x"\n', encoding="utf-8")

    result = lich("hi")

    assert result.exit_code == 2
    assert str(config) in result.stderr
    assert "$.max_turns" in result.stderr
    assert "$.providers[0].flavour: unknown key" in result.stderr


def test_missing_model_says_how_to_set_one(work: Path, lich: Any) -> None:
    from lich.config import no_model_message

    result = lich("hi")

    assert result.exit_code == 2
    assert no_model_message() in result.stderr
    assert "LICH_MODEL" in result.stderr
    assert "--model" in result.stderr


def test_model_from_flags_without_a_config_file(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["flagged"])

    result = lich("--model", "m1", "--base-url", server.base_url, "hi")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "flagged"
    assert server.requests[0].model == "m1"


def test_model_from_the_environment(
    work: Path, scripted: Any, lich: Any, monkeypatch: Any
) -> None:
    server = scripted(["from env"])
    monkeypatch.setenv("LICH_MODEL", "env-model")
    monkeypatch.setenv("LICH_BASE_URL", server.base_url)

    result = lich("hi")

    assert result.exit_code == 0, result.stderr
    assert server.requests[0].model == "env-model"


def test_unknown_provider_kind_is_a_config_error(work: Path, lich: Any) -> None:
    result = lich("--model", "m", "--provider-kind", "carrier_pigeon", "hi")

    assert result.exit_code == 2
    assert "carrier_pigeon" in result.stderr
    assert "$.providers[0].kind" in result.stderr


# --------------------------------------------------------------------- sessions


def test_resume_latest_continues_the_conversation(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["first answer", "second answer"])
    write_config(work, server.base_url)

    assert lich("my first question").exit_code == 0
    result = lich("--resume", "latest", "and a follow-up")

    assert result.exit_code == 0, result.stderr
    assert server.user_messages(1) == ["my first question", "and a follow-up"]
    assert any(m.content == "first answer" for m in server.requests[1].messages)
    sessions = list((work / ".lich" / "sessions").glob("*.jsonl"))
    assert len(sessions) == 1  # one conversation, continued


def test_resume_of_an_unknown_session_is_a_usage_error(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["unused"])
    write_config(work, server.base_url)

    result = lich("--resume", "nope-123", "hi")

    assert result.exit_code == 2
    assert "nope-123" in result.stderr
    assert server.requests == []


def test_work_dir_and_session_dir_flags(tmp_path: Path, work: Path, scripted: Any,
                                        lich: Any) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "marker.txt").write_text("m", encoding="utf-8")
    server = scripted(responder=list_then_answer)
    write_config(other, server.base_url)
    sessions = tmp_path / "sessions"

    result = lich("--work-dir", str(other), "--session-dir", str(sessions), "look")

    assert result.exit_code == 0, result.stderr
    assert "marker.txt" in result.stdout
    assert len(list(sessions.glob("*.jsonl"))) == 1
    assert not (work / ".lich").exists()


def test_system_prompt_flag_reaches_the_model(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["ok"])
    write_config(work, server.base_url)

    assert lich("--system-prompt", "Talk like a pirate.", "hi").exit_code == 0

    first = server.requests[0].messages[0]
    assert first.role == "system"
    assert first.content == "Talk like a pirate."


def test_exit_codes_for_each_ending() -> None:
    from lich.cli.run import Interruptible, exit_code_for

    class Result:
        def __init__(self, reason: str) -> None:
            self.stopped_reason = reason

    def code(reason: str | None, signal_name: str | None = None) -> int:
        result = Result(reason) if reason else None
        return exit_code_for(Interruptible(result, signal_name))  # type: ignore[arg-type]

    assert code("final") == 0
    assert code("budget") == 1
    assert code("aborted") == 1
    assert code("error") == 1
    assert code("aborted", "SIGINT") == 130
    assert code(None, "SIGINT") == 130  # a second Ctrl-C cancelled the task outright
    assert code("aborted", "SIGTERM") == 143
    assert code("final", "SIGINT") == 0  # the answer was complete before the signal landed


def test_api_key_env_flag_sends_that_variable_as_the_key(
    work: Path, scripted: Any, lich: Any, monkeypatch: Any
) -> None:
    server = scripted(["keyed"])
    monkeypatch.setenv("MY_LICH_TEST_KEY", "sk-from-my-var")

    result = lich("--model", "m", "--base-url", server.base_url,
                  "--api-key-env", "MY_LICH_TEST_KEY", "hi")

    assert result.exit_code == 0, result.stderr
    headers = {k.lower(): v for k, v in server.server.headers_seen[0].items()}
    assert headers["authorization"] == "Bearer sk-from-my-var"
    assert "sk-from-my-var" not in result.stdout + result.stderr


LOG_PLUGIN = '''
import logging
from lich import hookimpl


@hookimpl
def lich_run_start(run):
    logging.getLogger("lich.probe").debug("probe says debug")
    logging.getLogger("lich.probe").info("probe says info")
'''


def test_log_level_flag_sets_what_reaches_stderr(
    tmp_path: Path, work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["a", "b", "c"])
    write_config(work, server.base_url)
    plugin = tmp_path / "log_probe.py"
    plugin.write_text(LOG_PLUGIN, encoding="utf-8")

    default = lich("--plugin", str(plugin), "hi")
    debug = lich("--plugin", str(plugin), "--log-level", "debug", "hi")
    quiet = lich("--plugin", str(plugin), "--log-level", "error", "hi")

    assert [r.exit_code for r in (default, debug, quiet)] == [0, 0, 0]
    assert "probe says info" in default.stderr
    assert "probe says debug" not in default.stderr
    assert "[lich:debug] probe says debug" in debug.stderr
    assert "probe says" not in quiet.stderr
