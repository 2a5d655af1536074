"""The builtin ``prices`` plugin: what each model call cost, from ``genai-prices``.

Enable it with ``plugins = ["+prices"]`` and ``pip install 'lich[prices]'``. It
implements ``lich_price_call``: the price of one call from its provider, model
and token usage (cache reads and writes and reasoning included), using the
price data bundled with the ``genai-prices`` package — no network, unless
``[prices] update = true`` turns on its background price updates.

The provider is recognised the way ``genai-prices`` recognises it: by the API
URL the call went to (the provider's ``base_url``, with its kind's default
applied), matched against the public endpoints in the price data — so lich
itself names no provider and knows no URL. A proxy or a compatible server at another URL
is named in ``[prices.providers]``; a model the data lacks (a local or private
model) gets its price in ``[prices.models]``:

.. code-block:: toml

    [prices]
    update = false                          # fetch newer prices in the background

    [prices.providers]
    work-proxy = "openai"                   # configured provider name -> genai-prices id

    [prices.models."qwen2.5-coder:32b"]      # USD per million tokens
    input_mtok = 0.0
    output_mtok = 0.0

    [prices.models.my-finetune]
    input_mtok = 3.0
    output_mtok = 12.0
    cache_read_mtok = 0.3                   # default: input_mtok
    cache_write_mtok = 3.75                 # default: input_mtok

A call nobody can price is *cost unknown* (``None``), never an error and never
0: the events say ``cost_usd: null`` and the run's total is unknown. A model in
``[prices.models]`` is priced from there even if the bundled data knows it.

``genai-prices`` (and its price data) is imported at the first call to price,
not when the plugin loads, so ``lich --help`` and ``lich plugins`` do not pay
for it; loading the plugin without the package installed is a load error
saying what to install.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich.hooks import hookimpl
from lich.settings import at_least, each_value, non_empty, setting, structure_settings

if TYPE_CHECKING:
    from lich.config import LichConfig, ProviderConfig
    from lich.types import Usage

__all__ = [
    "ModelPrice",
    "PriceSettings",
    "lich_check_config",
    "lich_price_call",
    "parse_price_settings",
    "price_of",
]

log = logging.getLogger("lich.prices")

if importlib.util.find_spec("genai_prices") is None:
    # A load error with the fix in it (kept on the plugin's load report, like any other),
    # rather than a plugin that loads and then prices nothing without saying why.
    raise ImportError(
        "the `prices` plugin needs the genai-prices package: pip install 'lich[prices]'"
    )

_PER_MILLION = 1_000_000
_MAX_MISSES = 1024
#: (provider id, API URL, model) the price data does not know, for this process (an
#: update of the data mid-process can only add models a restart then finds).
_misses: set[tuple[str | None, str | None, str]] = set()


@frozen
class ModelPrice:
    """One ``[prices.models.<model>]`` table: US dollars per million tokens."""

    input_mtok: float = setting(check=at_least(0))
    output_mtok: float = setting(check=at_least(0))
    cache_read_mtok: float | None = setting(None, check=at_least(0))
    cache_write_mtok: float | None = setting(None, check=at_least(0))

    def cost(self, usage: Usage) -> float:
        """The price of ``usage``: cached prompt tokens at their own rate (the input
        rate when none is set), the rest of the prompt at the input rate."""
        read = usage.cache_read_tokens
        written = usage.cache_write_tokens
        fresh = max(0, usage.prompt_tokens - read - written)
        read_rate = self.input_mtok if self.cache_read_mtok is None else self.cache_read_mtok
        write_rate = self.input_mtok if self.cache_write_mtok is None else self.cache_write_mtok
        return (fresh * self.input_mtok + read * read_rate + written * write_rate
                + usage.completion_tokens * self.output_mtok) / _PER_MILLION


def _provider_id(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a genai-prices provider id (a string such as \"openai\")")
    non_empty(value)
    return value


@frozen
class PriceSettings:
    """The ``[prices]`` table."""

    update: bool = False
    models: Mapping[str, ModelPrice] = setting(factory=dict)
    providers: Mapping[str, str] = setting(factory=dict, parse=each_value(_provider_id))


def parse_price_settings(raw: Mapping[str, Any] | None) -> PriceSettings:
    """The ``[prices]`` table, checked.

    :raises lich.config.ConfigError: every problem, as ``$.prices...: message``.
    """
    return structure_settings(raw, PriceSettings, "$.prices")


def _genai_usage(usage: Usage) -> Any:
    from genai_prices import Usage as GenaiUsage

    # Both sides count cache tokens inside the prompt and reasoning inside the output.
    return GenaiUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_reasoning_tokens=usage.reasoning_tokens,
    )


def price_of(
    settings: PriceSettings, provider: ProviderConfig | None, model: str, usage: Usage
) -> float | None:
    """The cost of one call in US dollars, or ``None`` when it cannot be priced.

    ``[prices.models]`` first (the answer's model, then the configured one), then
    the bundled data for the provider named in ``[prices.providers]`` or found
    by its API URL. A call without a known provider is not guessed at from the
    model name alone: a local server's ``llama3`` is not Groq's.
    """
    configured = provider.model if provider is not None else ""
    for name in dict.fromkeys(m for m in (model, configured) if m):
        own = settings.models.get(name)
        if own is not None:
            return own.cost(usage)
    if provider is None:
        return None
    provider_id = settings.providers.get(provider.name)
    if provider_id is None and not provider.base_url:
        return None
    from genai_prices import calc_price

    for name in dict.fromkeys(m for m in (model, configured) if m):
        key = (provider_id, None if provider_id is not None else provider.base_url, name)
        if key in _misses:
            continue
        try:
            if provider_id is not None:
                calculation = calc_price(_genai_usage(usage), name, provider_id=provider_id)
            else:
                calculation = calc_price(_genai_usage(usage), name,
                                         provider_api_url=provider.base_url)
        except LookupError:
            # This provider or model is not in the data: try the next name. Remembered, as
            # genai-prices searches every model of the provider again on each miss (the
            # answer's dated model id misses on every call when only the configured one
            # is known).
            if len(_misses) < _MAX_MISSES:
                _misses.add(key)
            continue
        except ValueError as exc:
            # Usage the price data cannot take (e.g. more cache reads than prompt tokens).
            log.debug("cannot price %s on %s: %s", name, provider.name, exc)
            return None
        return float(calculation.total_price)
    return None


class _Updates:
    """``[prices] update = true``: genai-prices' background updater, started once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False

    def ensure(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        from genai_prices import UpdatePrices

        # A daemon thread of genai-prices; until its first fetch lands the bundled data
        # is used, and a failed fetch keeps it (the package logs why).
        UpdatePrices().start(wait=False)


_updates = _Updates()
# The last [prices] table parsed, and what it parsed to: one parse per agent config, not
# per call. Compared by identity, with the table itself kept so its id cannot be reused.
_parsed: tuple[Mapping[str, Any], PriceSettings] | None = None


def _settings(config: LichConfig | None) -> PriceSettings:
    global _parsed
    if config is None:
        return PriceSettings()
    cached = _parsed
    if cached is not None and cached[0] is config.prices:
        return cached[1]
    settings = parse_price_settings(config.prices)
    _parsed = (config.prices, settings)
    return settings


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[prices]``: ``lich config validate`` and every run refuse a bad table."""
    _settings(config)


@hookimpl
def lich_price_call(
    provider: ProviderConfig | None, model: str, usage: Usage, config: LichConfig
) -> float | None:
    """The price of one call (see the module docstring); ``None`` when unknown.

    With ``update = true`` the first call starts genai-prices' background updater
    (not ``lich config validate``, which prices nothing).
    """
    settings = _settings(config)
    if settings.update:
        _updates.ensure()
    return price_of(settings, provider, model, usage)
