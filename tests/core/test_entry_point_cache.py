"""The entry-point cache (lich.plugins._entry_points): used again while the installed
distributions are unchanged, never once a distribution is installed, removed or edited.

Each test puts a directory of its own on ``sys.path`` holding real ``*.dist-info``
directories (``METADATA`` and ``entry_points.txt``, as pip writes them) and points the
cache at its own ``XDG_CACHE_HOME``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from lich.plugins import _entry_points as ep_index

GROUP = "lich"
HOUR_AGO_NS = time.time_ns() - 3600 * 1_000_000_000


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "site"
    directory.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(directory)])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return directory


def install(site: Path, dist: str, version: str, entry_points: dict[str, str]) -> Path:
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{lines}", encoding="utf-8")
    return info


def settle(site: Path) -> None:
    """Date every file and directory of ``site`` an hour back: a state that old is
    written to the cache (a fresh one is not; see test_a_fresh_state_is_not_cached)."""
    for path in [site, *site.rglob("*")]:
        os.utime(path, ns=(HOUR_AGO_NS, HOUR_AGO_NS))


def cache_files() -> list[Path]:
    where = ep_index.cache_dir()
    assert where is not None
    return sorted(where.glob("entry-points-*.json")) if where.is_dir() else []


def no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(group: str) -> dict[str, ep_index.EntryPointRecord]:
        raise AssertionError("scanned the metadata; the cache should have answered")

    monkeypatch.setattr(ep_index, "scan", fail)


def test_an_unchanged_installation_is_read_from_the_cache(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)

    first = ep_index.lookup(GROUP)
    assert len(cache_files()) == 1
    no_scan(monkeypatch)
    again = ep_index.lookup(GROUP)

    record = again["cache_demo"]
    assert (record.value, record.distribution, record.version) == (
        "lich_cache_demo.plugin", "lich_cache_demo", "1.2.0")
    assert {n: (r.value, r.distribution, r.version) for n, r in again.items()} == {
        n: (r.value, r.distribution, r.version) for n, r in first.items()}


def test_the_cache_agrees_with_importlib_metadata(site: Path) -> None:
    import importlib.metadata

    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    ep_index.lookup(GROUP)  # written
    cached = ep_index.lookup(GROUP)  # read back

    expected = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=GROUP)}
    assert {name: r.value for name, r in cached.items()} == expected


def test_a_distribution_installed_later_is_found(site: Path) -> None:
    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    assert "late_demo" not in ep_index.lookup(GROUP)

    install(site, "lich_late_demo", "0.1.0", {"late_demo": "lich_late_demo:plugin"})

    found = ep_index.lookup(GROUP)
    assert found["late_demo"].value == "lich_late_demo:plugin"
    assert "cache_demo" in found


def test_a_distribution_installed_in_the_same_tick_is_no_cache_hit(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing of *.dist-info names is part of the state, so a new one counts
    however coarse the directory's modification time is."""
    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    ep_index.lookup(GROUP)
    scans: list[str] = []
    real = ep_index.scan

    def counted(group: str) -> dict[str, ep_index.EntryPointRecord]:
        scans.append(group)
        return real(group)

    monkeypatch.setattr(ep_index, "scan", counted)
    ep_index.lookup(GROUP)
    assert scans == []  # unchanged: the cache answered

    install(site, "lich_late_demo", "0.1.0", {"late_demo": "lich_late_demo:plugin"})
    settle(site)  # the directory's time as it was: only the listing differs
    ep_index.lookup(GROUP)

    # (What the scan then finds is importlib.metadata's business: in this process it
    # keeps a listing per directory time of its own, which a new process does not have.)
    assert scans == [GROUP]


def test_a_removed_distribution_is_gone(site: Path) -> None:
    import shutil

    info = install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    assert "cache_demo" in ep_index.lookup(GROUP)
    assert "cache_demo" in ep_index.lookup(GROUP)  # from the cache

    shutil.rmtree(info)

    assert "cache_demo" not in ep_index.lookup(GROUP)


