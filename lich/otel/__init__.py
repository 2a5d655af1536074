"""The builtin ``otel`` plugin: a run as OpenTelemetry GenAI spans.

Load it with ``plugins = ["+otel"]`` (it needs ``pip install 'lich-agent[otel]'``);
the hooks are in :mod:`lich.otel.plugin`, the names it emits (pinned to one
revision of the GenAI semantic conventions) in :mod:`lich.otel._semconv`, and
``docs/telemetry.md`` describes the spans and how to send them to a backend.

Importing this package imports no OpenTelemetry module: the SDK is imported
when the first run starts.
"""

from lich.otel._semconv import SEMCONV_VERSION

__all__ = ["SEMCONV_VERSION"]
