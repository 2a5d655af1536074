"""The builtin ``prices`` plugin: golden costs from genai-prices' bundled data, unknown
models, the user's price table, its settings, and how it loads."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lich
from lich.config import ProviderConfig
from lich.plugins import PluginHost
from lich.prices import PriceSettings, parse_price_settings, price_of
from lich.testing import Reply, ScriptedChat, make_test_config
from lich.types import Usage

OPENAI = ProviderConfig(kind="openai_compat", name="openai", model="gpt-4o",
                        base_url="https://api.openai.com/v1")
ANTHROPIC = ProviderConfig(kind="anthropic", name="claude", model="claude-sonnet-4-0",
                           base_url="https://api.anthropic.com")
LOCAL = ProviderConfig(kind="openai_compat", name="local", model="qwen2.5-coder:32b",
                       base_url="http://127.0.0.1:8080/v1")
NONE = PriceSettings()


# Golden values, worked out by hand from the providers' published prices (USD per
# million tokens), which the bundled data of genai-prices 0.2.3 carries.
@pytest.mark.parametrize(
    ("provider", "model", "usage", "expected"),
    [
        # gpt-4o: $2.50 input, $1.25 cached input, $10 output.
        # 6,000 fresh + 4,000 cached prompt tokens, 2,000 out:
        # 0.015 + 0.005 + 0.020 = $0.04
        (OPENAI, "gpt-4o-2024-08-06", Usage(10_000, 2_000, 12_000, cache_read_tokens=4_000),
         0.04),
        # claude-sonnet-4: $3 input, $0.30 cache read, $3.75 cache write, $15 output.
        # 5,000 fresh + 3,000 read + 2,000 written, 1,000 out:
        # 0.015 + 0.0009 + 0.0075 + 0.015 = $0.0384
        (ANTHROPIC, "claude-sonnet-4-20250514",
         Usage(10_000, 1_000, 11_000, cache_read_tokens=3_000, cache_write_tokens=2_000),
         0.0384),
        # o3-mini: $1.10 input, $4.40 output; reasoning tokens are output tokens.
        # 1,000 in, 500 out of which 400 reasoning: 0.0011 + 0.0022 = $0.0033
        (OPENAI, "o3-mini", Usage(1_000, 500, 1_500, reasoning_tokens=400), 0.0033),
    ],
)
def test_golden_costs_from_the_bundled_data(
    provider: ProviderConfig, model: str, usage: Usage, expected: float
) -> None:
    assert price_of(NONE, provider, model, usage) == pytest.approx(expected, rel=1e-9)


def test_the_configured_model_is_tried_when_the_answer_names_an_unknown_one() -> None:
    cost = price_of(NONE, OPENAI, "gpt-4o-custom-deployment-7", Usage(1_000_000, 0, 1_000_000))
    assert cost == pytest.approx(2.5)


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        (LOCAL, "qwen2.5-coder:32b"),  # a URL the data does not know: not guessed at
        (ProviderConfig(kind="openai_compat", name="openai", model="no-such-model-xyz",
                        base_url="https://api.openai.com/v1"), "no-such-model-xyz"),
        (None, "gpt-4o"),  # no configured provider: the model name alone is not enough
        (ProviderConfig(kind="x", name="x", model="gpt-4o"), "gpt-4o"),  # no URL at all
    ],
)
def test_an_unknown_model_is_cost_unknown(provider: ProviderConfig | None, model: str) -> None:
    assert price_of(NONE, provider, model, Usage(100, 10, 110)) is None


def test_usage_the_data_cannot_take_is_cost_unknown() -> None:
    # More cache reads than prompt tokens: a broken report, not a price.
    assert price_of(NONE, OPENAI, "gpt-4o", Usage(10, 1, 11, cache_read_tokens=50)) is None


def test_the_user_price_table() -> None:
    settings = parse_price_settings({"models": {
        "qwen2.5-coder:32b": {"input_mtok": 0.2, "output_mtok": 0.6},
        "gpt-4o": {"input_mtok": 1.0, "output_mtok": 2.0, "cache_read_mtok": 0.1,
                   "cache_write_mtok": 1.5},
    }})
    usage = Usage(1_000_000, 500_000, 1_500_000)
    # 1M in at $0.20, 0.5M out at $0.60 per million.
    assert price_of(settings, LOCAL, "qwen2.5-coder:32b", usage) == pytest.approx(0.5)
    # The user's table wins over the bundled data; cached tokens at their own rates.
    cached = Usage(1_000_000, 0, 1_000_000, cache_read_tokens=400_000,
                   cache_write_tokens=100_000)
    assert price_of(settings, OPENAI, "gpt-4o", cached) == pytest.approx(0.5 + 0.04 + 0.15)
    # Without cache rates the cached tokens cost the input rate; no provider needed.
    assert price_of(settings, None, "qwen2.5-coder:32b", cached) == pytest.approx(0.2)


def test_a_provider_named_in_the_settings() -> None:
    settings = parse_price_settings({"providers": {"local": "openai"}})
    proxy = ProviderConfig(kind="openai_compat", name="local", model="gpt-4o-mini",
                           base_url="http://127.0.0.1:8080/v1")
    # gpt-4o-mini at OpenAI's prices: $0.15 in, $0.60 out per million.
    assert price_of(settings, proxy, "gpt-4o-mini", Usage(1_000_000, 100_000, 1_100_000)) == (
        pytest.approx(0.21))
    wrong = parse_price_settings({"providers": {"local": "no-such-provider"}})
    assert price_of(wrong, proxy, "gpt-4o-mini", Usage(1, 1, 2)) is None


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"models": {"m": {"input_mtok": -1, "output_mtok": 1}}}, "$.prices.models.m.input_mtok"),
        ({"models": {"m": {"input_mtok": 1}}}, "$.prices.models.m.output_mtok"),
        ({"models": {"m": {"input_mtok": 1, "output_mtok": 1, "typo_mtok": 1}}},
         "$.prices.models.m"),
        ({"providers": {"p": 3}}, "$.prices.providers.p"),
        ({"update": "yes"}, "$.prices.update"),
        ({"surprise": 1}, "$.prices"),
    ],
)
def test_bad_price_settings_are_config_errors(
    tmp_path: Path, table: dict[str, Any], problem: str
) -> None:
    config = make_test_config(tmp_path, plugins=("prices",), prices=table)
    with pytest.raises(lich.ConfigError) as info:
        lich.Agent(config, chat=ScriptedChat(["hi"]))
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


async def test_the_plugin_prices_a_run(tmp_path: Path) -> None:
    class Kind:
        def lich_register_providers(self, registry: Any) -> None:
            registry.register("openai_compat", lambda cfg: None, defaults=lich.ProviderDefaults(
                base_url="https://api.openai.com/v1"))

    config = make_test_config(tmp_path, plugins=("prices",), providers=(
        ProviderConfig(kind="openai_compat", name="scripted", model="gpt-4o"),))
    chat = ScriptedChat([Reply("hi", usage=Usage(10_000, 2_000, 12_000,
                                                 cache_read_tokens=4_000))])
    agent = lich.Agent(config, plugins=[("kind", Kind())], chat=chat)
    # The scripted chat names its own model: the configured gpt-4o prices it.
    result = await agent.run("go")
    assert result.cost_usd == pytest.approx(0.04)


def test_loading_the_plugin_does_not_import_genai_prices(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from lich.plugins import PluginHost\n"
        "host = PluginHost()\n"
        "host.load(['prices'])\n"
        "print(json.dumps([[r.status for r in host.reports], 'genai_prices' in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [["loaded"], False]


def test_without_genai_prices_the_plugin_is_a_load_error_saying_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "lich.prices", raising=False)
    host = PluginHost()
    host.load(["prices"])
    (report,) = host.reports
    assert (report.status, report.phase) == ("failed", "import")
    assert "pip install 'lich-agent[prices]'" in (report.error_message or "")


@pytest.mark.parametrize("update", [False, True])
async def test_price_updates_only_when_turned_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, update: bool
) -> None:
    import genai_prices

    import lich.prices

    started: list[Any] = []
    monkeypatch.setattr(lich.prices, "_updates", lich.prices._Updates())
    monkeypatch.setattr(genai_prices.UpdatePrices, "start",
                        lambda self, *, wait=False: started.append(wait))
    config = make_test_config(tmp_path, plugins=("prices",), prices={"update": update})
    agent = lich.Agent(config, chat=ScriptedChat(["one", "two"]))
    assert started == []  # checking the config fetches nothing
    await agent.run("a")
    await agent.run("b")
    # Once per process, in the background (the run does not wait for the network).
    assert started == ([False] if update else [])


# --- the cached path prices exactly as genai-prices' calc_price ---------------------

def _bundled_models() -> list[tuple[str, str]]:
    from genai_prices.data_snapshot import get_snapshot

    return [(provider.id, model.id) for provider in get_snapshot().providers
            for model in provider.models]


def _reference(provider_id: str, model: str, usage: Usage, when: Any = None) -> float | None:
    """What calc_price itself says (None where it raises, as price_of must then say)."""
    from genai_prices import Usage as GenaiUsage
    from genai_prices import calc_price

    genai = GenaiUsage(input_tokens=usage.prompt_tokens, output_tokens=usage.completion_tokens,
                       cache_read_tokens=usage.cache_read_tokens,
                       cache_write_tokens=usage.cache_write_tokens,
                       output_reasoning_tokens=usage.reasoning_tokens)
    try:
        return float(calc_price(genai, model, provider_id=provider_id,
                                genai_request_timestamp=when).total_price)
    except (ValueError, LookupError):  # usage it cannot take; a model id it cannot find
        return None


_counts = st.integers(min_value=0, max_value=3_000_000)


@st.composite
def _usages(draw: st.DrawFn) -> Usage:
    # Mostly consistent breakdowns, sometimes not (more cache than prompt), and tier
    # thresholds (200k, 128k, ...) crossed by the prompt range.
    prompt = draw(_counts)
    completion = draw(_counts)
    read = draw(st.integers(0, prompt) | _counts)
    written = draw(st.integers(0, max(0, prompt - read)) | st.just(0))
    reasoning = draw(st.integers(0, completion) | st.just(0))
    return Usage(prompt, completion, prompt + completion, cache_read_tokens=read,
                 cache_write_tokens=written, reasoning_tokens=reasoning)


@settings(max_examples=300, deadline=None)
@given(model=st.sampled_from(_bundled_models()), usage=_usages())
def test_every_bundled_model_is_priced_exactly_as_calc_price(
    model: tuple[str, str], usage: Usage
) -> None:
    provider_id, model_id = model
    proxy = ProviderConfig(kind="openai_compat", name="proxy", model=model_id,
                           base_url="http://127.0.0.1:9/v1")
    ours = price_of(PriceSettings(providers={"proxy": provider_id}), proxy, model_id, usage)
    assert ours == _reference(provider_id, model_id, usage)


def test_every_bundled_model_once_each() -> None:
    # The property test samples; this walks all of them once, with a cache-heavy usage.
    usage = Usage(250_000, 4_000, 254_000, cache_read_tokens=100_000,
                  cache_write_tokens=20_000, reasoning_tokens=1_000)
    for provider_id, model_id in _bundled_models():
        proxy = ProviderConfig(kind="openai_compat", name="proxy", model=model_id,
                               base_url="http://127.0.0.1:9/v1")
        ours = price_of(PriceSettings(providers={"proxy": provider_id}), proxy, model_id, usage)
        assert ours == _reference(provider_id, model_id, usage), (provider_id, model_id)


def test_a_price_with_a_start_date_applies_from_that_date(monkeypatch: pytest.MonkeyPatch) -> None:
    from genai_prices.data_snapshot import get_snapshot
    from genai_prices.types import StartDateConstraint

    import lich.prices as prices

    dated = [(provider.id, model) for provider in get_snapshot().providers
             for model in provider.models if isinstance(model.prices, list)
             and any(isinstance(p.constraint, StartDateConstraint) for p in model.prices)]
    assert dated, "the bundled data has prices with start dates"
    usage = Usage(300_000, 10_000, 310_000, cache_read_tokens=50_000)
    changed = 0
    for provider_id, model in dated[:40]:
        start = next(p.constraint.start_date for p in model.prices
                     if isinstance(p.constraint, StartDateConstraint))
        proxy = ProviderConfig(kind="openai_compat", name="proxy", model=model.id,
                               base_url="http://127.0.0.1:9/v1")
        answers = []
        for when in (datetime(start.year, start.month, start.day, tzinfo=UTC) - timedelta(days=1),
                     datetime(start.year, start.month, start.day, 12, tzinfo=UTC)):
            monkeypatch.setattr(prices, "datetime", _FixedClock(when))
            ours = price_of(PriceSettings(providers={"proxy": provider_id}), proxy, model.id,
                            usage)
            assert ours == _reference(provider_id, model.id, usage, when), (model.id, when)
            answers.append(ours)
        changed += answers[0] != answers[1]
    assert changed, "some start date changes a price"


class _FixedClock:
    """Stands in for ``datetime`` in lich.prices: ``now`` is one chosen instant."""

    def __init__(self, when: datetime) -> None:
        self._when = when

    def now(self, tz: Any = None) -> datetime:
        return self._when.astimezone(tz)


def test_overrides_win_over_the_cached_entry_and_unknown_stays_unknown() -> None:
    usage = Usage(1_000_000, 0, 1_000_000)
    assert price_of(NONE, OPENAI, "gpt-4o", usage) == pytest.approx(2.5)  # now cached
    own = parse_price_settings({"models": {"gpt-4o": {"input_mtok": 7.0, "output_mtok": 1.0}}})
    assert price_of(own, OPENAI, "gpt-4o", usage) == pytest.approx(7.0)
    unknown = ProviderConfig(kind="openai_compat", name="openai", model="no-such-model-x",
                             base_url="https://api.openai.com/v1")
    for _ in range(3):  # the miss is cached and stays a miss
        assert price_of(NONE, unknown, "no-such-model-x", usage) is None


def test_newer_price_data_replaces_the_cached_entries() -> None:
    # What `update = true` does when a fetch lands: genai-prices swaps in a new snapshot.
    import copy
    from decimal import Decimal

    from genai_prices.data_snapshot import DataSnapshot, get_snapshot, set_custom_snapshot
    from genai_prices.types import ClauseEquals

    usage = Usage(1_000_000, 0, 1_000_000)
    assert price_of(NONE, OPENAI, "gpt-4o", usage) == pytest.approx(2.5)
    providers = copy.deepcopy(get_snapshot().providers)
    openai = next(p for p in providers if p.id == "openai")
    model = next(m for m in openai.models if m.id == "gpt-4o")
    for price in ([model.prices] if not isinstance(model.prices, list)
                  else [c.prices for c in model.prices]):
        price.input_mtok = Decimal("4.75")
    openai.models.append(copy.deepcopy(model))
    openai.models[-1].id = "lich-test-new-model"
    openai.models[-1].match = ClauseEquals(equals="lich-test-new-model")
    new = ProviderConfig(kind="openai_compat", name="openai", model="lich-test-new-model",
                         base_url="https://api.openai.com/v1")
    assert price_of(NONE, new, "lich-test-new-model", usage) is None  # a miss, cached
    set_custom_snapshot(DataSnapshot(providers=providers, from_auto_update=True))
    try:
        assert price_of(NONE, OPENAI, "gpt-4o", usage) == pytest.approx(4.75)
        assert price_of(NONE, new, "lich-test-new-model", usage) == pytest.approx(4.75)
    finally:
        set_custom_snapshot(None)
    assert price_of(NONE, OPENAI, "gpt-4o", usage) == pytest.approx(2.5)
    assert price_of(NONE, new, "lich-test-new-model", usage) is None
