"""Export and loading: a real OTLP/HTTP export to a receiver on 127.0.0.1, the
entry point in a fresh process (the global provider, the console exporter, the
flush at exit), the settings and ``OTEL_*`` variables, and a missing extra."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from lich_env import SUITE_TRUST
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from lich.agent import Agent
from lich.config import ConfigError
from lich.otel.plugin import OtelPlugin, OtelSettings, export_plan
from lich.plugins import PluginHost
from lich.testing import Reply, make_test_config, wait_for
from lich.types import ToolCall

from .conftest import ToolsPlugin


class Receiver:
    """An OTLP/HTTP traces endpoint on 127.0.0.1: decodes every POST /v1/traces."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[Any]:
        return [span for request in self.requests for resource in request.resource_spans
                for scope in resource.scope_spans for span in scope.spans]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    out = Receiver()
    out.thread.start()
    yield out
    out.server.shutdown()
    out.server.server_close()
    out.thread.join(10)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind)


async def test_spans_are_exported_over_otlp_http(
    tmp_path: Path, receiver: Receiver,
    lich_agent_factory: Callable[..., Agent],
) -> None:
    plugin = OtelPlugin(environ={"LICH_TEST_OTLP_TOKEN": "Bearer t0ken"}, install_global=False)
    agent = lich_agent_factory(
        [Reply(tool_calls=[ToolCall("c1", "echo", {"text": "hi"})]), "done"],
        objects=[("otel", plugin), ("tools", ToolsPlugin())],
        otel={
            "exporter": "otlp_http", "endpoint": receiver.url,
            "headers": {"x-team": "lich-tests"},
            "headers_env": {"authorization": "LICH_TEST_OTLP_TOKEN"},
        },
    )
    try:
        result = await agent.run("go")
        # The run's end asks the batch processor to export at once (no schedule delay).
        wait_for(lambda: len(receiver.spans()) >= 4, what="4 spans at the receiver",
                 timeout=30)
    finally:
        assert plugin.tracing is not None
        plugin.tracing.shutdown()
    spans = {s.name: s for s in receiver.spans()}
    assert sorted(spans) == ["chat", "execute_tool echo", "invoke_agent lich"]
    run = spans["invoke_agent lich"]
    attributes = {a.key: _value(a.value) for a in run.attributes}
    assert attributes["gen_ai.conversation.id"] == result.session_id
    assert attributes["lich.stopped_reason"] == "final"
    tool = spans["execute_tool echo"]
    assert tool.parent_span_id == run.span_id
    assert tool.trace_id == run.trace_id
    assert {a.key: _value(a.value) for a in tool.attributes}["gen_ai.tool.call.id"] == "c1"
    resource = {a.key: _value(a.value)
                for a in receiver.requests[0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "lich"
    assert receiver.requests[0].resource_spans[0].scope_spans[0].scope.name == "lich"
    headers = receiver.headers[0]
    assert headers["content-type"] == "application/x-protobuf"
    assert headers["x-team"] == "lich-tests"
    assert headers["authorization"] == "Bearer t0ken"


SCRIPT = textwrap.dedent("""
    import sys
    from lich import hookimpl
    from lich.agent import Agent
    from lich.testing import Reply, make_test_config
    from lich.types import ToolCall
    sys.path.insert(0, sys.argv[2])
    from conftest import ToolsPlugin

    config = make_test_config(sys.argv[1], plugins=("otel",))
    agent = Agent(config, plugins=[("tools", ToolsPlugin())], chat=__import__(
        "lich.testing", fromlist=["ScriptedChat"]).ScriptedChat(
        [Reply(tool_calls=[ToolCall("c1", "traced", {"label": "mcp"})]), "done"]))
    print("RESULT", agent.run_sync("go").text)
""")


def _json_objects(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    out, index = [], 0
    while True:
        start = text.find("{", index)
        if start < 0:
            return out
        obj, index = decoder.raw_decode(text, start)
        out.append(obj)


def test_the_entry_point_in_a_fresh_process(tmp_path: Path) -> None:
    """Loaded from the config by name: the provider it builds becomes the global one
    (a span a tool starts through the global API nests under execute_tool), the
    console exporter prints every span, and the exit flushes them."""
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "console"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "RESULT done\n"  # the spans go to standard error
    spans = {s["name"]: s for s in _json_objects(done.stderr)}
    assert set(spans) == {"invoke_agent lich", "chat", "execute_tool traced", "child mcp"}
    tool, child = spans["execute_tool traced"], spans["child mcp"]
    assert child["parent_id"] == tool["context"]["span_id"]
    assert child["context"]["trace_id"] == tool["context"]["trace_id"]
    assert tool["parent_id"] == spans["invoke_agent lich"]["context"]["span_id"]


def test_a_missing_extra_is_a_load_error_naming_the_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # As if not installed: None in sys.modules makes every import of it fail.
    for name in [m for m in sys.modules if m.split(".")[0] == "opentelemetry"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "lich.otel.plugin", raising=False)
    host = PluginHost(work_dir=tmp_path)
    (report,) = host.load(["otel"])
    assert report.status == "failed"
    assert report.phase == "import"
    assert report.error_type == "ImportError"
    assert report.error_message == (
        "the otel plugin needs opentelemetry-api, opentelemetry-sdk: "
        "pip install 'lich-agent[otel]'")


def test_importing_the_plugin_imports_no_opentelemetry() -> None:
    code = ("import sys, lich.otel.plugin; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.')"
            " and not m.startswith('opentelemetry.exporter')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    # find_spec imports parent packages only: the namespace package and the SDK's
    # empty __init__, nothing of the API or the SDK itself.
    assert json.loads(done.stdout.strip().replace("'", '"')) == ["opentelemetry.sdk"]


@pytest.mark.parametrize(("settings", "problem"), [
    ({"exporter": "zipkin"}, "$.otel.exporter: must be one of"),
    ({"endpoint": "localhost:4318"}, "$.otel.endpoint: expected a http or "
                                     "https URL"),
    ({"headers": {"x": 1}}, "$.otel.headers: every value must be a string"),
    ({"capture_contents": True}, "$.otel.capture_contents"),
    ({"flush_timeout_s": 0}, "$.otel.flush_timeout_s"),
])
def test_bad_settings_are_config_errors(
    tmp_path: Path, settings: dict[str, Any], problem: str
) -> None:
    config = make_test_config(tmp_path, otel=settings)
    with pytest.raises(ConfigError) as caught:
        Agent(config, plugins=[("otel", OtelPlugin(environ={}))], chat=lambda *a: None)  # type: ignore[arg-type,return-value]
    assert any(p.startswith(problem) for p in caught.value.problems), caught.value.problems


def test_bad_environment_variables_are_config_errors(tmp_path: Path) -> None:
    plugin = OtelPlugin(environ={"OTEL_TRACES_EXPORTER": "otlp,jaeger",
                                 "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    with pytest.raises(ConfigError) as caught:
        Agent(make_test_config(tmp_path), plugins=[("otel", plugin)], chat=lambda *a: None)  # type: ignore[arg-type,return-value]
    assert caught.value.problems == [
        "OTEL_TRACES_EXPORTER: 'jaeger' is not an exporter the otel plugin has; "
        "use otlp, console or none",
        "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' is not supported; the otel plugin exports "
        "OTLP over HTTP (http/protobuf)",
    ]


def test_the_environment_overrides_the_settings() -> None:
    settings = OtelSettings(exporter="console", endpoint="https://collector.example:4318",
                            headers={"X-Team": "a", "x-dataset": "d"})
    plan, problems = export_plan(settings, {})
    assert problems == []
    assert plan.exporters == ("console",)
    assert plan.endpoint == "https://collector.example:4318/v1/traces"
    assert dict(plan.headers) == {"X-Team": "a", "x-dataset": "d"}
    plan, _ = export_plan(settings, {
        "OTEL_TRACES_EXPORTER": "otlp,console",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-team=b",
    })
    assert plan.exporters == ("otlp_http", "console")
    assert plan.endpoint is None  # the exporter reads the variable itself
    assert dict(plan.headers) == {"x-dataset": "d"}  # x-team comes from the variable
    full = OtelSettings(endpoint="http://c:4318/v1/traces")
    assert export_plan(full, {})[0].endpoint == "http://c:4318/v1/traces"
    assert export_plan(OtelSettings(), {})[0].exporters == ("otlp_http",)
    assert export_plan(OtelSettings(exporter="none"), {})[0].exporters == ()
    assert export_plan(OtelSettings(), {"OTEL_SDK_DISABLED": "true"})[0].exporters == ()


async def test_exporter_none_records_nothing(
    lich_agent_factory: Callable[..., Agent],
) -> None:
    plugin = OtelPlugin(environ={}, install_global=False)
    agent = lich_agent_factory(["hi"], objects=[("otel", plugin)],
                               otel={"exporter": "none"})
    assert (await agent.run("hello")).text == "hi"
    assert plugin.tracing is None


@pytest.mark.parametrize(("otel", "environ"), [
    ({"exporter": "none"}, {}),
    ({}, {"OTEL_SDK_DISABLED": "true"}),
], ids=["exporter-none", "sdk-disabled"])
def test_a_run_with_the_plugin_switched_off_imports_no_opentelemetry(
    tmp_path: Path, otel: dict[str, str], environ: dict[str, str]
) -> None:
    code = textwrap.dedent(f"""
        import asyncio, json, sys
        from lich.agent import Agent
        from lich.config import LichConfig
        from lich.testing import ScriptedChat

        config = LichConfig(work_dir={str(tmp_path)!r}, plugins=("otel",),
                            tables={{'otel': {otel!r}}},
                            persist_sessions=False)
        agent = Agent(config, chat=ScriptedChat(["hi", "again"]))
        assert [r.status for r in agent.host.reports] == ["loaded"]
        assert not agent.host.needs("lich_event", config)  # no event hook call per event
        for task in ("hello", "more"):
            assert asyncio.run(agent.run(task)).text in ("hi", "again")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry.")
                                and not m.startswith("opentelemetry.exporter"))))
    """)
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LICH_"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**env, **environ}, check=False)
    assert done.returncode == 0, done.stderr
    # What importing the plugin finds (see above), and nothing of the API or the SDK.
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["opentelemetry.sdk"]


def test_lich_config_validate_checks_the_plugin(tmp_path: Path) -> None:
    """The settings and the variables are checked by ``lich config validate`` as by a run."""
    import os

    (tmp_path / ".lich").mkdir()
    config = tmp_path / ".lich" / "config.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LICH_"))}

    def validate(text: str, **extra: str) -> subprocess.CompletedProcess[str]:
        config.write_text('plugins = ["otel"]\n' + text, encoding="utf-8")
        # (The test's own project: trusted, or its [otel] table would be ignored.)
        return subprocess.run([sys.executable, "-m", "lich", "config", "validate"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              env={**env, **SUITE_TRUST, **extra}, check=False)

    ok = validate('[otel]\nexporter = "console"\ncapture_content = true\n')
    assert ok.returncode == 0, ok.stderr
    bad = validate('[otel]\nexporter = "zipkin"\n')
    assert bad.returncode == 2
    assert ("$.otel.exporter: must be one of 'otlp_http', 'console', 'none', "
            "got 'zipkin'") in bad.stderr
    env_bad = validate("", OTEL_TRACES_EXPORTER="zipkin")
    assert env_bad.returncode == 2
    assert "OTEL_TRACES_EXPORTER: 'zipkin' is not an exporter" in env_bad.stderr


def test_an_unreachable_collector_is_one_warning_line_and_does_not_hold_the_exit(
    tmp_path: Path, lich_scripted_server: Callable[..., Any]
) -> None:
    """``+otel`` with no collector: one line of lich's, none of the exporter's retries,
    and the exit does not wait for an export that cannot succeed — here the exporter
    would retry for ten minutes and the flush wait is the longest allowed, so a
    process that waited would be killed by the subprocess timeout."""
    from lich_env import lich_env

    from lich.testing.ports import refused_port

    model = lich_scripted_server([Reply("hello back")])
    with refused_port() as port:  # bound, not listening: connections are refused
        config = tmp_path / "lich.toml"
        config.write_text(
            'plugins = ["+otel"]\nstream = false\n'
            f'[otel]\nendpoint = "http://127.0.0.1:{port}"\nflush_timeout_s = 300\n',
            encoding="utf-8")
        env = lich_env(tmp_path, OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="600")
        done = subprocess.run(
            [sys.executable, "-m", "lich", "--config", str(config), "--base-url",
             f"{model.base_url}", "--model", "m", "say hello"],
            capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hello back"
    otel_lines = [line for line in done.stderr.splitlines() if "otel" in line.lower()
                  or "traces" in line or "export" in line.lower()]
    assert otel_lines == [f"[lich:warn] otel: spans cannot be exported to "
                          f"http://127.0.0.1:{port}/v1/traces (connection refused); "
                          "they are dropped"], done.stderr
    assert "Transient error" not in done.stderr
    assert "HTTPConnectionPool" not in done.stderr
