"""The OpenTelemetry GenAI semantic conventions lich follows, pinned to one revision.

The GenAI conventions are still *Development* (not stable): names change between
releases. Every name lich emits is spelled here and nowhere else, so following a
newer revision is a change to this module (and to ``docs/telemetry.md``, which
pins the same revision), never a hunt through the plugin.

Names under ``lich.`` are lich's own: what the conventions have no name for
(which plugin blocked a call, what a run cost, why it stopped).
"""

from __future__ import annotations

from typing import Final

#: The revision of https://github.com/open-telemetry/semantic-conventions whose
#: GenAI documents (docs/gen-ai/gen-ai-spans.md, gen-ai-agent-spans.md) and
#: attribute registry lich follows.
SEMCONV_VERSION: Final = "1.41.1"
SCHEMA_URL: Final = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"

# Operation names (gen_ai.operation.name) and the span names built from them.
OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CHAT: Final = "chat"
OP_EXECUTE_TOOL: Final = "execute_tool"
#: Not a GenAI operation: compressing the context is lich's own step.
SPAN_COMPRESS: Final = "lich.compress"

# Common
OPERATION_NAME: Final = "gen_ai.operation.name"
PROVIDER_NAME: Final = "gen_ai.provider.name"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"

# Agent
AGENT_NAME: Final = "gen_ai.agent.name"
CONVERSATION_ID: Final = "gen_ai.conversation.id"

# Model calls
REQUEST_MODEL: Final = "gen_ai.request.model"
REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"

# Tools
TOOL_NAME: Final = "gen_ai.tool.name"
TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
TOOL_TYPE: Final = "gen_ai.tool.type"
TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
TOOL_TYPE_FUNCTION: Final = "function"

# Content: recorded only when capture_content is on (opt-in in the conventions too).
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"

# lich's own
LICH_RUN_ID: Final = "lich.run_id"
LICH_TURN: Final = "lich.turn"
LICH_PROVIDER: Final = "lich.provider"
LICH_COST_USD: Final = "lich.cost_usd"
LICH_STOPPED_REASON: Final = "lich.stopped_reason"
LICH_TURNS_USED: Final = "lich.turns_used"
LICH_BLOCKED_BY: Final = "lich.blocked_by"
LICH_REWRITTEN_BY: Final = "lich.rewritten_by"
LICH_REPLACED_BY: Final = "lich.replaced_by"
LICH_ORIGINAL_ARGUMENTS: Final = "lich.tool.call.original_arguments"
LICH_ERROR_MESSAGE: Final = "lich.error.message"
LICH_COMPRESS_TOKENS_BEFORE: Final = "lich.compress.tokens_before"
LICH_COMPRESS_TOKENS_AFTER: Final = "lich.compress.tokens_after"
LICH_COMPRESS_SUMMARY_CHARS: Final = "lich.compress.summary_chars"
LICH_COMPRESS_OK: Final = "lich.compress.ok"

# Span events (retries and failovers happen inside one chat span: the conventions
# say a chat span covers the logical call, retries included).
EVENT_RETRY: Final = "lich.retry"
EVENT_FAILOVER: Final = "lich.failover"
EVENT_STREAM_RESET: Final = "lich.stream_reset"
EVENT_APPROVAL_REQUESTED: Final = "lich.approval_requested"
EVENT_APPROVAL_RESOLVED: Final = "lich.approval_resolved"
LICH_ATTEMPT: Final = "lich.attempt"
LICH_DELAY_S: Final = "lich.delay_s"
LICH_FROM_PROVIDER: Final = "lich.from_provider"
LICH_TO_PROVIDER: Final = "lich.to_provider"
LICH_APPROVAL_PREFIX: Final = "lich.approval."
