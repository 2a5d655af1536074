"""Every benchmark runs, at a tiny size, and reports sane, complete results.

The full run (``python -m bench``) is not part of CI; this keeps it working.
Nothing here asserts a timing: only the shape of the results and that every
run did what it claims (right answers, clean exits, the numbers it derives).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` lives at the repository root, beside `lich`
    sys.path.insert(0, str(ROOT))

from bench import __main__ as runner  # noqa: E402
from bench._common import Target, markdown_table, percentile, summary  # noqa: E402
from bench._suite import SUITE, run_one  # noqa: E402

# Every benchmark at a tiny size, each in processes of its own: the slowest module of the
# suite after the system tests; `-m "not slow"` leaves it out of a quick loop.
pytestmark = pytest.mark.slow


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def _check_summary(s: dict[str, Any], n: int | None = None) -> None:
    assert s["min"] <= s["median"] <= s["max"]
    if n is not None:
        assert s["n"] == n


def _check_common(result: dict[str, Any], tables: list[tuple[str, str]]) -> None:
    assert result["checks"] == []
    assert tables
    for title, table in tables:
        assert title
        lines = table.splitlines()
        assert len(lines) >= 3
        assert all(line.startswith("| ") and line.endswith(" |") for line in lines)
        widths = {len(line) for line in lines}
        assert len(widths) == 1  # padded: the table also reads as plain text
    for t in result["targets"]:
        assert set(t) >= {"name", "op", "limit", "measured", "unit", "ok"}
        assert t["ok"] == (t["measured"] <= t["limit"] if t["op"] == "<="
                           else t["measured"] >= t["limit"])
    json.dumps(result)  # everything goes into results.json


def test_b1_loop_overhead() -> None:
    from bench.b1_loop import VARIANTS

    result, tables = run_one("b1", quick=True)
    _check_common(result, tables)
    turns, reps = SUITE["b1"][2]["turns"], SUITE["b1"][2]["reps"]
    assert sorted(result["runs"]) == sorted(str(n) for n in turns)
    for n, per_n in result["runs"].items():
        assert set(per_n) == set(VARIANTS)
        assert {"raw", "raw stream", "raw sync", "raw sync stream", "lich", "lich stream",
                "lich approvals", "lich otel+prices", "lich idle plugins"} <= set(per_n)
        for name, e in per_n.items():
            assert len(e["samples_s"]) == reps
            assert all(_positive(x) for x in e["samples_s"] + e["cpu_samples_s"])
            _check_summary(e["total_s"], reps)
            assert e["per_turn_s"]["median"] == pytest.approx(e["total_s"]["median"] / int(n))
            if name.startswith("lich"):
                stream = "stream" in name
                assert e["vs"] == ("raw stream" if stream else "raw")
                assert e["vs_sync"] == ("raw sync stream" if stream else "raw sync")
                for key, base in (("ratio", e["vs"]), ("ratio_sync", e["vs_sync"])):
                    pairs = [a / b for a, b in zip(e["samples_s"], per_n[base]["samples_s"],
                                                   strict=True)]
                    assert e[key]["median"] == pytest.approx(statistics.median(pairs))
                _check_summary(e["overhead_per_turn_s"], reps)
                if VARIANTS[name].config or VARIANTS[name].objects:
                    assert e["ratio_vs_lich"]["median"] > 0
    names = [t["name"] for t in result["targets"]]
    assert any("lich ÷ sync raw" in n for n in names)
    assert any("lich stream ÷ sync raw" in n for n in names)
    # The plugin rows are B8's targets (in process); here they are reported only.
    assert not any("approvals" in n or "otel+prices" in n for n in names)
    assert {"cpu_extra_per_turn_s", "extra_per_turn_s"} <= set(
        result["runs"][str(max(result["params"]["turns"]))]["lich approvals"])


@pytest.mark.parametrize("name", ["b1cli", "b2cold"])
def test_b1_cli_and_b2_cold(name: str) -> None:
    from bench.b1_cli import CLI_VARIANTS

    result, tables = run_one(name, quick=True)
    _check_common(result, tables)  # checks: every process answered as scripted
    turns, reps = SUITE[name][2]["turns"], SUITE[name][2]["reps"]
    assert sorted(result["runs"]) == sorted(str(n) for n in turns)
    for per_n in result["runs"].values():
        assert set(per_n) == set(CLI_VARIANTS)
        for variant, e in per_n.items():
            assert len(e["samples_s"]) == len(e["cpu_samples_s"]) == reps
            assert all(_positive(x) for x in e["samples_s"] + e["cpu_samples_s"])
            if variant.startswith("lich"):
                pairs = [a / b for a, b in zip(e["samples_s"],
                                               per_n[e["vs_sync"]]["samples_s"], strict=True)]
                assert e["ratio_sync"]["median"] == pytest.approx(statistics.median(pairs))
                assert e["vs_async"] == e["vs_sync"].replace("raw sync", "raw")
    if name == "b1cli":
        marginal = result["marginal"]["variants"]
        assert set(marginal) == set(CLI_VARIANTS)
        assert len(result["targets"]) == 4  # one per lich variant, on the cost per turn
        for variant, m in marginal.items():
            # Read inside each run at the largest N too, from the model server's clock.
            assert m["in_run_per_turn_s"]["n"] == reps
            assert _positive(m["in_run_per_turn_s"]["median"])
            if variant.startswith("lich"):
                base = marginal[variant.replace("lich", "raw sync").replace(" --json", "")]
                assert m["ratio_sync"] == pytest.approx(
                    m["per_turn_s"]["median"] / base["per_turn_s"]["median"])
                assert "in_run_ratio_sync" in m
    else:
        assert result["marginal"] == {}
        assert [t["name"].startswith("B2-cold") for t in result["targets"]] == [True, True]


def test_b1_work_counts_the_calls_of_a_turn() -> None:
    from bench.b1_cli import CLI_VARIANTS

    result, tables = run_one("b1work", quick=True)
    _check_common(result, tables)  # every counted process answered as scripted
    assert result["targets"] == []  # counted, not timed: reported beside B1-cli
    rows = result["per_turn"]
    assert set(rows) == set(SUITE["b1work"][2]["variants"]) <= set(CLI_VARIANTS)
    for name, e in rows.items():
        # A tool turn is a model request and a tool call: never free.
        assert e["python"] > 10, name
        assert e["builtin"] > 0, name
        if result["strace"] == "used":
            assert e["syscalls"] == pytest.approx(sum(e["by_syscall"].values()))
            assert e["by_syscall"].get("sendto", 0) + e["by_syscall"].get("write", 0) >= 1
    # The lich command writes its transcript (and --json its event lines) every turn;
    # the raw loop writes nothing.
    if result["strace"] == "used":
        assert rows["lich"]["by_syscall"].get("write", 0) >= 1
        assert rows["lich --json"]["by_syscall"]["write"] > rows["lich"]["by_syscall"]["write"]
        assert rows["raw sync"]["by_syscall"].get("write", 0) == 0


def test_the_call_counter_counts_every_thread_and_refuses_bad_arguments(
    tmp_path: Path,
) -> None:
    import subprocess

    script = tmp_path / "work.py"
    script.write_text(
        "import sys, threading\n"
        "def f():\n    pass\n"
        "n = int(sys.argv[1])\n"
        "def many():\n    for _ in range(n):\n        f()\n"
        "t = threading.Thread(target=many)\nt.start()\nt.join()\nmany()\n",
        encoding="utf-8")
    counter = str(ROOT / "bench" / "_count_calls.py")
    counts = []
    for n in (10, 110):
        out = tmp_path / f"{n}.json"
        subprocess.run([sys.executable, counter, str(out), str(script), str(n)], check=True,
                       timeout=60)
        counts.append(json.loads(out.read_text(encoding="utf-8")))
    # 100 more calls of f in each of two threads.
    assert counts[1]["python"] - counts[0]["python"] == 200
    bad = subprocess.run([sys.executable, counter, str(tmp_path / "x.json"), "-m"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2
    assert "usage: _count_calls.py" in bad.stderr


def test_strace_tables_are_read_by_name() -> None:
    from bench.b1_work import _strace_table

    text = (
        "% time     seconds  usecs/call     calls    errors syscall\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        " 40.00    0.000400           4       100           write\n"
        " 30.00    0.000300           3        90        12 openat\n"
        "------ ----------- ----------- --------- --------- ----------------\n"
        "100.00    0.001000           5       190        12 total\n")
    assert _strace_table(text) == {"write": 100, "openat": 90}


def test_b2_startup() -> None:
    result, tables = run_one("b2", quick=True)
    _check_common(result, tables)
    plugins = SUITE["b2"][2]["plugins"]
    # The generated distributions are installed (listed as available) in one venv only.
    assert result["plugins_seen"]["0"] == 0
    assert result["plugins_seen"][str(plugins)] >= plugins
    for per in result["summary"].values():
        assert set(per) == {"python -c pass", "lich --version", "lich --help", "lich plugins"}
        assert all(_positive(s["median"]) for s in per.values())
    assert len(result["targets"]) == 2


def test_b3_gateway() -> None:
    result, tables = run_one("b3", quick=True)
    _check_common(result, tables)
    assert result["gateway_exit_code"] == 0  # stopped gracefully on SIGTERM
    assert result["gateway_idle_rss_kib"] > 0
    (k, m), = SUITE["b3"][2]["loads"]
    load = result["loads"][str(k)]
    for side in ("direct", "webhook"):
        for run in load["runs"][side]:
            assert run["messages"] == k * m
            assert run["problem_count"] == 0
            assert run["p50_s"] <= run["p99_s"]
            assert _positive(run["msgs_per_s"])
            assert _positive(run["cpu_ms_per_msg"])
    assert load["gateway_peak_rss_kib"] >= load["gateway_rss_after_kib"] > 0


def test_b4_transcripts() -> None:
    result, tables = run_one("b4", quick=True)
    _check_common(result, tables)
    for key in ("append_us_per_record", "list_s", "resume_s", "resume_us_per_message"):
        assert _positive(result[key]["median"])


def test_b10_checkpoints() -> None:
    result, tables = run_one("b10", quick=True)
    _check_common(result, tables)
    for key in ("unchanged_s", "changed_s", "rewind_s"):
        assert _positive(result[key]["median"])


def test_b5_memory() -> None:
    result, tables = run_one("b5", quick=True)
    _check_common(result, tables)
    turns = SUITE["b5"][2]["turns"]
    # system, user, then an assistant call and a tool result per turn, then the answer
    assert result["run_messages"] == 2 + 2 * turns + 1
    assert result["run_peak_rss_kib"]["median"] >= result["run_rss_before_kib"]["median"] > 0
    assert result["gateway_idle_rss_kib"]["median"] > result["python_bare_peak_kib"]["median"]


def test_b6_telemetry() -> None:
    result, tables = run_one("b6", quick=True)
    _check_common(result, tables)  # checks: every run answered, every span was received
    turns, reps = SUITE["b6"][2]["turns"], SUITE["b6"][2]["reps"]
    runs = result["runs"]
    assert set(runs) == {"plain", "otel", "otel capture"}
    # Warm-up and measured runs of both otel variants, 2N + 2 spans each.
    assert result["spans_exported"] == 2 * (reps + 1) * (2 * turns + 2)
    for name, e in runs.items():
        assert len(e["samples_s"]) == reps
        assert all(_positive(x) for x in e["samples_s"] + e["cpu_samples_s"])
        if name != "plain":
            paired = [a / b for a, b in zip(e["samples_s"], runs["plain"]["samples_s"],
                                            strict=True)]
            assert e["ratio"]["median"] == pytest.approx(statistics.median(paired))
            _check_summary(e["overhead_per_turn_s"], reps)
    assert [t["name"].split(" at ")[0] for t in result["targets"]] == [
        "B6 otel ÷ plain", "B6 otel CPU overhead per turn"]


def test_b7_mcp() -> None:
    pytest.importorskip("mcp", reason="the MCP SDK (lich-agent[mcp]) is not installed")
    result, tables = run_one("b7", quick=True)
    _check_common(result, tables)
    reps = SUITE["b7"][2]["reps"]
    _check_summary(result["direct_per_call_s"], reps)
    _check_summary(result["lich_per_call_s"], reps)
    _check_summary(result["direct_cpu_per_call_s"], reps)
    _check_summary(result["lich_cpu_per_call_s"], reps)
    _check_summary(result["paired_ratio"], reps)
    assert _positive(result["ratio"])
    assert result["ratio"] == pytest.approx(
        result["lich_per_call_s"]["median"] / result["direct_per_call_s"]["median"])
    assert result["cpu_ratio"] == pytest.approx(
        result["lich_cpu_per_call_s"]["median"] / result["direct_cpu_per_call_s"]["median"])


def test_b8_plugins() -> None:
    from bench.b8_plugins import PER_TURN_HOOKS, VARIANTS

    result, tables = run_one("b8", quick=True)
    _check_common(result, tables)
    reps, turns = SUITE["b8"][2]["reps"], SUITE["b8"][2]["turns"]
    runs = result["runs"]
    assert set(runs) == set(VARIANTS)
    for name, e in runs.items():
        assert len(e["cpu_samples_s"]) == reps
        assert all(_positive(x) for x in e["cpu_samples_s"])
        _check_summary(e["cpu_per_turn_s"], reps)
        assert set(e["hooks"]) <= set(PER_TURN_HOOKS)
        if name != "plain":
            extra = [(a - b) / turns for a, b in zip(e["cpu_samples_s"],
                                                      runs["plain"]["cpu_samples_s"], strict=True)]
            assert e["cpu_extra_per_turn_s"]["median"] == pytest.approx(statistics.median(extra))
    # What each variant calls per turn: nothing for the plugins that are not configured.
    assert runs["plain"]["hooks"] == runs["idle plugins"]["hooks"] == []
    assert runs["approvals"]["hooks"] == ["lich_before_tool_call", "lich_check_tool_call"]
    assert runs["prices+budget"]["hooks"] == ["lich_before_model_call", "lich_price_call"]
    assert runs["otel+prices"]["hooks"] == ["lich_price_call", "lich_event"]
    assert {t["name"].split(":")[0] for t in result["targets"]} == {
        "B8 approvals", "B8 otel+prices"}


def test_b9_cluster() -> None:
    from bench.b9_cluster import BASELINE, SIDES
    from lich.testing.postgres import PostgresUnavailable, find_binaries

    try:
        find_binaries()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    result, tables = run_one("b9", quick=True)
    _check_common(result, tables)
    small = SUITE["b9"][2]
    k, m, reps = small["k"], small["m"], small["reps"]
    assert result["params"]["partitions"] == min(small["partitions"], k)
    assert list(result["sides"]) == list(SIDES)
    for side, e in result["sides"].items():
        # Every process of every deployment stopped cleanly on SIGTERM.
        assert e["exit_codes"] == [0] * (SIDES[side][0] + 1)
        assert len(e["runs"]) == reps
        for run in e["runs"]:
            assert run["messages"] == k * m
            assert run["problem_count"] == 0
            assert run["p50_s"] <= run["p99_s"]
            assert _positive(run["msgs_per_s"])
        _check_summary(e["msgs_per_s"], reps)
        _check_summary(e["ratio"], reps)
        base = result["sides"][BASELINE]["runs"]
        assert e["ratio"]["median"] == pytest.approx(statistics.median(
            [r["msgs_per_s"] / b["msgs_per_s"] for r, b in zip(e["runs"], base, strict=True)]))
    assert result["sides"][BASELINE]["ratio"]["median"] == pytest.approx(1.0)
    assert all(n == 0 for n in result["stream_depths_at_end"].values())
    assert len(result["stream_depths_at_end"]) == 2  # the two cluster deployments
    # The report says why the ratio, not the number of workers, is what counts here.
    assert "more workers cannot add throughput" in tables[0][0]


def test_runner_writes_results_and_prints_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.json"
    assert runner.main(["--only", "b4", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "B4 transcripts" in printed
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data) >= {"meta", "b4", "seconds"}
    assert data["meta"]["size"] == "quick"
    assert data["b4"]["checks"] == []


def test_runner_refuses_an_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        runner.main(["--only", "b99"])
    assert exc.value.code == 2
    assert "b99" in capsys.readouterr().err


def test_common_helpers() -> None:
    assert summary([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}
    assert percentile([5, 1, 4, 2, 3], 50) == 3
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([7], 99) == 7
    assert Target("t", "<=", 1.5, 1.5).ok
    assert not Target("t", ">=", 0.7, 0.69).ok
    with pytest.raises(ValueError, match="op"):
        Target("t", "<", 1, 1)
    table = markdown_table(["a", "bb"], [["xyz", 1]])
    assert table.splitlines() == ["| a   | bb |", "| --- | -- |", "| xyz | 1  |"]
