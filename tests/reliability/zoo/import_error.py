"""Imports a module that does not exist."""

import lich_zoo_no_such_module  # noqa: F401
