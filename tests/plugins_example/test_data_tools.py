"""The ``data_tools`` example plugin: ``sqlite_query`` and ``json_query``."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from lich_examples.tools import json_query, sqlite_query

from lich.config import ConfigError
from lich.tools import ToolExecutor, ToolRegistry
from lich.types import ToolCall

from .conftest import build_agent, plan, run_plan, tool_results

PLUGINS = ("data_tools",)


def make_db(path: Path, rows: int = 3) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, bio TEXT)")
    people = [("ada", 36), ("bob", 12), ("cy", 18)]
    conn.executemany(
        "INSERT INTO users (name, age, bio) VALUES (?, ?, ?)",
        [(*people[i % 3], f"bio {i}") if i < 3 else (f"user{i}", i, "x" * 400)
         for i in range(rows)],
    )
    conn.commit()
    conn.close()


def db_rows(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM users ORDER BY id").fetchall()
    finally:
        conn.close()


async def sql(tmp_path: Path, *queries: dict[str, Any], **config: Any) -> list[Any]:
    _, result = await run_plan(
        tmp_path, *(("sqlite_query", q) for q in queries), plugins=PLUGINS, **config
    )
    return tool_results(result)


# --------------------------------------------------------------------------- sqlite_query


async def test_sqlite_query_answers_with_columns_and_rows(tmp_path: Path) -> None:
    make_db(tmp_path / "app.db")
    (answer,) = await sql(
        tmp_path,
        {"path": "app.db", "sql": "SELECT name, age FROM users WHERE age >= ? ORDER BY name",
         "params": [18]},
    )
    assert not answer.is_error, answer.content
    assert json.loads(answer.content) == {
        "columns": ["name", "age"],
        "rows": [["ada", 36], ["cy", 18]],
        "row_count": 2,
        "truncated": None,
    }


async def test_sqlite_query_allows_cte_explain_and_schema_pragmas(tmp_path: Path) -> None:
    make_db(tmp_path / "app.db")
    answers = await sql(
        tmp_path,
        {"path": "app.db", "sql": "WITH old AS (SELECT * FROM users WHERE age > 30) "
                                  "SELECT count(*) AS n FROM old"},
        {"path": "app.db", "sql": "PRAGMA table_info(users)"},
        {"path": "app.db", "sql": "EXPLAIN QUERY PLAN SELECT * FROM users WHERE id = 1"},
        {"path": "app.db", "sql": "-- tables\nSELECT name FROM sqlite_master WHERE type='table'"},
    )
    assert [a.is_error for a in answers] == [False] * 4, [a.content for a in answers]
    assert json.loads(answers[0].content)["rows"] == [[1]]
    assert [r[1] for r in json.loads(answers[1].content)["rows"]] == ["id", "name", "age", "bio"]
    assert json.loads(answers[3].content)["rows"] == [["users"]]


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("INSERT INTO users (name) VALUES ('eve')", "read_only: "),
        ("DELETE FROM users", "read_only: "),
        ("drop table users", "read_only: "),
        ("UPDATE users SET age = 0", "read_only: "),
        # Passes the keyword check; the authorizer (and mode=ro) refuse it.
        ("WITH x AS (SELECT 1) INSERT INTO users (name) SELECT 'eve' FROM x", "read_only: "),
        ("PRAGMA user_version = 7", "read_only: "),
        ("PRAGMA journal_mode = DELETE", "read_only: "),
        ("ATTACH DATABASE 'other.db' AS other", "read_only: "),
        ("SELECT 1; DELETE FROM users", "invalid_sql: "),
        ("VACUUM", "read_only: "),
    ],
)
async def test_sqlite_query_refuses_writes(tmp_path: Path, statement: str, expected: str) -> None:
    db = tmp_path / "app.db"
    make_db(db)
    before_rows, before_bytes = db_rows(db), db.read_bytes()
    (answer,) = await sql(tmp_path, {"path": "app.db", "sql": statement})
    assert answer.is_error
    assert json.loads(answer.content)["error"].startswith(expected), answer.content
    assert db_rows(db) == before_rows
    assert db.read_bytes() == before_bytes
    assert not (tmp_path / "other.db").exists()


async def test_sqlite_query_refuses_paths_outside_the_work_dir(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path_factory.mktemp("outside") / "secret.db"
    make_db(outside)
    (work / "link.db").symlink_to(outside)
    answers = await sql(
        work,
        {"path": "../" + outside.name, "sql": "SELECT 1"},
        {"path": str(outside), "sql": "SELECT * FROM users"},
        {"path": "link.db", "sql": "SELECT * FROM users"},
        {"path": "missing.db", "sql": "SELECT 1"},
    )
    errors = [json.loads(a.content)["error"] for a in answers]
    assert errors[0].startswith("path_escape: ")
    assert errors[1].startswith("path_escape: ")
    assert errors[2].startswith("path_escape: ")
    assert errors[3] == "not_found: missing.db"


async def test_sqlite_query_caps_rows_and_output(tmp_path: Path) -> None:
    make_db(tmp_path / "app.db", rows=60)
    answers = await sql(
        tmp_path,
        {"path": "app.db", "sql": "SELECT id FROM users ORDER BY id", "max_rows": 5},
        {"path": "app.db", "sql": "SELECT * FROM users ORDER BY id", "max_rows": 1000},
        {"path": "app.db", "sql": "SELECT id FROM users", "max_rows": 10**9},
        tools={"sqlite_query": {"max_output_chars": 2000, "max_rows": 20}},
    )
    by_rows, by_chars, clamped = (json.loads(a.content) for a in answers)
    assert by_rows["rows"] == [[1], [2], [3], [4], [5]]
    assert by_rows["truncated"] == "max_rows"
    assert by_chars["truncated"] == "max_output_chars"
    assert 0 < by_chars["row_count"] < 20
    assert len(answers[1].content) <= 2000
    # The argument cannot lift the configured ceiling.
    assert clamped["row_count"] == 20
    assert clamped["truncated"] == "max_rows"


def test_the_schemas_are_valid_closed_and_bound_the_limits() -> None:
    for item in (sqlite_query, json_query):
        jsonschema.Draft202012Validator.check_schema(dict(item.parameters))
        assert item.parameters["additionalProperties"] is False
    sql_props = sqlite_query.parameters["properties"]
    assert list(sql_props) == ["path", "sql", "params", "max_rows"]
    assert sqlite_query.parameters["required"] == ["path", "sql"]
    assert sql_props["max_rows"]["minimum"] == 1
    assert sql_props["max_rows"]["default"] == 100
    assert {s["type"] for s in sql_props["params"]["items"]["anyOf"]} == {
        "string", "integer", "number", "boolean", "null"
    }
    json_props = json_query.parameters["properties"]
    assert list(json_props) == ["path", "query", "max_results"]
    assert json_props["query"]["default"] == "$"
    assert json_props["max_results"]["minimum"] == 1


async def test_arguments_are_checked_before_the_query_runs(tmp_path: Path) -> None:
    make_db(tmp_path / "app.db")
    answers = await sql(
        tmp_path,
        {"path": "app.db", "sql": "SELECT ?", "params": [{"a": 1}]},
        {"path": "app.db", "sql": "SELECT 1", "max_rows": 0},
        {"path": "app.db", "sql": "SELECT 1", "max_rows": "5"},
        {"path": "app.db", "sql": "SELECT ?, ?", "params": [3, None], "max_rows": None},
    )
    errors = [json.loads(a.content).get("error") for a in answers[:3]]
    assert errors == [
        "invalid_arg: params[0]: expected string, integer, number, boolean or null, got object",
        "invalid_arg: max_rows: must be >= 1, got 0",
        "invalid_arg: max_rows: expected integer, got string",
    ]
    # An int stays an int (not 3.0), and a null max_rows is the default.
    assert json.loads(answers[3].content)["rows"] == [[3, None]]


async def test_sqlite_query_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("just text, not sqlite\n")
    (answer,) = await sql(tmp_path, {"path": "notes.txt", "sql": "SELECT 1"})
    assert json.loads(answer.content)["error"] == (
        "not_a_database: notes.txt is not a SQLite database"
    )


async def test_sqlite_query_stops_a_runaway_query(tmp_path: Path) -> None:
    make_db(tmp_path / "app.db")
    endless = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
               "SELECT count(*) FROM c")
    (answer,) = await sql(
        tmp_path, {"path": "app.db", "sql": endless}, tools={"sqlite_query": {"timeout_s": 1}}
    )
    assert json.loads(answer.content)["error"].startswith("timeout: ")


def test_bad_tool_settings_refuse_the_run_with_every_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_agent(tmp_path, plan(), plugins=PLUGINS, tools={
            "json_query": {"max_results": 0, "max_file_byte": 5},
            "sqlite_query": {"max_rows": "many", "max_output_chars": 10, "timeout_s": -1},
        })
    assert sorted(info.value.problems) == [
        "$.tools.json_query.max_file_byte: unknown key (did you mean 'max_file_bytes'?)",
        "$.tools.json_query.max_results: must be at least 1, got 0",
        "$.tools.sqlite_query.max_rows: expected an integer, got string",
        "$.tools.sqlite_query.timeout_s: must be greater than 0, got -1.0",
    ]


async def test_a_table_given_to_an_executor_unchecked_fails_the_call(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(json_query)
    executor = ToolExecutor(registry, work_dir=tmp_path,
                            tool_settings={"json_query": {"max_results": "all"}})
    result = await executor.execute(ToolCall("c1", "json_query", {"path": "x.json"}))
    assert result.error == (
        "invalid_setting: $.tools.json_query.max_results: expected an integer, got string")


# --------------------------------------------------------------------------- json_query

DOC = {
    "users": [
        {"name": "ada", "age": 36, "active": True, "tags": ["admin"]},
        {"name": "bob", "age": 12, "active": False},
        {"name": "cy", "age": 18, "active": True, "full name": "Cy Young"},
    ],
    "meta": {"count": 3, "owner": {"name": "root"}},
}


async def jq(tmp_path: Path, *queries: dict[str, Any], **config: Any) -> list[Any]:
    _, result = await run_plan(
        tmp_path, *(("json_query", q) for q in queries), plugins=PLUGINS, **config
    )
    return [json.loads(m.content) for m in tool_results(result)]


async def test_json_query_selects_by_path(tmp_path: Path) -> None:
    (tmp_path / "data.json").write_text(json.dumps(DOC))
    active, deep, last, whole = await jq(
        tmp_path,
        {"path": "data.json", "query": "$.users[?@.active && @.age >= 18].name"},
        {"path": "data.json", "query": "$..name"},
        {"path": "data.json", "query": "$.users[-1]"},
        {"path": "data.json"},
    )
    assert active == {
        "count": 2,
        "results": [{"path": "$['users'][0]['name']", "value": "ada"},
                    {"path": "$['users'][2]['name']", "value": "cy"}],
        "truncated": None,
    }
    assert [r["value"] for r in deep["results"]] == ["ada", "bob", "cy", "root"]
    assert deep["results"][3]["path"] == "$['meta']['owner']['name']"
    assert last["results"] == [{"path": "$['users'][2]", "value": DOC["users"][2]}]
    assert whole["results"] == [{"path": "$", "value": DOC}]


async def test_json_query_errors_are_clear(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    (tmp_path / "data.json").write_text(json.dumps(DOC))
    (tmp_path / "broken.json").write_text('{"a": [1, 2,\n  }')
    outside = tmp_path_factory.mktemp("elsewhere") / "x.json"
    outside.write_text("{}")
    assert outside.parent.parent == tmp_path.parent
    relative = f"../{outside.parent.name}/x.json"
    bad_query, no_root, long_query, broken, escape, absolute, too_big = await jq(
        tmp_path,
        {"path": "data.json", "query": "$.users[?@.age = 3]"},
        {"path": "data.json", "query": "users[0]"},
        {"path": "data.json", "query": "$" + ".a" * 1000},
        {"path": "broken.json"},
        {"path": relative},
        {"path": str(outside)},
        {"path": "data.json", "query": "$"},
        tools={"json_query": {"max_file_bytes": 50}},
    )
    assert bad_query["error"] == (
        "invalid_query: unexpected filter selector token '=', line 1, column 15")
    assert no_root["error"] == "invalid_query: expected '$', found 'u', line 1, column 0"
    assert long_query["error"] == "invalid_query: longer than 2000 characters"
    assert broken["error"] == "invalid_json: Expecting value (line 2, column 3)"
    assert escape["error"].startswith("path_escape: ")
    assert absolute["error"].startswith("path_escape: ")
    assert too_big["error"].startswith("file_too_large: data.json is ")


async def test_json_query_caps_results_but_counts_them_all(tmp_path: Path) -> None:
    (tmp_path / "big.json").write_text(json.dumps({"items": [{"id": i} for i in range(300)]}))
    capped, huge = await jq(
        tmp_path,
        {"path": "big.json", "query": "$.items[*].id", "max_results": 7},
        {"path": "big.json", "query": "$.items"},
        tools={"json_query": {"max_output_chars": 1500}},
    )
    assert capped["count"] == 300
    assert [r["value"] for r in capped["results"]] == list(range(7))
    assert capped["truncated"] == "max_results"
    assert huge["truncated"] == "max_output_chars"
    assert huge["results"][0]["value_chars"] > 1500
    assert huge["results"][0]["value_preview"].startswith('[{"id":0},{"id":1}')


# --------------------------------------------------------------------------- the query language


async def test_json_query_reports_what_the_library_cannot_evaluate(tmp_path: Path) -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(150):  # past the library's recursion limit for ".."
        node["a"] = {}
        node = node["a"]
    (tmp_path / "deep.json").write_text(json.dumps(deep))
    (nested,) = await jq(tmp_path, {"path": "deep.json", "query": "$..a"})
    assert nested["error"].startswith("query_failed: recursion limit exceeded")
    (parens,) = await jq(tmp_path, {"path": "deep.json", "query": "$[?" + "(" * 990 + "@.a"
                                    + ")" * 990 + "]"})
    assert parens["error"] == "invalid_query: nested too deeply"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("$", [DOC]),
        ("$.meta.count", [3]),
        ('$.meta["owner"].name', ["root"]),
        ("$.users[0:2].name", ["ada", "bob"]),
        ("$.users[::-1].age", [18, 12, 36]),
        ("$.users[5]", []),
        ("$.users[*].tags[0]", ["admin"]),
        ("$.users[?@.name == 'bob'].age", [12]),
        ('$.users[?@["full name"]].age', [18]),
        ("$.users[?!@.tags].name", ["bob", "cy"]),
        ("$.users[?@.age < 13 || @.age > 30].name", ["ada", "bob"]),
        ("$.users[?(@.active == true) && !(@.age < 20)].name", ["ada"]),
        ("$.users[?@.age > $.meta.count].name", ["ada", "bob", "cy"]),
        ("$.users[?@.age == '36']", []),
        ("$.users[?@.active == 1]", []),
        ("$.meta.*", [3, {"name": "root"}]),
        ("$.users[?length(@.tags) > 0].name", ["ada"]),
        ("$.users[?match(@.name, 'a.*')].age", [36]),
    ],
)
async def test_json_query_speaks_rfc_9535(tmp_path: Path, query: str, expected: list[Any]) -> None:
    (tmp_path / "data.json").write_text(json.dumps(DOC))
    (answer,) = await jq(tmp_path, {"path": "data.json", "query": query})
    assert [r["value"] for r in answer["results"]] == expected
    assert answer["count"] == len(expected)


async def test_malformed_queries_are_refused_naming_the_place(tmp_path: Path) -> None:
    (tmp_path / "data.json").write_text(json.dumps(DOC))
    queries = ["", "$.", "$[", "$.users[", "$.users[?@.age = 1]", "$['open", "$.a b",
               "$[?@.a == ]", "$[?@.* == 1]", "users"]
    answers = await jq(tmp_path, *({"path": "data.json", "query": q} for q in queries))
    for query, answer in zip(queries, answers, strict=True):
        assert re.fullmatch(r"invalid_query: .+, line 1, column \d+", answer["error"]), query
