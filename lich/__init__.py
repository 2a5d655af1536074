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
    from lich._schema import Param
    from lich.agent import Agent, RunResult
    from lich.cancel import CancelToken
    from lich.config import ConfigError, LichConfig, ProviderConfig, load_config
    from lich.events import Envelope
    from lich.gateway.bus import GatewayBus, MessageBus
    from lich.gateway.registry import AdapterRegistry
    from lich.guards import ToolError
    from lich.hooks import (
        Approval,
        ApprovalRequest,
        Ask,
        Block,
        Rewrite,
        RunInfo,
        RunOutcome,
        Stop,
        hookimpl,
    )
    from lich.plugins import LoadReport, PluginHost, PluginLoadError
    from lich.providers import ProviderDefaults, ProviderRegistry
    from lich.tools import Tool, ToolContext, ToolRegistry, tool
    from lich.types import (
        AssistantMessage,
        ChatFn,
        ChatOptions,
        ChatResult,
        Message,
        Provider,
        ProviderError,
        SystemMessage,
        ToolCall,
        ToolDefinition,
        ToolMessage,
        ToolResult,
        Usage,
        UserMessage,
    )

_EXPORTS = {
    "AdapterRegistry": "lich.gateway.registry",
    "Agent": "lich.agent",
    "Approval": "lich.hooks",
    "ApprovalRequest": "lich.hooks",
    "Ask": "lich.hooks",
    "AssistantMessage": "lich.types",
    "Block": "lich.hooks",
    "CancelToken": "lich.cancel",
    "ChatFn": "lich.types",
    "ChatOptions": "lich.types",
    "ChatResult": "lich.types",
    "ConfigError": "lich.config",
    "Envelope": "lich.events",
    "GatewayBus": "lich.gateway.bus",
    "LichConfig": "lich.config",
    "LoadReport": "lich.plugins",
    "Message": "lich.types",
    "MessageBus": "lich.gateway.bus",
    "Param": "lich._schema",
    "PluginHost": "lich.plugins",
    "PluginLoadError": "lich.plugins",
    "Provider": "lich.types",
    "ProviderConfig": "lich.config",
    "ProviderDefaults": "lich.providers",
    "ProviderError": "lich.types",
    "ProviderRegistry": "lich.providers",
    "Rewrite": "lich.hooks",
    "RunInfo": "lich.hooks",
    "RunOutcome": "lich.hooks",
    "RunResult": "lich.agent",
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
    "TranscriptStore": "lich.sessions",
    "Usage": "lich.types",
    "UserMessage": "lich.types",
    "hookimpl": "lich.hooks",
    "load_config": "lich.config",
    "tool": "lich.tools",
}

# A literal list, so linters and type checkers see what the lazy imports provide.
__all__ = [
    "AdapterRegistry",
    "Agent",
    "Approval",
    "ApprovalRequest",
    "Ask",
    "AssistantMessage",
    "Block",
    "CancelToken",
    "ChatFn",
    "ChatOptions",
    "ChatResult",
    "ConfigError",
    "Envelope",
    "GatewayBus",
    "LichConfig",
    "LoadReport",
    "Message",
    "MessageBus",
    "Param",
    "PluginHost",
    "PluginLoadError",
    "Provider",
    "ProviderConfig",
    "ProviderDefaults",
    "ProviderError",
    "ProviderRegistry",
    "Rewrite",
    "RunInfo",
    "RunOutcome",
    "RunResult",
    "Stop",
    "SystemMessage",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolMessage",
    "ToolRegistry",
    "ToolResult",
    "TranscriptStore",
    "Usage",
    "UserMessage",
    "__version__",
    "hookimpl",
    "load_config",
    "tool",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
