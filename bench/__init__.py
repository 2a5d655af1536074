"""lich's benchmarks: ``python -m bench`` (see ``docs/performance.md``).

Not part of the distribution and not run in CI: the smoke test
(``tests/bench``) runs each benchmark at a tiny size to keep them working.
"""
