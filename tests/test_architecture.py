"""The layering rule's contracts (``[tool.importlinter]`` in pyproject.toml) cover
every module: ``lint-imports`` in .ci/run checks what they say, these tests check
that nothing escapes them.

A contract names the core's modules one by one, so a module added to ``lich/``
without being placed would be checked by no rule at all; each must be a core
module or belong to a declared subsystem (docs/architecture.md).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["name"]: c for c in config["tool"]["importlinter"]["contracts"]}


def _core_contract() -> dict[str, Any]:
    return _contracts()["The core imports no subsystem, builtin tool or provider at run time"]


def _subsystems() -> set[str]:
    name = "Subsystems are independent but for their declared public dependencies"
    return set(_contracts()[name]["modules"])


def _lich_modules() -> set[str]:
    """The top-level modules and packages of ``lich`` (data folders left out)."""
    package = ROOT / "lich"
    names = {f"lich.{p.stem}" for p in package.glob("*.py")
             if p.stem not in ("__init__", "__main__")}
    names |= {f"lich.{p.parent.name}" for p in package.glob("*/__init__.py")}
    return names


def test_every_module_of_lich_is_core_or_a_declared_subsystem() -> None:
    core = set(_core_contract()["source_modules"])
    unplaced = _lich_modules() - core - _subsystems()
    assert not unplaced, (
        f"{sorted(unplaced)}: add each to the core's source_modules or to the subsystems "
        "in pyproject.toml's [tool.importlinter] (and docs/architecture.md)")
    assert not core & _subsystems(), "a module cannot be core and a subsystem at once"


def test_the_core_is_forbidden_every_subsystem() -> None:
    assert set(_core_contract()["forbidden_modules"]) == _subsystems()


def test_the_contracts_name_only_modules_that_exist() -> None:
    existing = _lich_modules() | {"lich_builtin_tools", "lich_providers"}
    named = set(_core_contract()["source_modules"]) | _subsystems()
    assert named <= existing, f"no such module: {sorted(named - existing)}"
