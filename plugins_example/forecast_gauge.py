"""Answers the ``forecast`` plugin's own hook (``lich_forecast_sources``): a hook
specified by a plugin, implemented by another, exactly as a builtin's is.

Listed before or after ``forecast.py``, it loads either way; without
``forecast.py`` it fails to load, naming the hook it implements.
"""

from __future__ import annotations


def lich_forecast_sources(city: str, units: str) -> str:
    """The rain gauge's line: a fixed reading, in ``units``."""
    reading = "12 mm" if units == "metric" else "0.47 in"
    return f"rain gauge in {city}: {reading} of rain"
