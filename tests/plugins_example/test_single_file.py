"""The single-file examples ``my_plugin.py`` and ``token_budget.py``, loaded by path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lich import Agent
from lich.config import ConfigError
from lich.testing import Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.types import ToolCall, Usage

from .conftest import EXAMPLES, Recorder, build_agent, plan, run_plan, tool_results

MY_PLUGIN = str(EXAMPLES / "my_plugin.py")
TOKEN_BUDGET = str(EXAMPLES / "token_budget.py")


async def test_my_plugin_counts_words_and_protects_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("one two three\nfour five\n")
    recorder = Recorder()
    agent, result = await run_plan(
        tmp_path,
        ("word_count", {"path": "notes.txt"}),
        ("word_count", {"path": "../elsewhere.txt"}),
        ("write_file", {"path": "poetry.lock", "content": "x"}),
        ("write_file", {"path": ".git/config", "content": "x"}),
        ("write_file", {"path": "notes.txt", "content": "fine"}),
        plugins=(MY_PLUGIN,),
        objects=[("recorder", recorder)],
    )
    report = agent.host.reports[0]
    assert (report.plugin, report.source, report.status) == ("my_plugin", "file", "loaded")
    assert report.hooks == ("lich_before_tool_call", "lich_check_config", "lich_register_tools")
    assert agent.tools.get("word_count") is not None
    assert agent.tools.get("word_count").plugin == "my_plugin"  # type: ignore[union-attr]
    counted, escaped, lock, git, fine = tool_results(result)
    assert json.loads(counted.content) == {"path": "notes.txt", "lines": 2, "words": 5,
                                           "chars": 24}
    assert json.loads(escaped.content)["error"].startswith("path_escape: ")
    assert json.loads(lock.content)["error"] == (
        "blocked_by_plugin: protected_file: poetry.lock matches '*.lock' (my_plugin)"
    )
    assert json.loads(git.content)["error"].startswith("blocked_by_plugin: protected_file: ")
    assert not fine.is_error
    assert recorder.received == [("write_file", {"path": "notes.txt", "content": "fine"})]


async def test_my_plugin_protect_setting(tmp_path: Path) -> None:
    recorder = Recorder()
    _, result = await run_plan(
        tmp_path,
        ("write_file", {"path": "LICENSE", "content": "x"}),
        ("write_file", {"path": "app.lock", "content": "x"}),
        plugins=(MY_PLUGIN,),
        objects=[("recorder", recorder)],
        plugin_settings={"my_plugin": {"protect": ["LICENSE"]}},
    )
    license_answer, lock_answer = tool_results(result)
    assert license_answer.is_error
    assert not lock_answer.is_error  # the setting replaces the defaults
    assert recorder.received == [("write_file", {"path": "app.lock", "content": "x"})]


def usage_responder(calls: int, tokens_per_reply: int) -> ScriptedChat:
    """A model that asks for ``echo`` ``calls`` times, reporting fixed usage per reply."""

    def respond(request: ScriptRequest) -> Reply:
        done = len(request.tool_results_since_user())
        usage = Usage(tokens_per_reply - 10, 10, tokens_per_reply)
        if done < calls:
            return Reply(tool_calls=(ToolCall(f"c{done + 1}", "echo", {"text": str(done)}),),
                         usage=usage)
        return Reply("done", usage=usage)

    return ScriptedChat(responder=respond)


async def test_token_budget_blocks_tool_calls_once_the_run_spent_its_tokens(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    config = make_test_config(tmp_path, plugins=(TOKEN_BUDGET,),
                              plugin_settings={"token_budget": {"max_tokens": 250}})
    agent = Agent(config, plugins=[("recorder", recorder)], chat=usage_responder(4, 100))
    first = await agent.run("spend")
    errors = [json.loads(m.content)["error"] if m.is_error else None
              for m in tool_results(first)]
    # Replies 1 and 2 used 200 tokens (< 250); reply 3 brings the run to 300.
    assert errors[:2] == [None, None]
    assert errors[2] == ("blocked_by_plugin: token_budget: this run used 300 of its 250 tokens; "
                         "answer with what you have")
    assert errors[3] is not None
    assert errors[3].startswith("blocked_by_plugin: token_budget: this run used 400 ")
    assert recorder.names() == ["echo", "echo"]
    assert first.stopped_reason == "final"

    # The budget is per run: the next run starts from zero.
    second = await agent.run("again")
    assert [m.is_error for m in tool_results(second)][:2] == [False, False]
    assert recorder.names() == ["echo"] * 4


async def test_token_budget_can_count_completion_tokens_only(tmp_path: Path) -> None:
    recorder = Recorder()
    config = make_test_config(
        tmp_path, plugins=(TOKEN_BUDGET,),
        plugin_settings={"token_budget": {"max_tokens": 25, "count": "completion"}},
    )
    agent = Agent(config, plugins=[("recorder", recorder)], chat=usage_responder(4, 1000))
    result = await agent.run("spend")
    # Each reply has 10 completion tokens: calls 1 and 2 run (10, 20 < 25), 3 and 4 do not.
    assert [m.is_error for m in tool_results(result)] == [False, False, True, True]


def test_token_budget_bad_settings_refuse_the_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_agent(tmp_path, plan(), plugins=(TOKEN_BUDGET,),
                    plugin_settings={"token_budget": {"max_tokens": "lots", "count": "words",
                                                      "max_token": 1}})
    assert sorted(info.value.problems) == [
        "$.plugin_settings.token_budget.count: must be one of 'total', 'completion', got 'words'",
        "$.plugin_settings.token_budget.max_token: unknown key (did you mean 'max_tokens'?)",
        "$.plugin_settings.token_budget.max_tokens: expected an integer, got string",
    ]


def test_my_plugin_bad_settings_refuse_the_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_agent(tmp_path, plan(), plugins=(MY_PLUGIN,),
                    plugin_settings={"my_plugin": {"protect": "*.lock"}})
    assert info.value.problems == [
        "$.plugin_settings.my_plugin.protect: expected an array, got string"]
