"""The stdio transport of lich's MCP client: a server's messages read with a cap.

The SDK's ``stdio_client`` reads a server's stdout into one growing string,
copied whole at every chunk (``buffer + chunk``) until the line ends: a 10 MB
result costs time quadratic in its size and several times its size in memory,
all of it before lich's output cap could cut it. Here each line is gathered as a
list of byte chunks and joined once (linear), and a line longer than
:data:`MAX_MESSAGE_BYTES` is not kept at all: only its first and last few
hundred bytes, to find the request it answers, which then gets an error
(:data:`TOO_LARGE`) instead of the result — what is read past the cap is dropped
as it arrives.

The rest is the SDK transport's contract: the two in-memory streams a
``mcp.Client`` takes, and the MCP shutdown sequence (stdin closed, then SIGTERM
to the server's process group, then SIGKILL), bounded and shielded, so a server
never outlives its connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import IO, Any

import anyio
import anyio.abc
import mcp_types
from mcp.shared.message import SessionMessage

__all__ = ["MAX_MESSAGE_BYTES", "TOO_LARGE", "CappedLines", "TooLong", "capped_stdio"]

log = logging.getLogger("lich.mcp")

#: The largest message a server may send (a result, a tool list): 4 MiB. Past the
#: output cap of a tool (``max_output_chars``) nothing of a result reaches the model
#: anyway; this bounds what is read to get there.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: The start of the error message a request answered by an oversized line gets.
TOO_LARGE = "lich: the server's answer is too large"
#: How much of an oversized line is kept, at each end, to find its request id.
_KEEP = 512
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')
_TERM_GRACE_S = 2.0  # stdin closed: how long the server may take to exit by itself
_KILL_GRACE_S = 2.0  # SIGTERM to SIGKILL
_POLL_S = 0.01


class TooLong:
    """A line longer than the cap: its ``size``, and its first and last bytes."""

    __slots__ = ("head", "size", "tail")

    def __init__(self, head: bytes, tail: bytes, size: int) -> None:
        self.head, self.tail, self.size = head, tail, size

    def request_id(self) -> str | int | None:
        """The ``id`` the line names near its start or its end (JSON-RPC puts it
        before or after the result, depending on the writer), if one is found."""
        for part in (self.head, self.tail):
            found = _ID.search(part)
            if found is not None:
                with contextlib.suppress(ValueError):
                    value = json.loads(found.group(1))
                    if isinstance(value, str | int):
                        return value
        return None


class CappedLines:
    """Newline-delimited lines from byte chunks, each joined once; a line past ``cap``
    bytes comes out as a :class:`TooLong`, its middle never kept."""

    def __init__(self, cap: int = MAX_MESSAGE_BYTES) -> None:
        self.cap = cap
        self._parts: list[bytes] = []
        self._size = 0
        self._head = b""
        self._tail = b""
        self._over = False

    def feed(self, chunk: bytes) -> Iterator[bytes | TooLong]:
        """The lines ``chunk`` completes, in order."""
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._take(chunk[start:])
                return
            self._take(chunk[start:end])
            yield self._line()
            start = end + 1

    def _take(self, piece: bytes) -> None:
        if not piece:
            return
        self._size += len(piece)
        if self._over:
            self._tail = (self._tail + piece)[-_KEEP:]
            return
        self._parts.append(piece)
        if self._size > self.cap:
            # Over the cap: keep the ends only, from here on.
            joined = b"".join(self._parts)
            self._head, self._tail = joined[:_KEEP], joined[-_KEEP:]
            self._parts = []
            self._over = True

    def _line(self) -> bytes | TooLong:
        line = TooLong(self._head, self._tail, self._size) if self._over \
            else b"".join(self._parts)
        self._parts, self._size, self._over = [], 0, False
        self._head = self._tail = b""
        return line


def _message(line: bytes | TooLong, cap: int) -> SessionMessage | Exception | None:
    """What the session reads for one line: a message, a parse error, or nothing."""
    if isinstance(line, TooLong):
        request = line.request_id()
        if request is None:
            log.warning("mcp: a message of %d bytes (more than %d) without a request id "
                        "was dropped", line.size, cap)
            return None
        error = mcp_types.ErrorData(
            code=mcp_types.INTERNAL_ERROR,
            message=f"{TOO_LARGE}: {line.size} bytes, more than {cap}")
        return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request, error=error))
    if not line.strip():
        return None
    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(
            line, by_name=False))
    except ValueError as exc:
        return exc


async def _exited(process: anyio.abc.Process, within_s: float) -> bool:
    # Polling returncode, not wait(): a child that inherited the pipes would make wait()
    # hang after the server itself exited (and there is no event to wait on).
    with anyio.move_on_after(within_s):
        while process.returncode is None:  # noqa: ASYNC110
            await anyio.sleep(_POLL_S)
    return process.returncode is not None


async def _stop(process: anyio.abc.Process) -> None:
    """stdin closed, a grace period, then the whole process group: SIGTERM, SIGKILL."""
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if process.stdin is not None:
            await process.stdin.aclose()
    if not await _exited(process, _TERM_GRACE_S):
        from mcp.os.posix.utilities import terminate_posix_process_tree

        await terminate_posix_process_tree(process, _KILL_GRACE_S)
        if not await _exited(process, _KILL_GRACE_S):
            log.warning("mcp: server process %d is still alive after SIGKILL", process.pid)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if process.stdout is not None:
            await process.stdout.aclose()


@contextlib.asynccontextmanager
async def capped_stdio(argv: tuple[str, ...], env: Mapping[str, str], cwd: str,
                       errlog: IO[str], cap: int = MAX_MESSAGE_BYTES) -> AsyncIterator[Any]:
    """Start ``argv`` and yield ``(read_stream, write_stream)`` for ``mcp.Client``: every
    message of the server read with ``cap`` (module docstring). POSIX only (the
    server runs in a process group of its own, which the shutdown signals)."""
    assert sys.platform != "win32", "capped_stdio signals a process group"
    process = await anyio.open_process(list(argv), env=dict(env), cwd=cwd, stderr=errlog,
                                       start_new_session=True)
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def read() -> None:
        lines = CappedLines(cap)
        gone = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream,
                OSError)
        try:
            async with read_send:
                async for chunk in stdout:
                    for line in lines.feed(chunk):
                        item = _message(line, cap)
                        if item is not None:
                            await read_send.send(item)
        except gone:
            pass  # the server exited, or the session is closing

    async def write() -> None:
        try:
            async with write_recv:
                async for item in write_recv:
                    text = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((text + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading: end the session's reads too, so a request
            # does not wait for ever.
            await read_send.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(write)
        try:
            yield read_recv, write_send
        finally:
            # Bounded and shielded: the server must not outlive a cancelled caller.
            with anyio.CancelScope(shield=True):
                write_send.close()
                read_recv.close()
                await _stop(process)
            tg.cancel_scope.cancel()
