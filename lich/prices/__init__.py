"""The builtin ``prices`` plugin: what each model call cost, from ``genai-prices``.

Enable it with ``plugins = ["+prices"]`` and ``pip install 'lich-agent[prices]'``. It
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
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich.hooks import hookimpl
from lich.settings import at_least, each_value, non_empty, setting, structure_settings

if TYPE_CHECKING:
    from lich.config import LichConfig, ProviderConfig
    from lich.settings import ConfigTables
    from lich.types import Usage

__all__ = [
    "ModelPrice",
    "PriceSettings",
    "lich_check_config",
    "lich_price_call",
    "lich_register_config_tables",
    "parse_price_settings",
    "price_of",
]

log = logging.getLogger("lich.prices")

if importlib.util.find_spec("genai_prices") is None:
    # A load error with the fix in it (kept on the plugin's load report, like any other),
    # rather than a plugin that loads and then prices nothing without saying why.
    raise ImportError(
        "the `prices` plugin needs the genai-prices package: pip install 'lich-agent[prices]'"
    )

_PER_MILLION = 1_000_000


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


#: The usage fields lich reports, in genai-prices' names; every call gives all five.
_REPORTED = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
             "output_reasoning_tokens")
_MAX_ENTRIES = 4096


class _Plan:
    """One genai-prices ``ModelPrice`` made ready for lich's five usage fields.

    ``ModelPrice.calc_price`` re-derives, on every call, which units the price has,
    checks them, and infers each priced usage field lich does not report (web
    searches, audio, ...) from the ones it does — ~95 % of its cost, and the same
    answer every time for the same price. Done here once per price; per call only the
    leaf counts (a price's unit minus its more specific priced units, genai-prices'
    decomposition) are subtracted and each unit priced with genai-prices' own
    ``calc_unit_price`` (tiers, Decimal), summed in the same order from ``Decimal(0)``:
    the same Decimal as ``calc_price``, which ``tests/core/test_prices.py`` checks over
    every model of the bundled data.
    """

    def __init__(self, model_price: Any) -> None:
        import warnings

        from genai_prices.decompose import is_descendant_or_self
        from genai_prices.types import TieredPrices, _collect_resolved_model_prices
        from genai_prices.units import _get_registry
        from genai_prices.validation import validate_priced_units

        registry = _get_registry()
        with warnings.catch_warnings():
            # A price key genai-prices warns about is one this plan would not price like
            # calc_price does (which warns on each call): such a price gets no plan.
            warnings.simplefilter("error")
            resolved = _collect_resolved_model_prices(model_price, registry)
        validate_priced_units(tuple(unit for unit, _ in resolved), registry)
        self.prices = resolved
        by_key = {unit.usage_key: unit for unit, _ in resolved if unit.usage_key != "requests"}
        ordered = sorted(by_key.values(), key=lambda unit: (-len(unit.dimensions), unit.usage_key))
        self.order = tuple(
            (unit.usage_key, tuple(other.usage_key for other in ordered
                                   if other is not unit and is_descendant_or_self(unit, other)))
            for unit in ordered
        )
        self.requests = any(unit.usage_key == "requests" for unit, _ in resolved)
        self.tiered = any(isinstance(price, TieredPrices) for _, price in resolved)
        #: Priced fields lich does not report: genai-prices infers them from which of the
        #: reported ones are non-zero (0, or an error when they cannot be inferred).
        self.inferred = tuple(key for key in by_key if key not in _REPORTED)
        self._inferences: dict[tuple[bool, ...], dict[str, int] | None] = {}

    def _infer(self, values: Mapping[str, int]) -> dict[str, int] | None:
        pattern = tuple(values[key] > 0 for key in _REPORTED)
        try:
            return self._inferences[pattern]
        except KeyError:
            pass
        from genai_prices import Usage as GenaiUsage

        usage = GenaiUsage(**values)
        try:
            inferred: dict[str, int] | None = {key: getattr(usage, key) for key in self.inferred}
        except ValueError:
            inferred = None
        self._inferences[pattern] = inferred
        return inferred

    def total(self, values: Mapping[str, int]) -> Decimal | None:
        """The price of ``values`` (the five reported fields); ``None`` for usage the
        price cannot take (where ``calc_price`` raises ``ValueError``)."""
        from genai_prices.types import calc_unit_price

        counts: dict[str, Any] = dict(values)
        if self.inferred:
            inferred = self._infer(values)
            if inferred is None:
                return None
            counts.update(inferred)
        leaves: dict[str, Any] = {}
        for key, descendants in self.order:
            leaf = counts[key] - sum(leaves[other] for other in descendants)
            if leaf < 0:
                return None
            leaves[key] = leaf
        if self.requests:
            leaves["requests"] = 1
        input_tokens = values["input_tokens"] if self.tiered else 0
        total = Decimal(0)
        for unit, price in self.prices:
            total += calc_unit_price(price, leaves[unit.usage_key], input_tokens, unit.per)
        return total


class _Entries:
    """The bundled data's answer per (provider id, API URL, model), for one data snapshot.

    A found model keeps its ``ModelInfo`` (whose prices are chosen per call, so start
    dates and time-of-day prices still apply); a miss is kept as ``None``. A new snapshot
    (``[prices] update = true`` landing newer data) starts afresh.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: object = None
        self._entries: dict[tuple[str | None, str | None, str], tuple[Any, Any] | None] = {}
        self._plans: dict[int, tuple[Any, _Plan | None]] = {}

    def lookup(
        self, provider_id: str | None, url: str | None, model: str
    ) -> tuple[Any, Any, Any] | None:
        """(snapshot, provider, model info), or ``None`` when the data lacks them."""
        from genai_prices.data_snapshot import get_snapshot

        snapshot = get_snapshot()
        key = (provider_id, url, model)
        with self._lock:
            if snapshot is not self._snapshot:
                self._snapshot = snapshot
                self._entries = {}
                self._plans = {}
            elif key in self._entries:
                found = self._entries[key]
                return None if found is None else (snapshot, *found)
        try:
            found = snapshot.find_provider_model(model, None, provider_id, url)
        except LookupError:
            found = None
        with self._lock:
            if snapshot is self._snapshot and len(self._entries) < _MAX_ENTRIES:
                self._entries[key] = found
        return None if found is None else (snapshot, *found)

    def plan(self, model_price: Any) -> _Plan | None:
        """The plan of one price object (kept alive with it, so its id stays its own);
        ``None`` when this genai-prices cannot be planned for (then ``calc_price`` is used)."""
        with self._lock:
            cached = self._plans.get(id(model_price))
            if cached is not None and cached[0] is model_price:
                return cached[1]
        try:
            plan: _Plan | None = _Plan(model_price) if _planable(model_price) else None
        except Exception as exc:  # a price (or a genai-prices version) the plan cannot take
            log.debug("pricing %r the slow way: %s", model_price, exc)
            plan = None
        with self._lock:
            if len(self._plans) < _MAX_ENTRIES:
                self._plans[id(model_price)] = (model_price, plan)
        return plan


