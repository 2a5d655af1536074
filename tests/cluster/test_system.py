"""The system test: one ingress, three workers, a real broker and a real database, and faults.

Every process is real and started by this test: ``nats-server -js``, a throw-away
PostgreSQL cluster, one ``lich gateway`` (the webhook, ``[bus] consume = false``:
an ingress that only publishes) and three ``lich worker`` processes, all on
127.0.0.1 and stopped by pid. The model is a :class:`~lich.testing.ScriptedServer`
in this process, answering every message after a short delay, some of them with
one call of the test plugin's non-idempotent tool (``system_plugin.py``).

The load: 20 conversations × 10 messages, each message POSTed twice with the same
``Idempotency-Key``; a conversation sends its messages one after the other as soon
as each is admitted (``reply_timeout_s`` is short, so ``POST /message`` answers
``202`` with a status URL), so up to ten of its messages wait in the stream at once.
Meanwhile, one after the other:

* the broker is killed (SIGKILL) and restarted on its store;
* PostgreSQL is restarted (``-m immediate``, as a crash);
* a worker blocked in a model call is killed;
* a worker inside the non-idempotent tool is killed (once its ``tool_start``
  record is in the database);
* a worker that wrote a ``turn_end`` record and has not answered is killed;
* a worker in a model call is stopped (SIGSTOP) past ``ack_wait_s`` until another
  worker took its conversation, then continued (SIGCONT): its writes must fail.

Killed workers are replaced, so three stay up. The fault points are reached by
polling the scripted server's requests, the database and the plugin's probe files
(:func:`lich.testing.async_wait_for`), never by sleeping; a victim message is sent
only when its fault begins, so an earlier fault cannot disturb it first. Then the
assertions, from the database and from the answers the clients got (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import signal
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from attrs import define, field
from gateway_process import GatewayProcess, gateway_process
from lich_env import lich_env

from lich.nats_bus.settings import admission_token
from lich.testing import Reply, ScriptedModel, ScriptedServer, ScriptRequest, Step, async_wait_for
from lich.testing.nats import NatsServer
from lich.testing.plugin import postgres_cluster_or_skip
from lich.testing.postgres import PostgresCluster
from lich.types import ToolCall

from .system_plugin import TOOL, safe_name

pytestmark = [
    pytest.mark.system,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    # A bound on a hang, far above what the test takes (see docs/testing.md).
    pytest.mark.timeout(400),
]

CONVERSATIONS = 20
MESSAGES = 10
PARTITIONS = 8
WORKERS = 3
ACK_WAIT_S = 2
PLATFORM = "webhook"
STREAM = "LICH_INBOUND"
#: How long any one awaited condition may take before the test fails naming it.
WAIT_S = 90.0
#: How long the whole load may take (a hang bound, not a speed claim).
LOAD_S = 240.0

# The faults' victims, (conversation, message), in different conversations; each is
# sent when its fault begins (Load.gates), after its conversation's earlier messages.
BLOCKED_IN_MODEL = (2, 2)
IN_TOOL = (5, 3)
AFTER_TURN_END = (7, 4)
STOPPED = (9, 5)
VICTIMS = (BLOCKED_IN_MODEL, IN_TOOL, AFTER_TURN_END, STOPPED)


def text_of(c: int, i: int) -> str:
    """The text of message ``i`` of conversation ``c``: its tag, unique in the run."""
    return f"c{c:02d} m{i:02d}"


def chat_of(c: int) -> str:
    return f"chat-{c:02d}"


def key_of(c: int, i: int) -> str:
    """The ``Idempotency-Key`` both copies of a message carry."""
    return f"key-{c:02d}-{i:02d}"


def admission_of(c: int, i: int) -> str:
    return admission_token(PLATFORM, chat_of(c), key_of(c, i))


def uses_tool(c: int, i: int) -> bool:
    """Whether the model answers the message with a tool call first (about a third)."""
    return (c, i) == IN_TOOL or ((c + i) % 3 == 0 and (c, i) not in (
        BLOCKED_IN_MODEL, AFTER_TURN_END, STOPPED))


def call_id_of(text: str) -> str:
    return "call-" + safe_name(text)


def expected_reply(text: str) -> str:
    return f"reply to {text}"


_TAG = re.compile(r"c(\d\d) m(\d\d)")


# ----------------------------------------------------------------------------- the model


@define
class Hold:
    """Holds the model requests of one message: request ``n`` (1-based, counted per
    message) waits, when in ``held``, until released; ``entered[n]`` is set as it
    arrives. A released request in ``stale`` answers ``stale reply to <tag>`` (its
    worker is dead or has lost the conversation by then); the others answer normally.
    """

    held: frozenset[int]
    stale: frozenset[int]
    entered: dict[int, threading.Event] = field(factory=dict)
    released: dict[int, threading.Event] = field(factory=dict)

    def __attrs_post_init__(self) -> None:
        for n in self.held:
            self.entered[n] = threading.Event()
            self.released[n] = threading.Event()

    def release_all(self) -> None:
        for event in self.released.values():
            event.set()


class Script:
    """The responder: ``reply to <tag>`` after a short delay, a tool call first for the
    messages that use the tool; some requests held (see :class:`Hold`).

    A held request of a worker that was killed or lost its conversation meanwhile
    answers ``stale reply to <tag>``: that text must reach no transcript and no user.
    """

    def __init__(self) -> None:
        self.holds: dict[str, Hold] = {}
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def hold(self, text: str, held: frozenset[int], stale: frozenset[int]) -> Hold:
        hold = self.holds[text] = Hold(held, stale)
        return hold

    def release_all(self) -> None:
        for hold in self.holds.values():
            hold.release_all()

    def __call__(self, request: ScriptRequest) -> Step:
        text = request.last_user()
        match = _TAG.fullmatch(text)
        if match is None:
            return Reply(f"unexpected message {text!r}")
        c, i = int(match.group(1)), int(match.group(2))
        tool_done = bool(request.tool_results_since_user())
        with self._lock:
            self.counts[text] += 1
            n = self.counts[text]
        hold = self.holds.get(text)
        if hold is not None and n in hold.held:
            hold.entered[n].set()
            # In the server's handler thread: this request blocks, nothing else does.
            hold.released[n].wait(WAIT_S)
            if n in hold.stale:
                return Reply(f"stale reply to {text}")
        delay = 0.01 * (1 + (c * 7 + i * 3) % 4)  # 10–40 ms, the same on every run
        if uses_tool(c, i) and not tool_done:
            return Reply(tool_calls=(ToolCall(call_id_of(text), TOOL, {"key": text}),),
                         delay_s=delay)
        return Reply(expected_reply(text), delay_s=delay)


# ----------------------------------------------------------------------------- processes


@define
class Worker:
    process: asyncio.subprocess.Process
    lines: list[str]
    reader: asyncio.Task[None]

    @property
    def pid(self) -> int:
        return self.process.pid

    def saw(self, fragment: str) -> bool:
        return any(fragment in line for line in self.lines)


@define
class Cluster:
    work: Path
    env: dict[str, str]
    probe: Path
    nats: NatsServer
    postgres: PostgresCluster
    dsn: str
    workers: list[Worker] = field(factory=list)
    gone: list[Worker] = field(factory=list)

    async def start_worker(self) -> Worker:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "lich", "--work-dir", str(self.work), "worker",
            "--grace", "5", cwd=self.work, env=self.env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        lines: list[str] = []

        async def read() -> None:
            assert process.stderr is not None
            async for raw in process.stderr:
                lines.append(raw.decode(errors="replace").rstrip())

        worker = Worker(process, lines, asyncio.create_task(read()))
        self.workers.append(worker)
        await async_wait_for(lambda: worker.saw("event=worker_ready"), WAIT_S,
                             lambda: f"worker {worker.pid} to consume; stderr: {lines[-20:]}")
        return worker

    def by_pid(self, pid: int | None) -> Worker:
        """The running worker ``pid`` (a fault's victim must be one)."""
        found = next((w for w in self.workers if w.pid == pid), None)
        assert found is not None, f"pid {pid} is not a running worker: {self.workers}"
        return found

    async def kill(self, worker: Worker) -> None:
        """SIGKILL ``worker``, and start another in its place (in the background)."""
        worker.process.send_signal(signal.SIGKILL)
        await worker.process.wait()
        self.workers.remove(worker)
        self.gone.append(worker)

    async def stop_all(self) -> None:
        """Kill every worker still running; keep every worker's log in ``logs/``."""
        logs = self.work.parent / "logs"
        logs.mkdir(exist_ok=True)
        for worker in [*self.workers, *self.gone]:
            if worker.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGCONT)
                worker.process.kill()
                await worker.process.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.reader, 10)
            (logs / f"worker-{worker.pid}.log").write_text(
                "\n".join(worker.lines) + "\n", encoding="utf-8")


