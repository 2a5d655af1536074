"""lich: a plugin-first AI agent harness.

The plugin author's surface::

    from lich import hookimpl, tool, Tool, Block, Rewrite, ToolResult

Names are imported lazily, so ``import lich`` (and ``lich --version``) stays
cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lich.lazy import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:
    # What type checkers see: each name of _EXPORTS, re-exported explicitly (`X as X`).
    # tests/test_meta.py checks that this block and _EXPORTS say the same.
    from lich._schema import Param as Param
    from lich.agent import Agent as Agent
    from lich.agent import RunResult as RunResult
    from lich.cancel import CancelToken as CancelToken
    from lich.config import ConfigError as ConfigError
    from lich.config import LichConfig as LichConfig
    from lich.config import ProviderConfig as ProviderConfig
    from lich.config import load_config as load_config
    from lich.events import ApprovalResolved as ApprovalResolved
    from lich.events import Envelope as Envelope
    from lich.guards import ToolError as ToolError
    from lich.hooks import Approval as Approval
    from lich.hooks import ApprovalRequest as ApprovalRequest
    from lich.hooks import Ask as Ask
    from lich.hooks import Block as Block
    from lich.hooks import Compression as Compression
    from lich.hooks import FollowUp as FollowUp
    from lich.hooks import InstructionSection as InstructionSection
    from lich.hooks import PromptEdit as PromptEdit
    from lich.hooks import Rewrite as Rewrite
    from lich.hooks import RunInfo as RunInfo
    from lich.hooks import RunOutcome as RunOutcome
    from lich.hooks import Stop as Stop
    from lich.hooks import hookimpl as hookimpl
    from lich.plugins import LoadReport as LoadReport
    from lich.plugins import PluginHost as PluginHost
    from lich.plugins import PluginLoadError as PluginLoadError
    from lich.processes import Launch as Launch
    from lich.processes import ProcessRunner as ProcessRunner
    from lich.providers import ProviderDefaults as ProviderDefaults
    from lich.providers import ProviderRegistry as ProviderRegistry
    from lich.sessions import SessionStore as SessionStore
    from lich.settings import ConfigTables as ConfigTables
    from lich.slash import SlashCommand as SlashCommand
    from lich.slash import SlashContext as SlashContext
    from lich.slash import SlashRegistry as SlashRegistry
    from lich.tools import Tool as Tool
    from lich.tools import ToolContext as ToolContext
    from lich.tools import ToolRegistry as ToolRegistry
    from lich.tools import tool as tool
    from lich.types import AssistantMessage as AssistantMessage
    from lich.types import ChatFn as ChatFn
    from lich.types import ChatOptions as ChatOptions
    from lich.types import ChatResult as ChatResult
    from lich.types import Message as Message
    from lich.types import Provider as Provider
    from lich.types import ProviderError as ProviderError
    from lich.types import SystemMessage as SystemMessage
    from lich.types import ToolCall as ToolCall
    from lich.types import ToolDefinition as ToolDefinition
    from lich.types import ToolMessage as ToolMessage
    from lich.types import ToolResult as ToolResult
    from lich.types import Usage as Usage
    from lich.types import UserMessage as UserMessage

# The one list of what `lich` exports: name -> the module it is imported from on first
# use. __all__ is derived from it.
_EXPORTS = {
    "Agent": "lich.agent",
    "Approval": "lich.hooks",
    "ApprovalRequest": "lich.hooks",
    "ApprovalResolved": "lich.events",
    "Ask": "lich.hooks",
    "AssistantMessage": "lich.types",
    "Block": "lich.hooks",
    "CancelToken": "lich.cancel",
    "ChatFn": "lich.types",
    "ChatOptions": "lich.types",
    "ChatResult": "lich.types",
    "Compression": "lich.hooks",
    "ConfigError": "lich.config",
    "ConfigTables": "lich.settings",
    "Envelope": "lich.events",
    "FollowUp": "lich.hooks",
    "InstructionSection": "lich.hooks",
    "Launch": "lich.processes",
    "LichConfig": "lich.config",
    "LoadReport": "lich.plugins",
    "Message": "lich.types",
    "Param": "lich._schema",
    "PluginHost": "lich.plugins",
    "PluginLoadError": "lich.plugins",
    "ProcessRunner": "lich.processes",
    "Provider": "lich.types",
    "ProviderConfig": "lich.config",
    "ProviderDefaults": "lich.providers",
    "ProviderError": "lich.types",
    "PromptEdit": "lich.hooks",
    "ProviderRegistry": "lich.providers",
    "Rewrite": "lich.hooks",
    "RunInfo": "lich.hooks",
    "RunOutcome": "lich.hooks",
    "RunResult": "lich.agent",
    "SessionStore": "lich.sessions",
    "SlashCommand": "lich.slash",
    "SlashContext": "lich.slash",
    "SlashRegistry": "lich.slash",
    "Stop": "lich.hooks",
    "SystemMessage": "lich.types",
    "Tool": "lich.tools",
    "ToolCall": "lich.types",
    "ToolContext": "lich.tools",
    "ToolDefinition": "lich.types",
    "ToolError": "lich.guards",
    "ToolMessage": "lich.types",
    "ToolRegistry": "lich.tools",
    "ToolResult": "lich.types",
    "Usage": "lich.types",
    "UserMessage": "lich.types",
    "hookimpl": "lich.hooks",
    "load_config": "lich.config",
    "tool": "lich.tools",
}

__all__ = sorted([*_EXPORTS, "__version__"])

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
