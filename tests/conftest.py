"""What every test shares: the terminal it runs in (see ``lich_env``), the Hypothesis
profiles, and a bytecode cache that survives ``PYTHONDONTWRITEBYTECODE``."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from lich_env import SUITE_TRUST, TERMINAL, TERMINAL_OVERRIDES


def _cache_bytecode_outside_the_checkout() -> None:
    """With ``PYTHONDONTWRITEBYTECODE`` set, every xdist worker (and every ``lich``
    subprocess) would rewrite the asserts of and compile the ~190 test modules and lich's
    own from source: about 7 of the 9 seconds a worker spends collecting. Cache the
    bytecode under the user's cache directory instead, so the checkout stays as clean as
    the setting meant it to (``PYTHONPYCACHEPREFIX`` keeps a prefix already chosen)."""
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None:
        return
    from platformdirs import user_cache_dir

    prefix = Path(user_cache_dir("lich")) / "test-pycache"
    try:
        prefix.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return  # a read-only home: compile as before
    sys.pycache_prefix = str(prefix)
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


_cache_bytecode_outside_the_checkout()

# Hypothesis: no test asserts a time, so no example has a deadline, and a slow data
# generator on a loaded machine is no failure ("too_slow"). `ci` (what .ci/run selects,
# HYPOTHESIS_PROFILE=ci) also derandomizes: the same examples on every run, so a red CI
# run is reproducible and three runs in a row test the same thing; `dev` keeps exploring
# new examples and the local example database.
settings.register_profile("dev", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, derandomize=True, database=None,
                          print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True, scope="session")
def _pinned_terminal() -> Iterator[None]:
    """The same terminal size and type on every machine, for the whole session: in
    process (click and rich read the environment) and in every subprocess, which
    inherits it. Without it the output of ``--help`` or a table depends on the width
    of the terminal pytest was started from."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**TERMINAL, **SUITE_TRUST}.items():
            patch.setenv(name, value)
        for name in TERMINAL_OVERRIDES:
            patch.delenv(name, raising=False)
        yield


@pytest.fixture
def refused_port() -> Iterator[Callable[[], int]]:
    """``refused_port()`` → a loopback port where connections are refused until the test
    ends (:func:`lich.testing.ports.refused_port`: bound, never listening, so no other
    process can start listening there meanwhile)."""
    from lich.testing.ports import refused_port as hold

    with contextlib.ExitStack() as held:
        yield lambda: held.enter_context(hold())


#: Markers of the modules that take longest (tests/cluster's processes, the benchmarks).
HEAVY_MARKERS = ("system", "slow")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with a heavy test first, each module's tests kept together and in
    order: xdist (``--dist loadfile``) hands modules out in this order, so the longest
    start at once instead of being the last ones a worker takes, which would leave the
    other workers idle at the end (longest-first keeps the wall time near total / N)."""
    rank: dict[Path, int] = {}
    for item in items:
        for weight, name in enumerate(HEAVY_MARKERS):
            if item.get_closest_marker(name):
                rank[item.path] = min(rank.get(item.path, weight), weight)
    # Stable: the order within each module, and of the modules within a rank, is kept.
    items.sort(key=lambda item: rank.get(item.path, len(HEAVY_MARKERS)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most four. Each worker imports and collects
    the whole suite and starts its own brokers, databases, model servers and child
    processes: four keep that bounded on a machine with many cores."""
    return max(1, min(os.cpu_count() or 1, 4))