def write_config(work: Path, probe: Path, model: ScriptedServer, nats: NatsServer) -> None:
    plugin = Path(__file__).with_name("system_plugin.py").resolve()
    (work / ".lich").mkdir(parents=True)
    (work / ".lich" / "config.toml").write_text(
        f'stream = false\nplugins = ["+nats", {json.dumps("+" + str(plugin))}]\n'
        '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
        f'base_url = "{model.base_url}"\n'
        f'[gateway]\nplatforms = ["webhook"]\ntools = ["{TOOL}"]\n'
        f"queue_limit = {2 * MESSAGES}\n"
        # Short: a conversation's next message is sent as soon as this one is admitted.
        "[gateway.webhook]\nport = 0\nopen = true\nreply_timeout_s = 0.2\nidle_timeout_s = 60\n"
        "max_unauthenticated = 100\n"
        f'[approvals]\nallow = ["{TOOL}"]\n'
        f'[bus]\nkind = "nats"\nservers = ["{nats.url}"]\npartitions = {PARTITIONS}\n'
        f"ack_wait_s = {ACK_WAIT_S}\nconsume = false\n"
        '[session_store]\nkind = "postgres"\ndsn_env = "LICH_POSTGRES_DSN"\n'
        # Above the time a restart of the test's server takes, on a busy machine.
        "reconnect_s = 60\n"
        f"[plugin_settings.systest]\nprobe_dir = {json.dumps(str(probe))}\n",
        encoding="utf-8")


