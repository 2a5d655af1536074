"""The scripted model for the benchmarks, served from its own process.

``python -m bench._model_server TOOL N [N ...]`` starts one
:class:`lich.testing.ScriptedServer` (OpenAI dialect, 127.0.0.1) per N, each
answering ``tool_loop_responder(N, TOOL)``, prints ``{"ports": {"N": port}}``
as one JSON line, and serves until its standard input closes (so it never
outlives the benchmark that started it).

A process of its own keeps the server's work off the measured process: its
threads would otherwise compete for the GIL with the client being timed, and
the client's CPU time could not be read separately.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from lich.testing import ScriptedModel, ScriptedServer, ScriptRequest, Step, tool_loop_responder

__all__ = ["ModelServer", "main"]


class _ForgetfulModel(ScriptedModel):
    """A scripted model that keeps no record of the requests (it serves thousands)."""

    def next(self, request: ScriptRequest) -> Step:
        step = super().next(request)
        self.requests.clear()
        return step


def main(argv: list[str]) -> int:
    """Serve until stdin closes."""
    if len(argv) < 2:
        print("usage: python -m bench._model_server TOOL N [N ...]", file=sys.stderr)
        return 2
    tool, counts = argv[0], [int(n) for n in argv[1:]]
    servers = {
        n: ScriptedServer(_ForgetfulModel(responder=tool_loop_responder(n, tool))).start()
        for n in counts
    }
    print(json.dumps({"ports": {str(n): s.port for n, s in servers.items()}}), flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    for server in servers.values():
        server.stop()
    return 0


class ModelServer:
    """Start the model server process; ``base_url(n)`` is the ``openai_compat`` base URL."""

    def __init__(self, tool: str, counts: list[int]) -> None:
        self.tool = tool
        self.counts = counts
        self.proc: subprocess.Popen[str] | None = None
        self.ports: dict[str, int] = {}

    def __enter__(self) -> ModelServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench._model_server", self.tool,
             *(str(n) for n in self.counts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            cwd=_repo_root(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"model server exited with {self.proc.returncode}")
        self.ports = {k: int(v) for k, v in json.loads(line)["ports"].items()}
        return self

    @property
    def pid(self) -> int:
        """The server's process id."""
        assert self.proc is not None
        return self.proc.pid

    def base_url(self, n: int) -> str:
        """``http://127.0.0.1:<port>/v1`` of the server answering N tool turns."""
        return f"http://127.0.0.1:{self.ports[str(n)]}/v1"

    def __exit__(self, *exc: Any) -> None:
        if self.proc is None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def _repo_root() -> str:
    import os

    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
