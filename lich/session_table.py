"""The ``[session_store]`` table of lich's own store, beside the store (:mod:`lich.sessions`).

``[session_store]`` is the table whose ``kind`` picks the store. The core claims it
for its JSONL store (``kind = "jsonl"``, the default), exactly as a store plugin
claims it for its own kind (``postgres``, answering ``lich_make_session_store``); a
kind no loaded plugin claims is a configuration error naming the claimed kinds.

A module of its own, and a light one: the plugin host claims the table whenever it
checks a config, and must not import the store (and its serialisation) to do so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

__all__ = ["DEFAULT_STORE_KIND", "JsonlStoreSettings", "parse_jsonl_table"]

DEFAULT_STORE_KIND = "jsonl"
"""The ``[session_store] kind`` of lich's own store (and of no table at all)."""


@frozen
class JsonlStoreSettings:
    """``[session_store]`` for the JSONL store: no settings (its directory is
    ``session_dir``, a core key)."""


def parse_jsonl_table(raw: Mapping[str, Any], path: str = "$.session_store") -> JsonlStoreSettings:
    """Check ``[session_store]`` for the JSONL store: ``kind`` and nothing else.

    :raises lich.settings.ConfigError: one line per other key.
    """
    from lich.settings import ConfigError

    extra = sorted(str(k) for k in raw if k != "kind")
    if extra:
        raise ConfigError([f"{path}.{k}: the {DEFAULT_STORE_KIND} store takes no settings "
                           "(its directory is session_dir)" for k in extra])
    return JsonlStoreSettings()
