"""The one logging setup: the CLI's ``[lich:<level>]`` lines and the gateway's
timestamped logfmt lines, both on whatever stderr is at the time."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from lich.cli.common import setup_logging
from lich.gateway.formatting import log_event
from lich.logcontext import reset_admission, set_admission


@pytest.fixture(autouse=True)
def _restore_lich_logger() -> Iterator[None]:
    logger, root = logging.getLogger("lich"), logging.getLogger()
    handlers, level, root_handlers = list(logger.handlers), logger.level, list(root.handlers)
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
    root.handlers[:] = root_handlers


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


def test_service_lines_carry_the_admission_of_the_message_being_handled(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_logging("info", service=True)
    plugin_log = logging.getLogger("some_plugin.audit")  # a plugin's own logger
    gateway_log = logging.getLogger("lich.gateway")
    token = set_admission("m0123abcd")
    try:
        plugin_log.warning("the plugin saw a call")
        log_event(gateway_log, logging.INFO, "run_end", chat="c1")
        log_event(gateway_log, logging.INFO, "redelivered", admission="m0123abcd")
        plugin_log.info("below the plugin's level: not written")
    finally:
        reset_admission(token)
    plugin_log.warning("outside any message")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" level=", 1)[1] for line in lines] == [
        "WARNING admission=m0123abcd the plugin saw a call",
        "INFO gateway event=run_end chat=c1 admission=m0123abcd",
        "INFO gateway event=redelivered admission=m0123abcd",  # once, not twice
        "WARNING outside any message",
    ]


@pytest.mark.parametrize("converter", ["localtime", "gmtime"])
def test_service_line_times_are_loggings_own(converter: str) -> None:
    # The date is formatted once a second: records within, across and back across a
    # second boundary read exactly as logging's default formatter writes them.
    import time

    from lich.logcontext import ServiceFormatter

    ours = ServiceFormatter()
    plain = logging.Formatter("%(asctime)s level=%(levelname)s %(message)s")
    ours.converter = plain.converter = getattr(time, converter)
    for created in (1_700_000_000.0005, 1_700_000_000.999, 1_700_000_001.5,
                    1_700_000_000.25, 1_800_000_000.0):
        record = logging.LogRecord("lich.gateway", logging.INFO, __file__, 1, "line %s",
                                   ("x",), None)
        record.created = created
        record.msecs = (created - int(created)) * 1000 // 1
        assert ours.format(record) == plain.format(record)
    assert ours.formatTime(record, "%H") == plain.formatTime(record, "%H")


def test_logfmt_values_are_quoted_only_when_they_must_be() -> None:
    from lich.gateway.formatting import parse_logfmt

    logger = logging.getLogger("lich.test.logfmt")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        log_event(logger, logging.INFO, "e", n=3, flag=True, empty="", spaced="a b",
                  quoted='x"y', eq="k=v", tab="a\tb", plain="word", none=None)
    finally:
        logger.removeHandler(keep)
        logger.propagate = True
    assert lines == ['gateway event=e n=3 flag=True empty="" spaced="a b" quoted="x\\"y" '
                     'eq="k=v" tab="a\\tb" plain=word']
    fields = parse_logfmt(lines[0])
    assert (fields["spaced"], fields["quoted"], fields["tab"]) == ("a b", 'x"y', "a\tb")
