"""A single-file lich plugin: stop tool use once a run has spent its token budget.

::

    lich --plugin plugins_example/token_budget.py "summarise every file here"

    [plugin_settings.token_budget]
    max_tokens = 20000     # per run; tool calls are blocked once this many are used
    count = "total"        # "total" (prompt + completion) or "completion"

The plugin adds up the usage of every model call of a run from the
``llm_end`` events (``lich_event``) and, once the run has used
``max_tokens``, blocks further tool calls with
``blocked_by_plugin: token_budget: …``. The model then sees why and can
answer with what it has; the run itself is not cut short. Counts are kept
per run id, so concurrent runs (the gateway, tests) do not share a budget,
and are dropped when the run ends.

Bad settings are refused before anything runs, with their ``$.path``:
``lich config validate`` reports them and a run does not start.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal

from attrs import frozen

from lich import Block, hookimpl
from lich.settings import at_least, setting, structure_settings

PLUGIN_NAME = "token_budget"
DEFAULT_MAX_TOKENS = 50_000

# run id -> [max_tokens, count, used]; lich_event carries no config, so the
# run's settings are kept here from lich_run_start on.
_runs: dict[str, list[Any]] = {}
_lock = threading.Lock()

@frozen
class BudgetSettings:
    """``[plugin_settings.token_budget]``."""

    max_tokens: int = setting(DEFAULT_MAX_TOKENS, check=at_least(1),
                              help="per run; tool calls are blocked once this many are used")
    count: Literal["total", "completion"] = setting(
        "total", help='"total" (prompt + completion) or "completion"')


def budget_settings(raw: Mapping[str, Any] | None) -> tuple[int, str]:
    """``(max_tokens, count)`` from ``[plugin_settings.token_budget]``.

    :raises lich.settings.ConfigError: naming every bad key with its ``$.path``.
    """
    settings = structure_settings(raw, BudgetSettings, f"$.plugin_settings.{PLUGIN_NAME}")
    return settings.max_tokens, settings.count


def used_tokens(run_id: str) -> int:
    """Tokens counted so far for ``run_id`` (0 for an unknown run)."""
    with _lock:
        state = _runs.get(run_id)
        return int(state[2]) if state else 0


@hookimpl
def lich_check_config(config: Any) -> None:
    """Check the settings before any run (and in ``lich config validate``)."""
    budget_settings(config.plugin_settings.get(PLUGIN_NAME))


@hookimpl
def lich_run_start(run: Any) -> None:
    """Start the run's count at zero (a resumed session starts a new budget)."""
    limit, count = budget_settings(run.settings_for(PLUGIN_NAME))
    with _lock:
        _runs[run.run_id] = [limit, count, 0]


@hookimpl
def lich_event(event: Any) -> None:
    """Add up the usage of each model call of the run."""
    if event.type != "llm_end":
        return
    usage = event.event.result.usage
    with _lock:
        state = _runs.get(event.run_id)
        if state is None:
            return
        if state[1] == "completion":
            state[2] += usage.completion_tokens
        else:
            state[2] += usage.total_tokens or usage.prompt_tokens + usage.completion_tokens


@hookimpl
def lich_before_tool_call(call: Any, run: Any) -> Block | None:
    """Block the call when the run has used its budget."""
    with _lock:
        state = _runs.get(run.run_id)
    if state is None:
        # lich_run_start failed (bad settings): raising here blocks the call (fail closed).
        budget_settings(run.settings_for(PLUGIN_NAME))
        raise RuntimeError("token_budget did not see this run start")
    limit, _count, used = state
    if used >= limit:
        return Block(f"token_budget: this run used {used} of its {limit} tokens; "
                     "answer with what you have")
    return None


@hookimpl
def lich_run_end(run: Any) -> None:
    """Forget the run's count."""
    with _lock:
        _runs.pop(run.run_id, None)
