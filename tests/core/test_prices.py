"""The builtin ``prices`` plugin: golden costs from genai-prices' bundled data, unknown
models, the user's price table, its settings, and how it loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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
    assert "pip install 'lich[prices]'" in (report.error_message or "")


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
