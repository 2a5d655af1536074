"""The scripted model for the benchmarks, served from its own process.

``python -m bench._model_server TOOL N [N ...]`` starts one
:class:`lich.testing.ScriptedServer` (OpenAI dialect, 127.0.0.1) per N, each
answering ``tool_loop_responder(N, TOOL)``, prints ``{"ports": {"N": port}}``
as one JSON line, and serves until its standard input closes (so it never
outlives the benchmark that started it). Meanwhile each line ``times N`` on its
standard input is answered with one JSON line: the arrival times
(``time.perf_counter()`` of this process, seconds) of the requests server N got since
the last such question, oldest first, at most :data:`KEPT_TIMES` of them.

A process of its own keeps the server's work off the measured process: its
threads would otherwise compete for the GIL with the client being timed, and
the client's CPU time could not be read separately.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import deque
from typing import Any

from lich.testing import ScriptedModel, ScriptedServer, ScriptRequest, Step, tool_loop_responder

__all__ = ["KEPT_TIMES", "ModelServer", "main"]

# Arrival times kept per server between two questions: a run of B1-cli makes 101
# requests; the gateway benchmarks make thousands and never ask.
KEPT_TIMES = 4096


class _ForgetfulModel(ScriptedModel):
    """A scripted model that keeps no record of the requests (it serves thousands), only
    when the latest of them arrived."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.times: deque[float] = deque(maxlen=KEPT_TIMES)

    def next(self, request: ScriptRequest) -> Step:
        self.times.append(time.perf_counter())
        step = super().next(request)
        self.requests.clear()
        return step

    def take_times(self) -> list[float]:
        """The arrival times since the last call, oldest first; forgets them."""
        taken = []
        while self.times:
            taken.append(self.times.popleft())  # deque.popleft is thread-safe
        return taken


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
    models = {str(n): s.model for n, s in servers.items()}
    try:
        for line in sys.stdin:
            words = line.split()
            if len(words) == 2 and words[0] == "times" and words[1] in models:
                model = models[words[1]]
                assert isinstance(model, _ForgetfulModel)
                print(json.dumps(model.take_times()), flush=True)
            else:
                print(json.dumps({"error": f"unknown command {line.strip()!r}"}), flush=True)
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

    def take_times(self, n: int) -> list[float]:
        """When the requests to server N arrived since the last call (the server's
        ``perf_counter`` seconds, oldest first); the server forgets them."""
        assert self.proc is not None
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"times {n}\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if not isinstance(answer, list):
            raise RuntimeError(f"model server: {answer}")
        return [float(t) for t in answer]

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
