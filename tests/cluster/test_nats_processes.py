"""Real processes: one ``lich gateway`` ingress and ``lich worker`` processes on a real broker.

The model is a scripted server over HTTP; every process is started by the test and
stopped (or killed) by its pid.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import httpx
import pytest
from gateway_process import gateway_process
from lich_env import lich_env

from lich.testing import Reply, ScriptedModel, ScriptedServer, ScriptRequest, Step, async_wait_for
from lich.testing.contracts import contract_responder
from lich.testing.nats import NatsServer

from .conftest import workers

pytestmark = [
    pytest.mark.system,  # lich processes against a real broker: slow, run by .ci/run
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

WAIT_S = 60.0


def responder(request: ScriptRequest) -> Step:
    """``slow <tag>`` answers ``done <tag>`` after a while (long enough to kill its worker
    in the middle); anything else is the contract's echo."""
    text = request.last_user()
    if text.startswith("slow "):
        return Reply(f"done {text[5:]}", delay_s=3.0)
    return contract_responder(request)


async def test_an_ingress_and_two_workers_answer_in_order_and_survive_a_killed_worker(
    tmp_path: Path, nats_server: NatsServer,
):
    model = ScriptedServer(ScriptedModel(responder=responder)).start()
    try:
        work = tmp_path / "work"
        (work / ".lich").mkdir(parents=True)
        (work / ".lich" / "config.toml").write_text(
            'stream = false\nplugins = ["+nats"]\n'
            '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{model.base_url}"\n'
            '[gateway]\nplatforms = ["webhook"]\n[gateway.webhook]\nport = 0\nopen = true\n'
            f'[bus]\nkind = "nats"\nservers = ["{nats_server.url}"]\npartitions = 4\n'
            'ack_wait_s = 2\n', encoding="utf-8")  # consume = false: the default
        env = lich_env(tmp_path)
        async with gateway_process(work, env) as ingress, workers(work, env, 2) as pool, \
                httpx.AsyncClient(timeout=WAIT_S) as client:
            url = f"http://127.0.0.1:{ingress.port}/message"

            async def conversation(chat: str) -> list[str]:
                replies = []
                for text in ("one", "two"):
                    response = await client.post(url, json={"text": text, "chat_id": chat})
                    assert response.status_code == 200, response.text
                    replies.append(response.json()["reply"])
                return replies

            results = await asyncio.gather(*(conversation(f"chat-{i}") for i in range(4)))
            assert results == [["you said: one | earlier: -",
                                "you said: two | earlier: one"]] * 4
            # The ingress only publishes: every turn ran in a worker.
            assert not any("event=run_end" in line for line in ingress.lines)
            assert sum(line.count("event=run_end") for w in pool for line in w.lines) == 8

            # A worker killed with SIGKILL in the middle of a turn: another one runs it.
            slow = asyncio.create_task(
                client.post(url, json={"text": "slow job", "chat_id": "victim"}))
            running = await async_wait_for(
                lambda: next((w for w in pool if w.saw("chat=victim")), None), WAIT_S,
                "a worker to take the slow message")
            running.process.send_signal(signal.SIGKILL)
            await running.process.wait()
            response = await asyncio.wait_for(slow, WAIT_S)
            assert response.status_code == 200, response.text
            assert response.json()["reply"] == "done job"
            survivor = next(w for w in pool if w is not running)
            assert survivor.saw("event=redelivered")

            # SIGTERM: the survivor stops cleanly.
            survivor.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(survivor.process.wait(), WAIT_S) == 0
            await async_wait_for(lambda: survivor.saw("event=worker_stopped clean=True"),
                                 10, lambda: f"the last lines: {survivor.lines[-5:]}")
    finally:
        model.stop()
