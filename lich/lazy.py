"""Lazy package exports (PEP 562): a name is imported from its module on first use.

``import lich`` and ``import lich.gateway`` stay cheap this way: the agent, the
plugin host or the gateway runner load only when a caller touches them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of a package.

    :param namespace: the package's ``globals()`` (its ``__name__`` and
        ``__all__``; each name is stored there once imported, so the next
        lookup is a plain attribute).
    :param exports: export name → the module that defines it.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return list(namespace["__all__"])

    return __getattr__, __dir__
