"""The one logging setup: the CLI's ``[lich:<level>]`` lines and the gateway's
timestamped logfmt lines, both on whatever stderr is at the time."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from lich.cli.common import setup_logging


@pytest.fixture(autouse=True)
def _restore_lich_logger() -> Iterator[None]:
    logger = logging.getLogger("lich")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


def _raise_and_log(logger: logging.Logger, level: int) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logger.log(level, "it failed", exc_info=True)


def test_cli_lines_name_the_level_and_show_tracebacks_only_at_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_logging("warn")
    log = logging.getLogger("lich.test")
    log.info("not shown")
    log.warning("careful")
    _raise_and_log(log, logging.ERROR)
    assert capsys.readouterr().err == "[lich:warn] careful\n[lich:error] it failed\n"
    setup_logging("debug")
    _raise_and_log(log, logging.DEBUG)
    err = capsys.readouterr().err
    assert err.startswith("[lich:debug] it failed\nTraceback")
    assert "ValueError: boom" in err


def test_service_lines_are_timestamped_logfmt(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", service=True)
    logging.getLogger("lich.gateway").info("gateway event=started platform=webhook")
    err = capsys.readouterr().err
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} level=INFO gateway event=started "
        r"platform=webhook\n", err), err


def test_a_second_setup_replaces_the_first(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info")
    setup_logging("info", service=True)
    logging.getLogger("lich.x").warning("once")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].endswith("level=WARNING once")