@pytest.fixture
def postgres() -> Iterator[PostgresCluster]:
    """A cluster of this test's own: it is restarted mid-run."""
    yield from postgres_cluster_or_skip()


@contextlib.asynccontextmanager
async def running_cluster(tmp_path: Path, nats: NatsServer, postgres: PostgresCluster,
                          model: ScriptedServer) -> AsyncIterator[tuple[Cluster, GatewayProcess]]:
    work, probe = tmp_path / "work", tmp_path / "probe"
    probe.mkdir()
    write_config(work, probe, model, nats)
    dsn = postgres.create_database("system")
    env = lich_env(tmp_path, LICH_POSTGRES_DSN=dsn)
    cluster = Cluster(work, env, probe, nats, postgres, dsn)
    try:
        async with gateway_process(work, env) as ingress:
            try:
                await asyncio.gather(*(cluster.start_worker() for _ in range(WORKERS)))
                yield cluster, ingress
            finally:
                (tmp_path / "logs").mkdir(exist_ok=True)
                (tmp_path / "logs" / "ingress.log").write_text(
                    "\n".join(ingress.lines) + "\n", encoding="utf-8")
    finally:
        await cluster.stop_all()


# ----------------------------------------------------------------------------- the load


@define
class Answer:
    """What one POST of a message finally got."""

    c: int
    i: int
    copy: int
    status: int
    body: dict[str, Any]
    unavailable: int  # 503s before it was admitted (the broker was away)


class Load:
    """The clients: each conversation sends its messages in order, each twice."""

    def __init__(self, client: httpx.AsyncClient, base: str) -> None:
        self.client = client
        self.base = base
        self.answers: list[Answer] = []
        #: The faults' victims are sent when their fault begins (and the rest of their
        #: conversation after them), so an earlier fault cannot disturb them first.
        self.gates = {victim: asyncio.Event() for victim in VICTIMS}

    @property
    def replied(self) -> int:
        return len(self.answers)

    async def admit(self, c: int, i: int) -> tuple[httpx.Response, int]:
        """POST until admitted: a 503 (the broker away) is sent again, as a platform does."""
        unavailable = 0
        while True:
            response = await self.client.post(
                f"{self.base}/message", json={"text": text_of(c, i), "chat_id": chat_of(c)},
                headers={"Idempotency-Key": key_of(c, i)})
            if response.status_code != 503:
                return response, unavailable
            unavailable += 1
            await asyncio.sleep(0.2)  # the client's retry pace

    async def settle(self, c: int, i: int, copy: int, response: httpx.Response,
                      unavailable: int) -> None:
        body = response.json()
        while response.status_code == 202 and body.get("status") == "accepted":
            await asyncio.sleep(0.2)  # the status URL's own retry pace
            response = await self.client.get(self.base + body["status_url"])
            if response.status_code == 202 and response.json().get("status") == "pending":
                continue
            body = response.json()
            break
        self.answers.append(Answer(c, i, copy, response.status_code, body, unavailable))

    async def conversation(self, c: int) -> None:
        admitted = []
        for i in range(MESSAGES):
            gate = self.gates.get((c, i))
            if gate is not None:
                await gate.wait()
            for copy in range(2):
                response, unavailable = await self.admit(c, i)
                admitted.append((i, copy, response, unavailable))
        for i, copy, response, unavailable in admitted:
            await self.settle(c, i, copy, response, unavailable)

    async def run(self) -> None:
        await asyncio.gather(*(self.conversation(c) for c in range(CONVERSATIONS)))