def _planable(model_price: Any) -> bool:
    from genai_prices.types import ModelPrice as GenaiModelPrice

    return type(model_price) is GenaiModelPrice


_entries = _Entries()


def _genai_price(provider_id: str | None, url: str | None, model: str,
                 usage: Usage) -> Decimal | None:
    """The bundled data's price of one call; raises ``LookupError`` for an unknown model."""
    found = _entries.lookup(provider_id, url, model)
    if found is None:
        raise LookupError(model)
    snapshot, provider_info, model_info = found
    now = datetime.now(tz=UTC)
    values = {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "output_reasoning_tokens": usage.reasoning_tokens,
    }
    plan = None
    if all(type(value) is int and value >= 0 for value in values.values()):
        plan = _entries.plan(model_info.get_prices(now))
    if plan is not None:
        return plan.total(values)
    try:
        calculation = model_info.calc_price(
            _genai_usage(usage), provider_info, genai_request_timestamp=now,
            auto_update_timestamp=snapshot.timestamp if snapshot.from_auto_update else None)
    except ValueError as exc:
        log.debug("cannot price %s: %s", model, exc)
        return None
    return calculation.total_price  # type: ignore[no-any-return]


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
    url = None if provider_id is not None else provider.base_url
    for name in dict.fromkeys(m for m in (model, configured) if m):
        try:
            total = _genai_price(provider_id, url, name, usage)
        except LookupError:
            # This provider or model is not in the data (remembered per snapshot, as
            # genai-prices searches every model of the provider again on each miss):
            # try the next name.
            continue
        return None if total is None else float(total)
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
    if cached is not None and cached[0] is config.table("prices"):
        return cached[1]
    settings = parse_price_settings(config.table("prices"))
    _parsed = (config.table("prices"), settings)
    return settings



@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[prices]``: the price list's updates and overrides."""
    tables.claim("prices", PriceSettings, parse=lambda raw, path: parse_price_settings(raw),
                 help="model prices: updates and your own per-model prices")


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
