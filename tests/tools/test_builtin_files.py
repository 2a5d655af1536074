"""read_file, write_file, edit_file, list_dir: the reference's file-tool tests, ported, and more."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import Runner


async def test_write_then_read_and_line_window(run: Runner, work: Path) -> None:
    wrote = await run("write_file", {"path": "rw/hello.txt", "content": "alpha\nbeta\n"})
    assert wrote.ok
    assert wrote.output == "wrote 11 chars to rw/hello.txt"
    assert (work / "rw" / "hello.txt").read_text() == "alpha\nbeta\n"

    whole = await run("read_file", {"path": "rw/hello.txt"})
    assert (whole.ok, whole.output) == (True, "alpha\nbeta\n")
    window = await run("read_file", {"path": "rw/hello.txt", "offset": 2, "limit": 1})
    assert window.output == "beta"
    # Splitting on \n makes the trailing newline an empty last line, as in the reference.
    assert (await run("read_file", {"path": "rw/hello.txt", "offset": 3})).output == ""
    assert (await run("read_file", {"path": "rw/hello.txt", "limit": 0})).output == ""
    assert (await run("read_file", {"path": "rw/hello.txt", "offset": 0, "limit": 1})).output == (
        "alpha"
    )


async def test_read_window_deep_in_a_large_file_streams(run: Runner, work: Path) -> None:
    lines = [f"line {i}" for i in range(1, 200_001)]
    (work / "big.log").write_text("\n".join(lines))
    result = await run("read_file", {"path": "big.log", "offset": 150_000, "limit": 3})
    assert result.output == "line 150000\nline 150001\nline 150002"


async def test_read_caps_at_its_own_limit_not_a_global_one(run: Runner, work: Path) -> None:
    (work / "wide.txt").write_text("x" * 300_000)
    result = await run("read_file", {"path": "wide.txt"})
    assert result.output.startswith("x" * 256_000 + "\n[... truncated, ")
    # [tools.read_file] max_output_chars tightens it.
    tight = await run("read_file", {"path": "wide.txt"}, settings={"max_output_chars": 100})
    assert tight.output.startswith("x" * 100 + "\n[... truncated, ")


async def test_read_errors(run: Runner, work: Path) -> None:
    assert (await run("read_file", {"path": "rw/absent.txt"})).error == "not_found: rw/absent.txt"
    assert (await run("read_file", {})).error == "missing_arg: path"
    assert (await run("read_file", {"path": ""})).error == "missing_arg: path"
    (work / "d").mkdir()
    assert (await run("read_file", {"path": "d"})).error == "is_a_directory: d"
    os.mkfifo(work / "pipe")
    assert (await run("read_file", {"path": "pipe"})).error == "not_a_regular_file: pipe"
    # Writing one neither blocks (no reader) nor writes into it, nor does editing.
    assert (await run("write_file", {"path": "pipe", "content": "x"})).error == (
        "not_a_regular_file: pipe")
    assert (await run("edit_file", {"path": "pipe", "old_string": "a", "new_string": "b"})
            ).error == "not_a_regular_file: pipe"


async def test_read_replaces_invalid_utf8(run: Runner, work: Path) -> None:
    (work / "latin.txt").write_bytes(b"caf\xe9\n")
    assert (await run("read_file", {"path": "latin.txt"})).output == "caf\ufffd\n"


async def test_write_empty_content_and_bad_content(run: Runner, work: Path) -> None:
    assert (await run("write_file", {"path": "empty.txt", "content": ""})).output == (
        "wrote 0 chars to empty.txt"
    )
    assert (work / "empty.txt").read_text() == ""
    assert (await run("write_file", {"path": "x.txt", "content": 5})).error == (
        "missing_arg: content"
    )
    assert (await run("write_file", {"path": "x.txt"})).error == "missing_arg: content"
    # Text with no UTF-8 form fails before the file is touched (not truncated).
    (work / "kept.txt").write_text("keep")
    assert (await run("write_file", {"path": "kept.txt", "content": "a\ud800"})).error == (
        "invalid_arg: content: surrogates not allowed")
    assert (await run("edit_file", {"path": "kept.txt", "old_string": "keep",
                                    "new_string": "\udfff"})).error == (
        "invalid_arg: new_string: surrogates not allowed")
    assert (work / "kept.txt").read_text() == "keep"
    assert not (work / "x.txt").exists()


async def test_write_keeps_content_byte_exact(run: Runner, work: Path) -> None:
    content = "crlf\r\nlf\nünï\r"
    await run("write_file", {"path": "exact.txt", "content": content})
    assert (work / "exact.txt").read_bytes() == content.encode()


@pytest.mark.parametrize(
    "target",
    [".lich/config.toml", ".lich/sessions/x.jsonl", "sub/.lich/x", ".env", ".env.local",
     "app/.env.production", ".envrc"],
)
async def test_writes_to_lich_dir_and_env_files_are_refused(
    run: Runner, work: Path, target: str
) -> None:
    result = await run("write_file", {"path": target, "content": "API_KEY=stolen"})
    assert result.error is not None
    assert result.error.startswith(f"forbidden_path: {target}")
    assert not (work / target).exists()


async def test_protected_write_through_a_symlink_is_refused(run: Runner, work: Path) -> None:
    (work / ".env").write_text("KEEP=1\n")
    (work / "notes.txt").symlink_to(work / ".env")
    result = await run("write_file", {"path": "notes.txt", "content": "overwritten"})
    assert result.error is not None
    assert result.error.startswith("forbidden_path: notes.txt")
    edit = await run("edit_file", {"path": "notes.txt", "old_string": "KEEP", "new_string": "X"})
    assert edit.error is not None
    assert edit.error.startswith("forbidden_path:")
    assert (work / ".env").read_text() == "KEEP=1\n"
    # Reading .env is allowed (only writes are refused).
    assert (await run("read_file", {"path": ".env"})).output == "KEEP=1\n"


async def test_edit_unique_missing_not_unique_and_replace_all(run: Runner, work: Path) -> None:
    (work / "e.txt").write_text("one two two three")
    assert (await run("edit_file", {"path": "e.txt", "old_string": "one", "new_string": "1"})
            ).output == "edited e.txt (replaced 1 occurrence(s))"
    assert (work / "e.txt").read_text() == "1 two two three"
    assert (await run("edit_file", {"path": "e.txt", "old_string": "zzz", "new_string": "q"})
            ).error == "old_string_not_found"
    assert (await run("edit_file", {"path": "e.txt", "old_string": "two", "new_string": "2"})
            ).error == "old_string_not_unique (2 occurrences)"
    assert (work / "e.txt").read_text() == "1 two two three"
    everything = await run(
        "edit_file", {"path": "e.txt", "old_string": "two", "new_string": "2", "replace_all": True}
    )
    assert everything.output == "edited e.txt (replaced 2 occurrence(s))"
    assert (work / "e.txt").read_text() == "1 2 2 three"
    assert (await run("edit_file", {"path": "nope.txt", "old_string": "a", "new_string": "b"})
            ).error == "not_found: nope.txt"


async def test_edit_is_literal_and_empty_new_string_deletes(run: Runner, work: Path) -> None:
    (work / "p.txt").write_text("price: $1 (a+b)* \\1 end")
    literal = await run(
        "edit_file", {"path": "p.txt", "old_string": "(a+b)*", "new_string": "$& $1 \\g<0> \\1"}
    )
    assert literal.ok, literal
    assert (work / "p.txt").read_text() == "price: $1 $& $1 \\g<0> \\1 \\1 end"
    deleted = await run("edit_file", {"path": "p.txt", "old_string": " end", "new_string": ""})
    assert deleted.ok
    assert (work / "p.txt").read_text() == "price: $1 $& $1 \\g<0> \\1 \\1"
    missing = await run("edit_file", {"path": "p.txt", "old_string": "price"})
    assert missing.error == "missing_arg: new_string"
    empty_old = await run("edit_file", {"path": "p.txt", "old_string": "", "new_string": "x"})
    assert empty_old.error == "missing_arg: old_string"


async def test_edit_refuses_non_utf8_instead_of_corrupting(run: Runner, work: Path) -> None:
    (work / "bin.txt").write_bytes(b"abc\xff\xfe def")
    result = await run("edit_file", {"path": "bin.txt", "old_string": "abc", "new_string": "x"})
    assert result.error == "invalid_encoding: bin.txt is not valid UTF-8 text"
    assert (work / "bin.txt").read_bytes() == b"abc\xff\xfe def"


async def test_edit_preserves_line_endings(run: Runner, work: Path) -> None:
    (work / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    await run("edit_file", {"path": "crlf.txt", "old_string": "b", "new_string": "c"})
    assert (work / "crlf.txt").read_bytes() == b"a\r\nc\r\n"


async def test_list_dir_depth_two_skips_and_sorts(run: Runner, work: Path) -> None:
    (work / "sub").mkdir()
    (work / "sub" / "inner.txt").write_text("hello")
    (work / "alpha.txt").write_text("abc")
    (work / "Beta.txt").write_text("")
    for skipped in ("node_modules", ".git", "dist", ".lich", ".cursor"):
        (work / skipped).mkdir()
        (work / skipped / "hidden.txt").write_text("x")
    result = await run("list_dir", {"path": ".", "depth": 2})
    assert result.ok
    lines = result.output.split("\n")
    assert lines == ["d sub/", "- alpha.txt (3 bytes)", "- Beta.txt (0 bytes)",
                     "- inner.txt (5 bytes)"]
    shallow = await run("list_dir", {})
    assert "- inner.txt (5 bytes)" not in shallow.output
    assert "node_modules" not in result.output
    assert "hidden" not in result.output


async def test_list_dir_says_when_it_lists_nothing(run: Runner, work: Path) -> None:
    (work / "empty").mkdir()
    (work / "only_skipped").mkdir()
    (work / "only_skipped" / "node_modules").mkdir()
    (work / "only_skipped" / ".git").mkdir()

    empty = await run("list_dir", {"path": "empty"})
    skipped = await run("list_dir", {"path": "only_skipped"})

    assert (empty.ok, empty.output) == (True, "(empty directory)")
    # Not an empty string (which reads as a failed call): what was left out, and why.
    assert skipped.ok
    assert skipped.output == ("(nothing listed: every entry is one that list_dir skips: "
                              "only_skipped/.git, only_skipped/node_modules)")


async def test_list_dir_depth_is_clamped_and_output_capped(run: Runner, work: Path) -> None:
    deep = work / "a" / "b" / "c" / "d" / "e" / "f"
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("x")
    listing = (await run("list_dir", {"depth": 99})).output
    assert "d d/" in listing  # level 4
    assert "d e/" not in listing  # level 5: beyond the clamp of 4
    for i in range(600):
        (work / f"f{i:03}.txt").write_text("")
    capped = (await run("list_dir", {})).output.split("\n")
    assert len(capped) == 501
    assert capped[-1] == "(... truncated at 500 entries)"


async def test_list_dir_errors(run: Runner, work: Path) -> None:
    assert (await run("list_dir", {"path": "missing"})).error == "not_found: missing"
    (work / "file.txt").write_text("x")
    assert (await run("list_dir", {"path": "file.txt"})).error == "not_a_directory: file.txt"


async def test_list_dir_describes_symlinks_without_following_them_out(
    run: Runner, work: Path, tmp_path: Path
) -> None:
    (work / "real").mkdir()
    (work / "real" / "in.txt").write_text("x")
    (work / "link_in").symlink_to(work / "real")
    (work / "out_dir").symlink_to(tmp_path / "outside")
    (work / "out_file").symlink_to(tmp_path / "outside" / "secret.txt")
    (work / "dangling").symlink_to(work / "nowhere")
    listing = (await run("list_dir", {"depth": 3})).output.split("\n")
    assert "d link_in/" in listing
    assert "- out_dir (symlink outside the work dir)" in listing
    assert "- out_file (symlink outside the work dir)" in listing
    assert "- dangling (broken symlink)" in listing
    # A link to a file that cannot be read is still described (by its stat).
    (work / "locked.txt").write_text("abc")
    (work / "locked.txt").chmod(0)
    (work / "to_locked").symlink_to("locked.txt")
    assert "- to_locked (3 bytes)" in (await run("list_dir", {})).output.split("\n")
    assert listing.count("- in.txt (1 bytes)") == 1  # reached through real/, not the link
    assert "secret" not in "\n".join(listing)