# ----------------------------------------------------------------------------- the database


def fetch_records(dsn: str) -> tuple[dict[str, list[tuple[int, int, str, dict[str, Any]]]],
                                     dict[str, tuple[int, int]]]:
    """Every record by session, in seq order: ``(seq, epoch, kind, record)``; and
    every session's ``(epoch, next_seq)``."""
    import psycopg

    records: dict[str, list[tuple[int, int, str, dict[str, Any]]]] = defaultdict(list)
    with psycopg.connect(dsn) as conn:
        for sid, seq, epoch, kind, text in conn.execute(
                "SELECT session_id, seq, epoch, kind, record FROM lich_records "
                "ORDER BY session_id, seq"):
            records[sid].append((seq, epoch, kind, json.loads(text)))
        sessions = {sid: (epoch, next_seq) for sid, epoch, next_seq in conn.execute(
            "SELECT session_id, epoch, next_seq FROM lich_sessions")}
    return dict(records), sessions


def meta_rows(dsn: str, event: str, **where: str) -> list[tuple[str, int, int]]:
    """``(session_id, seq, epoch)`` of the ``meta`` records ``event`` matching ``where``."""
    import psycopg

    match = {"event": event, **where}
    with psycopg.connect(dsn) as conn:
        return [(str(sid), int(seq), int(epoch)) for sid, seq, epoch in conn.execute(
            "SELECT session_id, seq, epoch FROM lich_records "
            "WHERE kind = 'meta' AND record::jsonb @> %s::jsonb ORDER BY seq",
            (json.dumps(match),))]


def session_epoch(dsn: str, session_id: str) -> int:
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT epoch FROM lich_sessions WHERE session_id = %s",
                           (session_id,)).fetchone()
    return int(row[0]) if row else 0


