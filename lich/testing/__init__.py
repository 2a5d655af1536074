"""Testing kit for plugin authors: a scripted model, in process or over HTTP, and recorders.

Importable without pytest (``lich demo`` and ``python -m lich.testing serve``
use it on installs without the test extra). What it gives you:

* :class:`ScriptedChat` — an in-process chat function answering from a script;
* :class:`ScriptedServer` — the same script served over HTTP on 127.0.0.1
  (OpenAI, Anthropic and Ollama wire dialects, streaming or not), for
  end-to-end runs through a real provider;
* :class:`HookRecorder` — a plugin that records every run-time hook call;
* :class:`AskFor` / :class:`ScriptedApprover` — an approval policy and a scripted
  approver, to test either side of an approval;
* :func:`make_test_config` — a config rooted in a temporary directory;
* :func:`child_venv` — a virtualenv that sees the running one's packages, to
  install a plugin distribution into;
* :func:`wait_for` / :func:`async_wait_for` — poll a condition with a bound
  instead of sleeping (the failure says what was awaited and what was seen).

The pytest fixtures (``lich_scripted_server``, ``lich_agent_factory``,
``lich_hook_recorder``) are in :mod:`lich.testing.plugin`, which pytest
loads by itself. The modules: :mod:`~lich.testing.scripted` (steps, the model,
responders), :mod:`~lich.testing.dialects` (wire formats),
:mod:`~lich.testing.server` (HTTP), :mod:`~lich.testing.helpers`,
:mod:`~lich.testing.approvals`. See
``docs/testing.md``.
"""

from lich.testing.approvals import AskFor, ScriptedApprover
from lich.testing.dialects import DIALECTS, Dialect
from lich.testing.helpers import HookRecorder, child_venv, make_test_config
from lich.testing.scripted import (
    Fail,
    Reply,
    Responder,
    ScriptedChat,
    ScriptedModel,
    ScriptRequest,
    Step,
    calls_responder,
    demo_responder,
    echo_responder,
    tool_loop_responder,
)
from lich.testing.server import ScriptedServer
from lich.testing.wait import DEFAULT_TIMEOUT_S, WaitTimeout, async_wait_for, wait_for

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "DIALECTS",
    "AskFor",
    "Dialect",
    "Fail",
    "HookRecorder",
    "Reply",
    "Responder",
    "ScriptRequest",
    "ScriptedApprover",
    "ScriptedChat",
    "ScriptedModel",
    "ScriptedServer",
    "Step",
    "WaitTimeout",
    "async_wait_for",
    "calls_responder",
    "child_venv",
    "demo_responder",
    "echo_responder",
    "make_test_config",
    "tool_loop_responder",
    "wait_for",
]
