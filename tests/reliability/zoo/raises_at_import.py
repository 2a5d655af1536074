"""Raises while its module is executed."""

raise RuntimeError("the zoo plugin raises_at_import exploded at import")
