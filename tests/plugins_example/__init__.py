"""Tests of the example plugins in ``plugins_example/``."""