def user_record_session(dsn: str, text: str) -> tuple[str, int] | None:
    """The session and epoch of the first user message ``text`` stored."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT session_id, epoch FROM lich_records WHERE kind = 'message' AND "
            "record::jsonb -> 'message' @> %s::jsonb ORDER BY seq LIMIT 1",
            (json.dumps({"role": "user", "content": text}),)).fetchone()
    return (str(row[0]), int(row[1])) if row else None


async def stream_messages(url: str) -> int:
    import nats

    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(STREAM)
        return int(info.state.messages)
    finally:
        await nc.close()


# ----------------------------------------------------------------------------- the faults


def model_caller(probe: Path, text: str) -> int | None:
    """The pid of the (one) process that called the model for ``text``."""
    pids = set()
    for path in (probe / "model-calls").glob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                if json.loads(line)["input"] == text:
                    pids.add(int(json.loads(line)["pid"]))
    return pids.pop() if len(pids) == 1 else None


def file_pid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="utf-8").split()
    except OSError:
        return None
    return int(text[0]) if text else None


@define
class Faults:
    cluster: Cluster
    script: Script
    load: Load
    log: list[str] = field(factory=list)
    replacements: list[asyncio.Task[Worker]] = field(factory=list)

    def note(self, text: str) -> None:
        self.log.append(text)

    async def replace(self, worker: Worker) -> None:
        await self.cluster.kill(worker)
        self.replacements.append(asyncio.create_task(self.cluster.start_worker()))

    async def restart_broker(self) -> None:
        await async_wait_for(lambda: self.load.replied >= 20, WAIT_S, "the first replies")
        await asyncio.to_thread(self.cluster.nats.kill)
        self.note(f"broker killed after {self.load.replied} replies")
        await asyncio.to_thread(self.cluster.nats.start)

    async def kill_in_model_call(self) -> None:
        self.load.gates[BLOCKED_IN_MODEL].set()
        text = text_of(*BLOCKED_IN_MODEL)
        hold = self.script.holds[text]
        await async_wait_for(hold.entered[1].is_set, WAIT_S, f"the model call for {text}")
        pid = await async_wait_for(lambda: model_caller(self.cluster.probe, text), WAIT_S,
                                   f"the worker calling the model for {text}")
        await self.replace(self.cluster.by_pid(pid))
        hold.release_all()
        self.note(f"killed worker {pid} blocked in the model call for {text}")

    async def kill_in_tool(self) -> None:
        self.load.gates[IN_TOOL].set()
        text = text_of(*IN_TOOL)
        call = call_id_of(text)
        pid = await async_wait_for(
            lambda: file_pid(self.cluster.probe / "effects" / call), WAIT_S,
            f"the tool call {call} to run")
        # The record is written before the tool runs: it must be there by now.
        rows = await async_wait_for(
            lambda: meta_rows(self.cluster.dsn, "tool_start", call_id=call), WAIT_S,
            f"the tool_start record of {call}")
        await self.replace(self.cluster.by_pid(pid))
        self.note(f"killed worker {pid} inside the tool call {call} (tool_start at seq "
                  f"{rows[0][1]})")

    async def kill_after_turn_end(self) -> None:
        self.load.gates[AFTER_TURN_END].set()
        text = text_of(*AFTER_TURN_END)
        tag = safe_name(text)
        pid = await async_wait_for(
            lambda: file_pid(self.cluster.probe / "frozen" / tag), WAIT_S,
            f"a worker frozen after the turn_end of {text}")
        rows = await async_wait_for(
            lambda: meta_rows(self.cluster.dsn, "turn_end",
                              admission=admission_of(*AFTER_TURN_END)), WAIT_S,
            f"the turn_end record of {text} in the database")
        await self.replace(self.cluster.by_pid(pid))
        self.note(f"killed worker {pid} after the turn_end of {text} (seq {rows[0][1]})")

    async def stop_past_ack_wait(self) -> None:
        self.load.gates[STOPPED].set()
        text = text_of(*STOPPED)
        hold = self.script.holds[text]
        await async_wait_for(hold.entered[1].is_set, WAIT_S, f"the model call for {text}")
        pid = await async_wait_for(lambda: model_caller(self.cluster.probe, text), WAIT_S,
                                   f"the worker calling the model for {text}")
        found = await async_wait_for(lambda: user_record_session(self.cluster.dsn, text),
                                     WAIT_S, f"the user message {text} in the database")
        assert found is not None
        session, stale_epoch = found
        stopped = self.cluster.by_pid(pid)
        stopped.process.send_signal(signal.SIGSTOP)
        self.note(f"stopped worker {pid} in the model call for {text} (epoch {stale_epoch})")
        # Past ack_wait_s another worker has the message and calls the model for it; its
        # call waits while the stopped worker wakes up and tries to write.
        await async_wait_for(hold.entered[2].is_set, WAIT_S,
                             f"another worker to take {text} from the stopped one")
        await async_wait_for(
            lambda: session_epoch(self.cluster.dsn, session) > stale_epoch, WAIT_S,
            f"the new owner of {text} to claim its session")
        stopped.process.send_signal(signal.SIGCONT)
        hold.released[1].set()
        await async_wait_for(
            lambda: stopped.saw("StaleWriter") or stopped.saw("claimed by another writer"),
            WAIT_S, lambda: f"the continued worker's write to fail as stale; its last lines: "
                            f"{stopped.lines[-8:]}")
        hold.released[2].set()
        self.note(f"continued worker {pid}: its write failed as stale")

    async def restart_postgres(self) -> None:
        await asyncio.to_thread(self.cluster.postgres.restart)
        self.note(f"postgres restarted after {self.load.replied} replies")

    async def run(self) -> None:
        try:
            await self.restart_broker()
            await self.restart_postgres()
            await self.kill_in_model_call()
            await self.kill_in_tool()
            await self.kill_after_turn_end()
            await self.stop_past_ack_wait()
            await asyncio.gather(*self.replacements)
        finally:
            self.script.release_all()


# ----------------------------------------------------------------------------- the test


async def test_three_workers_under_faults_answer_everything_once_in_order(
    tmp_path: Path, nats_server: NatsServer, postgres: PostgresCluster,
) -> None:
    script = Script()
    script.hold(text_of(*BLOCKED_IN_MODEL), held=frozenset({1}), stale=frozenset({1}))
    # The stopped worker's call (1), and the call of the worker that takes over (2).
    script.hold(text_of(*STOPPED), held=frozenset({1, 2}), stale=frozenset({1}))
    probe_marks = {"hold": call_id_of(text_of(*IN_TOOL)),
                   "freeze": safe_name(text_of(*AFTER_TURN_END))}
    model = ScriptedServer(ScriptedModel(responder=script)).start()
    try:
        async with running_cluster(tmp_path, nats_server, postgres, model) as (cluster, ingress):
            for folder, name in probe_marks.items():
                (cluster.probe / folder).mkdir()
                (cluster.probe / folder / name).write_text("", encoding="utf-8")
            async with httpx.AsyncClient(
                    timeout=WAIT_S,
                    limits=httpx.Limits(max_connections=2 * CONVERSATIONS)) as client:
                load = Load(client, f"http://127.0.0.1:{ingress.port}")
                faults = Faults(cluster, script, load)
                load_task = asyncio.create_task(load.run())
                fault_task = asyncio.create_task(faults.run())
                try:
                    await until_done(load_task, fault_task, load, faults, cluster, ingress)
                finally:
                    script.release_all()
                    for gate in load.gates.values():
                        gate.set()
                    for name in probe_marks.values():
                        (cluster.probe / "release").mkdir(exist_ok=True)
                        (cluster.probe / "release" / name).write_text("", encoding="utf-8")
                    for task in (load_task, fault_task):
                        task.cancel()
                    await asyncio.gather(load_task, fault_task, return_exceptions=True)
            assert len(cluster.workers) == WORKERS
            assert all(w.process.returncode is None for w in cluster.workers)
            await async_wait_for(lambda: _stream_empty(nats_server.url), WAIT_S,
                                 "the stream to be empty", interval=0.2)
            records, sessions = fetch_records(cluster.dsn)
            # The evidence for a failure, next to the processes' logs.
            (tmp_path / "logs").mkdir(exist_ok=True)
            with (tmp_path / "logs" / "records.jsonl").open("w", encoding="utf-8") as out:
                for sid, rows in records.items():
                    for seq, epoch, _, record in rows:
                        out.write(json.dumps({"session": sid, "seq": seq, "epoch": epoch,
                                              "record": record}) + "\n")
            check(load.answers, records, sessions, cluster.probe, faults)
    finally:
        model.stop()


async def until_done(load_task: asyncio.Task[None], fault_task: asyncio.Task[None], load: Load,
                     faults: Faults, cluster: Cluster, ingress: GatewayProcess) -> None:
    """Wait for the load and the faults; a fault that fails, or a load that does not
    finish in time, fails the test with what was missing and the processes' last lines."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOAD_S
    seen, progressed = (-1, -1), loop.time()
    done: set[asyncio.Task[None]] = set()
    while len(done) < 2 and loop.time() < deadline:
        if (len(load.answers), len(faults.log)) != seen:
            seen, progressed = (len(load.answers), len(faults.log)), loop.time()
        if loop.time() - progressed > WAIT_S:
            break  # stuck: nothing answered for a long while
        done, _ = await asyncio.wait({load_task, fault_task}, timeout=1,
                                     return_when=asyncio.FIRST_EXCEPTION)
        if any(t.exception() is not None for t in done):
            break
    failed = next((t for t in done if t.exception() is not None), None)
    if failed is None and len(done) == 2:
        return
    answered = {(a.c, a.i, a.copy) for a in load.answers}
    missing = [f"{text_of(c, i)}#{copy}" for c in range(CONVERSATIONS)
               for i in range(MESSAGES) for copy in range(2) if (c, i, copy) not in answered]
    tails = "\n".join(f"worker {w.pid} ({'gone' if w in cluster.gone else 'up'}): "
                      + "\n  ".join(w.lines[-12:]) for w in [*cluster.workers, *cluster.gone])
    raise AssertionError(
        f"{'a fault failed' if failed is not None else 'the load did not finish'} (logs in "
        f"{cluster.work.parent / 'logs'}); faults: "
        f"{faults.log}; unanswered: {missing[:40]} ({len(missing)})\ningress: "
        + "\n  ".join(ingress.lines[-12:]) + "\n" + tails) from (
            failed.exception() if failed is not None else None)


