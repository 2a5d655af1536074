"""Write ``semconv_registry.json``: the attribute registry of the semantic conventions
lich pins (``lich.otel.SEMCONV_VERSION``), read from the ``opentelemetry-semantic-
conventions`` wheel generated from that revision, not typed by hand.

The installed package follows a later revision (the SDK pins it), so the wheel of
the pinned one is read as a file::

    pip download --no-deps opentelemetry-semantic-conventions==0.63b0 -d /tmp/semconv
    python tests/otel/make_semconv_registry.py \
        /tmp/semconv/opentelemetry_semantic_conventions-0.63b0-py3-none-any.whl

(0.63b0 is generated from semantic-conventions 1.41.1.) Only the namespaces lich's
spans use are kept: ``gen_ai``, ``server`` and ``error``; every attribute, whether
it is deprecated, and the values each enum attribute lists.
"""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

NAMESPACES = ("gen_ai", "server", "error")
OUT = Path(__file__).with_name("semconv_registry.json")


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).upper()


def read(module: str) -> tuple[dict[str, bool], dict[str, list[str]]]:
    """Each attribute of one generated module (name -> deprecated) and its enums."""
    tree = ast.parse(module)
    constants: dict[str, str] = {}
    attributes: dict[str, bool] = {}
    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            doc = body[i + 1] if i + 1 < len(body) else None
            text = doc.value.value if isinstance(doc, ast.Expr) and isinstance(
                doc.value, ast.Constant) else ""
            constants[node.target.id] = node.value.value
            # "Deprecated: Replaced by …" is a deprecated attribute; "Deprecated in favor of
            # stable …" only a constant of the incubating module the stable one replaces.
            attributes[node.value.value] = str(text).strip().startswith("Deprecated:")
    enums: dict[str, list[str]] = {}
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Values"):
            attribute = constants.get(_snake(node.name.removesuffix("Values")))
            if attribute is None:
                continue
            enums[attribute] = [str(item.value.value) for item in node.body
                                if isinstance(item, ast.Assign)
                                and isinstance(item.value, ast.Constant)]
    return attributes, enums


def main(wheel: str) -> None:
    attributes: dict[str, bool] = {}
    enums: dict[str, list[str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        version = re.search(r'__version__ = "([^"]+)"', archive.read(
            "opentelemetry/semconv/version/__init__.py").decode())
        schemas = re.findall(r"schemas/(\d+\.\d+\.\d+)", archive.read(
            "opentelemetry/semconv/schemas.py").decode())
        for name in archive.namelist():
            match = re.fullmatch(r"opentelemetry/semconv/(?:_incubating/)?attributes/"
                                 r"(\w+)_attributes\.py", name)
            if match is None or match.group(1) not in NAMESPACES:
                continue
            found, values = read(archive.read(name).decode())
            for attribute, deprecated in found.items():
                attributes[attribute] = attributes.get(attribute, True) and deprecated
            enums.update(values)
    data = {
        "semconv_version": max(schemas, key=lambda v: tuple(map(int, v.split(".")))),
        "package": f"opentelemetry-semantic-conventions=={version.group(1) if version else '?'}",
        "attributes": dict(sorted(attributes.items())),
        "enums": dict(sorted(enums.items())),
    }
    OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])
