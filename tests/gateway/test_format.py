"""Splitting replies by how each platform counts length."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lich.gateway.formatting import sanitize_error, split_text, utf16_len
from lich.types import ProviderError

EMOJI = "\U0001F600"


def test_utf16_len_counts_astral_characters_twice():
    assert utf16_len("abc") == 3
    assert utf16_len(EMOJI) == 2
    assert utf16_len(f"a{EMOJI}é") == 4
    assert utf16_len("\ud83d") == 1  # a lone surrogate counts, never raises


def test_code_point_splitting_is_unchanged():
    assert split_text("aaaa bbbb", 4) == ["aaaa", "bbbb"]
    assert split_text("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert split_text(EMOJI * 5, 4) == [EMOJI * 4, EMOJI]


def test_utf16_splitting_never_cuts_a_surrogate_pair():
    # An odd limit: the fifth unit would be half an emoji, so each chunk holds two.
    assert split_text(EMOJI * 5, 5, utf16_len) == [EMOJI * 2, EMOJI * 2, EMOJI]
    assert split_text(f"ab{EMOJI}{EMOJI}", 3, utf16_len) == ["ab", EMOJI, EMOJI]


def test_utf16_splitting_still_prefers_line_and_space_boundaries():
    text = f"{EMOJI * 3}\n{EMOJI * 3} {EMOJI}"
    assert split_text(text, 8, utf16_len) == [EMOJI * 3, EMOJI * 3, EMOJI]
    assert split_text(text, 9, utf16_len) == [EMOJI * 3, f"{EMOJI * 3} {EMOJI}"]
    assert split_text(f"{EMOJI * 2} {EMOJI * 2}", 9, utf16_len) == [f"{EMOJI * 2} {EMOJI * 2}"]


def test_a_character_longer_than_the_limit_still_goes_out():
    assert split_text(EMOJI * 2, 1, utf16_len) == [EMOJI, EMOJI]


def test_bad_limit_is_refused():
    with pytest.raises(ValueError, match="limit must be at least 1"):
        split_text("x", 0, utf16_len)


@given(
    st.lists(st.sampled_from(["a", " ", "\n", "é", EMOJI, "\U0001F468\u200d\U0001F469"]),
             max_size=200).map("".join),
    st.integers(min_value=2, max_value=40),
)
def test_utf16_chunks_fit_and_keep_every_non_space_character(text: str, limit: int):
    chunks = split_text(text, limit, utf16_len)
    assert all(0 < utf16_len(c) <= limit for c in chunks)
    # Only whitespace at the cuts is dropped.
    assert "".join("".join(chunks).split()) == "".join(text.split())


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (500, "the model provider failed (a server error); try again shortly"),
        (502, "the model provider failed (a server error); try again shortly"),
        (503, "the model provider failed (a server error); try again shortly"),
        (429, "the model provider is rate limiting requests; try again shortly"),
        (529, "the model provider failed (a server error); try again shortly"),
        (None, "the model provider is rate limiting requests; try again shortly"),
    ],
)
def test_a_server_error_is_not_called_rate_limiting(status: int | None, said: str) -> None:
    # A 5xx is server_error (retried in place as a rate limit is); only 429 is rate_limit.
    kind = "rate_limit" if status in (429, None) else "server_error"
    error = ProviderError(kind, "p", f"HTTP {status}: upstream broke", status=status)
    text, ref = sanitize_error(error)
    assert text == f"agent error: {said} (ref {ref})"