async def _stream_empty(url: str) -> bool:
    return await stream_messages(url) == 0


def check(answers: list[Answer], records: dict[str, list[tuple[int, int, str, dict[str, Any]]]],
          sessions: dict[str, tuple[int, int]], probe: Path, faults: Faults) -> None:
    """Every assertion of the test, from the answers and the database."""
    problems: list[str] = []
    # Every POST got its message's reply.
    by_message: dict[tuple[int, int], list[Answer]] = defaultdict(list)
    for a in answers:
        by_message[(a.c, a.i)].append(a)
    duplicates = sum(1 for a in answers if a.status == 202
                     and a.body.get("status") == "duplicate")
    for c in range(CONVERSATIONS):
        for i in range(MESSAGES):
            got = by_message.get((c, i), [])
            want = expected_reply(text_of(c, i))
            wrong = [(a.copy, a.status, a.body) for a in got
                     if a.status != 200 or a.body.get("reply") != want]
            if len(got) != 2 or wrong:
                problems.append(f"{text_of(c, i)}: want {want!r} twice, got {wrong or got}")
    # The conversation of each session (from the replies' session ids).
    conversation_of: dict[str, int] = {}
    for a in answers:
        sid = a.body.get("session_id")
        if sid:
            conversation_of[sid] = a.c
    for sid, rows in records.items():
        seqs = [seq for seq, _, _, _ in rows]
        epoch, next_seq = sessions[sid]
        if seqs != list(range(1, next_seq)):
            problems.append(f"session {sid}: seqs {seqs} are not 1..{next_seq - 1}")
        epochs = [e for _, e, _, _ in rows]
        for (seq_a, ea, _, _), (seq_b, eb, _, _) in itertools.pairwise(rows):
            if eb < ea:
                problems.append(f"session {sid}: seq {seq_b} written under epoch {eb} "
                                f"after seq {seq_a} under the newer epoch {ea}")
        if max(epochs) > epoch:
            problems.append(f"session {sid}: a record's epoch {max(epochs)} is above the "
                            f"session's {epoch}")
        for seq, e, _, record in rows:
            if "stale reply to" in json.dumps(record):
                problems.append(f"session {sid}: seq {seq} (epoch {e}) holds a stale "
                                f"worker's answer: {record}")
    # Exactly one turn_start and one turn_end per admitted message, in send order.
    starts: dict[str, list[tuple[str, int]]] = defaultdict(list)
    ends: Counter[str] = Counter()
    for sid, rows in records.items():
        for seq, _, kind, record in rows:
            if kind != "meta":
                continue
            if record.get("event") == "turn_start":
                starts[sid].append((str(record.get("admission")), seq))
            elif record.get("event") == "turn_end":
                ends[str(record.get("admission"))] += 1
    for sid, c in conversation_of.items():
        order = [adm for adm, _ in starts.get(sid, [])]
        want_order = [admission_of(c, i) for i in range(MESSAGES)]
        if order != want_order:
            names = {admission_of(c, i): text_of(c, i) for i in range(MESSAGES)}
            problems.append(f"conversation {c} ({sid}): turn_start records "
                            f"{[names.get(a, a) for a in order]}, want one per message in "
                            "send order")
        for i in range(MESSAGES):
            if ends[admission_of(c, i)] != 1:
                problems.append(f"{text_of(c, i)}: {ends[admission_of(c, i)]} turn_end "
                                "records, want 1")
    if len(conversation_of) != CONVERSATIONS:
        problems.append(f"{len(conversation_of)} sessions answered, want {CONVERSATIONS}")
    # The non-idempotent tool ran at most once per call.
    effects = {p.name: p.read_text(encoding="utf-8").split()
               for p in (probe / "effects").glob("*")}
    for call, pids in sorted(effects.items()):
        if len(pids) > 1:
            problems.append(f"tool call {call} ran {len(pids)} times (pids {pids})")
    held = call_id_of(text_of(*IN_TOOL))
    if len(effects.get(held, [])) != 1:
        problems.append(f"the held tool call {held} ran {len(effects.get(held, []))} times")
    unavailable = sum(a.unavailable for a in answers)
    # What the consumers did with redelivered messages (docs/cluster.md, durable turns):
    # a resent reply is the one place a user could see a reply twice.
    events = Counter(found.group(1) for w in [*faults.cluster.workers, *faults.cluster.gone]
                     for line in w.lines
                     if (found := re.search(r"event=(redelivered|turn_resumed|reply_resent|"
                                            r"reply_already_sent|turn_lost|handed_back)\b",
                                            line)))
    summary = (f"system test: {len(answers)} answers, {duplicates} 'duplicate' answers, "
               f"{unavailable} POSTs refused while the broker was away, "
               f"{sum(len(p) for p in effects.values())} tool executions for "
               f"{len(effects)} calls; consumers: {dict(sorted(events.items()))}; faults: "
               + "; ".join(faults.log))
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)


