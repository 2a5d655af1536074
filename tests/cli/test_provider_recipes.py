"""docs/providers.md's recipes are whole, valid configs that follow the key rule."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

DOC = (Path(__file__).resolve().parents[2] / "docs" / "providers.md").read_text("utf-8")
RECIPES = re.findall(r"```toml\n(.*?)```", DOC.split("## Recipes", 1)[1].split("\n## ", 1)[0],
                     flags=re.S)
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def test_every_server_has_a_recipe() -> None:
    names = {tomllib.loads(text)["providers"][0]["name"] for text in RECIPES}

    assert names == {"openrouter", "groq", "together", "lmstudio", "vllm", "llamacpp",
                     "ollama"}


@pytest.mark.parametrize("text", RECIPES, ids=lambda t: tomllib.loads(t)["providers"][0]["name"])
def test_a_recipe_validates_and_names_its_key(
    text: str, work: Path, lich: Any, tmp_path: Path
) -> None:
    (provider,) = tomllib.loads(text)["providers"]
    config = tmp_path / "recipe.toml"
    config.write_text(text, encoding="utf-8")

    result = lich("config", "validate", "--config", str(config))

    assert result.exit_code == 0, result.output
    assert result.stdout == f"ok: {config}\n"
    if provider["kind"] == "ollama":
        assert "base_url" not in provider  # the kind's default
        return
    host = urlsplit(provider["base_url"]).hostname
    assert provider["kind"] == "openai_compat"
    # The key rule: a hosted server's key variable must be named, a local one needs none.
    assert ("api_key_env" in provider) == (host not in LOCAL_HOSTS), provider