def test_an_edited_entry_points_file_is_read_again(site: Path) -> None:
    info = install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    assert ep_index.lookup(GROUP)["cache_demo"].value == "lich_cache_demo.plugin"

    (info / "entry_points.txt").write_text(
        f"[{GROUP}]\ncache_demo = lich_cache_demo.other\n", encoding="utf-8")

    assert ep_index.lookup(GROUP)["cache_demo"].value == "lich_cache_demo.other"


def test_an_upgrade_reports_the_new_version(site: Path) -> None:
    import shutil

    old = install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    assert ep_index.lookup(GROUP)["cache_demo"].version == "1.2.0"

    shutil.rmtree(old)  # as pip upgrades: the old dist-info goes, the new one comes
    install(site, "lich_cache_demo", "1.3.0", {"cache_demo": "lich_cache_demo.plugin"})

    assert ep_index.lookup(GROUP)["cache_demo"].version == "1.3.0"


def test_another_sys_path_is_another_cache(site: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    ep_index.lookup(GROUP)
    other = tmp_path / "other"
    other.mkdir()
    install(other, "lich_other_demo", "2.0.0", {"other_demo": "lich_other_demo"})
    settle(other)
    monkeypatch.setattr(sys, "path", [*sys.path, str(other)])

    found = ep_index.lookup(GROUP)

    assert {"cache_demo", "other_demo"} <= set(found)
    assert len(cache_files()) == 2


def test_a_fresh_state_is_not_cached(site: Path) -> None:
    """A change less than two seconds old could share its modification time with one
    still to come on a coarse file system: such a state is scanned, never written."""
    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})

    assert "cache_demo" in ep_index.lookup(GROUP)
    assert cache_files() == []


def test_a_corrupt_cache_file_is_scanned_over(site: Path) -> None:
    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    ep_index.lookup(GROUP)
    (file,) = cache_files()
    for garbage in ("{not json", '{"format": 1, "state": 3}', "[]", ""):
        file.write_text(garbage, encoding="utf-8")

        assert ep_index.lookup(GROUP)["cache_demo"].version == "1.2.0"
        assert ep_index.lookup(GROUP)["cache_demo"].version == "1.2.0"  # rewritten whole


def test_an_unwritable_cache_directory_only_costs_the_scan(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory would be\n", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)

    assert "cache_demo" in ep_index.lookup(GROUP)
    assert "cache_demo" in ep_index.lookup(GROUP)
    assert list(tmp_path.rglob("*.tmp")) == []


def test_a_finder_that_lists_distributions_turns_the_cache_off(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    class Finder:
        """A meta path finder with distributions of its own (as some installers add)."""

        def find_spec(self, *args: object) -> None:
            return None

        def find_distributions(self, context: object = None) -> list[object]:
            return []

    install(site, "lich_cache_demo", "1.2.0", {"cache_demo": "lich_cache_demo.plugin"})
    settle(site)
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])

    assert "cache_demo" in ep_index.lookup(GROUP)
    assert cache_files() == []
    assert importlib.metadata.entry_points(group=GROUP)  # the finder is harmless


def test_a_record_loads_what_its_value_names(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = site / "lich_cache_demo_mod"
    package.mkdir()
    (package / "__init__.py").write_text("class Inner:\n    value = 42\n", encoding="utf-8")
    monkeypatch.delitem(sys.modules, "lich_cache_demo_mod", raising=False)

    module = ep_index.EntryPointRecord("m", "lich_cache_demo_mod", None, None).load()
    attr = ep_index.EntryPointRecord("a", "lich_cache_demo_mod:Inner.value [extra]",
                                     None, None).load()

    assert module.__name__ == "lich_cache_demo_mod"
    assert attr == 42
    with pytest.raises(ValueError, match="invalid entry point value"):
        ep_index.EntryPointRecord("bad", "not a value!", None, None).load()