# ----------------------------------------------------------------------------- read, then stall

#: The conversation and messages of the next test: a plain one, then one with the tool.
STALLED_READ = (19, 0, 2)


async def test_a_consumer_stalled_between_its_read_and_its_claim_runs_nothing_again(
    tmp_path: Path, nats_server: NatsServer, postgres: PostgresCluster,
) -> None:
    """A consumer reads the transcript to decide what to do with a message (run it,
    continue it, resend its reply), then stalls (SIGSTOP) past ``ack_wait_s`` before
    its first write. Another consumer takes the message and runs the whole turn. When
    the first continues, it must not act on what it read: the turn is the other one's.

    Each writer of a turn claims the conversation only if nothing was added since
    the consumer read it (``claim_after``): the stalled consumer's claim is refused and
    takes no epoch, so it writes, runs and sends nothing. The same race happens without a
    stop whenever a redelivered copy is read while the first consumer has not written
    yet (a loaded machine).
    """
    c, first, second = STALLED_READ
    model = ScriptedServer(ScriptedModel(responder=Script())).start()
    try:
        async with running_cluster(tmp_path, nats_server, postgres, model) as (cluster, ingress), \
                httpx.AsyncClient(timeout=WAIT_S) as client:
            assert uses_tool(c, second)
            assert not uses_tool(c, first)
            load = Load(client, f"http://127.0.0.1:{ingress.port}")
            await load.settle(c, first, 0, *(await load.admit(c, first)))
            session = load.answers[0].body["session_id"]
            (cluster.probe / "hold-read").mkdir()
            (cluster.probe / "hold-read" / safe_name(session)).write_text("", encoding="utf-8")
            # The first reader of the session holds what it read: stop it right there.
            reply = asyncio.create_task(load.admit(c, second))
            pid = await async_wait_for(
                lambda: file_pid(cluster.probe / "read-held" / safe_name(session)), WAIT_S,
                "a worker to read the transcript for the message")
            stalled = cluster.by_pid(pid)
            stalled.process.send_signal(signal.SIGSTOP)
            (cluster.probe / "release").mkdir()
            (cluster.probe / "release" / safe_name(session)).write_text("", encoding="utf-8")
            # Past ack_wait_s another worker runs the turn; the ingress gets its reply.
            await load.settle(c, second, 0, *(await asyncio.wait_for(reply, WAIT_S)))
            admission = admission_of(c, second)
            await async_wait_for(lambda: meta_rows(cluster.dsn, "reply_sent",
                                                   admission=admission), WAIT_S,
                                 "the other worker's reply_sent")
            since = len(stalled.lines)
            stalled.process.send_signal(signal.SIGCONT)

            def done_with_it() -> bool:
                """Whether the continued worker is done with the message, whatever it did:
                gave it up as lost, found it answered, or ran it (and acknowledged)."""
                return any(f"admission={admission}" in line and re.search(
                    r"event=(turn_lost|reply_already_sent|reply_resent|ack_failed)\b", line)
                    for line in stalled.lines[since:]) or any(
                    f"chat={chat_of(c)} " in line and re.search(r"event=run_(end|failed)\b",
                                                                line)
                    for line in stalled.lines[since:])

            await async_wait_for(done_with_it, WAIT_S, lambda: (
                f"the continued worker to finish; its last lines: {stalled.lines[-8:]}"))
            await async_wait_for(lambda: _stream_empty(nats_server.url), WAIT_S,
                                 "the stream to be empty", interval=0.2)
            answer = load.answers[1]
            assert (answer.status, answer.body.get("reply")) == (
                200, expected_reply(text_of(c, second)))
            starts = meta_rows(cluster.dsn, "turn_start", admission=admission)
            ends = meta_rows(cluster.dsn, "turn_end", admission=admission)
            effects = (cluster.probe / "effects" / call_id_of(text_of(c, second))
                       ).read_text(encoding="utf-8").split()
            assert (len(starts), len(ends), len(effects)) == (1, 1, 1), (
                f"turn_start at (session, seq, epoch) {starts}, turn_end at {ends}, the tool "
                f"ran in pids {effects} (the stalled worker is {pid})")
    finally:
        model.stop()
