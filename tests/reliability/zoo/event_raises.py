"""Observers that raise: lich_event (on every event), lich_run_start, lich_run_end."""

from lich import hookimpl


@hookimpl
def lich_run_start(run):
    raise RuntimeError("event_raises: run_start")


@hookimpl
def lich_event(event):
    raise RuntimeError(f"event_raises: {event.type}")


@hookimpl
def lich_run_end(run, outcome):
    raise RuntimeError("event_raises: run_end")
