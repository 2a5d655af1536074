"""Testing kit for plugin authors; the pytest fixtures live in :mod:`lich.testing.plugin`."""

from lich.testing.plugin import *  # noqa: F403
from lich.testing.plugin import __all__ as __all__
