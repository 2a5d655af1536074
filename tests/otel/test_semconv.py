"""Every attribute lich puts on a span, checked against the attribute registry of the
semantic-conventions release lich pins (``semconv_registry.json``, generated from
that release's ``opentelemetry-semantic-conventions`` package by
``make_semconv_registry.py``): registered and not deprecated, or lich's own
(``lich.``); enum attributes hold a value the registry lists. And what each provider
kind says it is (``gen_ai.provider.name``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lich.config import ProviderConfig
from lich.otel import SEMCONV_VERSION
from lich.otel import _semconv as sc
from lich.providers import ProviderRegistry
from lich.testing import Fail, ScriptedServer

from .conftest import Spans
from .test_spans import scripted_run

REGISTRY = json.loads(Path(__file__).with_name("semconv_registry.json").read_text("utf-8"))
ATTRIBUTES: dict[str, bool] = REGISTRY["attributes"]  # name -> deprecated
ENUMS: dict[str, list[str]] = REGISTRY["enums"]
#: The enum attributes whose values are checked. error.type's registry lists only
#: "_OTHER": its values are the instrumentation's own (lich's error codes).
CHECKED_ENUMS = {sc.PROVIDER_NAME, sc.OPERATION_NAME}


def problems_of(name: str, value: Any) -> list[str]:
    if name.startswith("lich."):
        return []
    if name not in ATTRIBUTES:
        return [f"{name}: not in the registry of semantic-conventions {SEMCONV_VERSION}"]
    if ATTRIBUTES[name]:
        return [f"{name}: deprecated in semantic-conventions {SEMCONV_VERSION}"]
    # Open enums (gen_ai.provider.name) allow a custom value; lich's builtin kinds and
    # these runs use only listed ones, so any other value here is a mistake.
    if name in CHECKED_ENUMS and value not in ENUMS[name]:
        return [f"{name}: {value!r} is not one of the registry's values {ENUMS[name]}"]
    return []


def test_the_registry_data_is_the_pinned_release() -> None:
    assert REGISTRY["semconv_version"] == SEMCONV_VERSION
    assert sc.SCHEMA_URL.endswith(SEMCONV_VERSION)


def test_every_name_lich_spells_is_registered_or_its_own() -> None:
    names = {value for key, value in vars(sc).items()
             if key.isupper() and isinstance(value, str)
             and re.fullmatch(r"[a-z_]+(\.[a-z_]+)+\.?", value)
             and not value.startswith(("http", sc.LICH_APPROVAL_PREFIX))
             and not key.startswith(("OP_", "SPAN_", "EVENT_", "TOOL_TYPE_"))}
    assert {sc.PROVIDER_NAME, sc.SERVER_ADDRESS, sc.RESPONSE_ID, sc.TOOL_DESCRIPTION} <= names
    assert [p for n in sorted(names) for p in problems_of(n, None)
            if "not one of" not in p] == []


@pytest.mark.parametrize("capture", [False, True])
async def test_every_attribute_of_every_span_follows_the_registry(
    tmp_path: Path, lich_scripted_server: Callable[..., ScriptedServer], spans: Spans,
    capture: bool,
) -> None:
    await scripted_run(tmp_path, lich_scripted_server, spans, {"capture_content": capture})
    found: list[str] = []
    seen: set[str] = set()
    for span in spans.all:
        items = list((span.attributes or {}).items())
        for event in span.events:
            items += list((event.attributes or {}).items())
        for name, value in items:
            seen.add(name)
            found += [f"{span.name}: {p}" for p in problems_of(name, value)]
    assert found == []
    assert {sc.PROVIDER_NAME, sc.SERVER_ADDRESS, sc.SERVER_PORT, sc.RESPONSE_ID,
            sc.CONVERSATION_ID, sc.TOOL_DESCRIPTION, sc.OPERATION_NAME} <= seen


async def test_a_failed_run_follows_the_registry(
    tmp_path: Path, lich_agent_factory: Any, spans: Spans,
) -> None:
    failing = lich_agent_factory([Fail(500, {"error": "boom"})],
                                 objects=[("otel", spans.plugin())])
    with pytest.raises(Exception, match=r"boom|500"):
        await failing.run("fail")
    found = [f"{span.name}: {p}" for span in spans.all
             for name, value in (span.attributes or {}).items()
             for p in problems_of(name, value)]
    assert found == []


def identity_of(kind: str, base_url: str | None = None) -> str:
    import lich_providers.anthropic as anthropic
    import lich_providers.ollama as ollama
    import lich_providers.openai_compat as openai_compat

    registry = ProviderRegistry()
    for module in (anthropic, ollama, openai_compat):
        module.lich_register_providers(registry)
    return registry.identity(ProviderConfig(kind=kind, name="p", model="m", base_url=base_url))


@pytest.mark.parametrize(("kind", "base_url", "identity"), [
    ("anthropic", None, "anthropic"),
    ("ollama", "http://127.0.0.1:11434", "ollama"),
    ("openai_compat", None, "openai"),  # the kind's default endpoint: api.openai.com
    ("openai_compat", "https://api.groq.com/openai/v1", "groq"),
    ("openai_compat", "https://api.mistral.ai/v1", "mistral_ai"),
    ("openai_compat", "https://my-team.openai.azure.com/openai", "azure.ai.openai"),
    ("openai_compat", "http://127.0.0.1:8080/v1", "openai"),  # a local server: the API's
])
def test_each_builtin_kind_declares_who_it_talks_to(kind: str, base_url: str | None,
                                                    identity: str) -> None:
    assert identity_of(kind, base_url) == identity
    if identity != "ollama":  # not in the conventions' list: a custom value, as allowed
        assert identity in ENUMS[sc.PROVIDER_NAME]


def test_a_kind_that_declares_nothing_or_fails_to_is_named_by_its_kind() -> None:
    def broken(config: ProviderConfig) -> str:
        raise RuntimeError("a plugin's bug")

    registry = ProviderRegistry()
    registry.register("plain", lambda c: None)  # type: ignore[arg-type,return-value]
    registry.register("buggy", lambda c: None, identity=broken)  # type: ignore[arg-type,return-value]
    registry.register("named", lambda c: None, identity="example.ai")  # type: ignore[arg-type,return-value]
    config = ProviderConfig(name="p", model="m")
    assert registry.identity(attrs_evolve(config, "plain")) == "plain"
    assert registry.identity(attrs_evolve(config, "buggy")) == "buggy"
    assert registry.identity(attrs_evolve(config, "named")) == "example.ai"
    assert registry.identity(attrs_evolve(config, "missing")) == ""
    with pytest.raises(TypeError):
        registry.register("odd", lambda c: None, identity=42)  # type: ignore[arg-type,return-value]


def attrs_evolve(config: ProviderConfig, kind: str) -> ProviderConfig:
    import attrs

    return attrs.evolve(config, kind=kind)
