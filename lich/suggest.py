"""Did you mean …? The one way lich suggests a name for a misspelt one: config keys,
plugin, hook, command, tool and provider-kind names. Public, so that a plugin's own
errors suggest the way lich's do."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["ONE_EDIT_MIN_LEN", "closest", "did_you_mean", "edit_distance"]


def edit_distance(a: str, b: str) -> int:
    """The Damerau–Levenshtein distance of ``a`` and ``b`` (optimal string alignment):
    how many single-character insertions, deletions, substitutions and swaps of two
    neighbouring characters turn one into the other (``chta`` → ``chat`` is 1)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i, *([0] * len(b))]
        for j, cb in enumerate(b, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1,
                             previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


#: Words this long or longer match a name one edit away (shorter ones would match
#: almost anything: ``ls`` is one edit from ``l``, ``s`` and every two-letter name).
ONE_EDIT_MIN_LEN = 3


def closest(word: str, known: Iterable[str], *, cutoff: float = 0.75) -> str | None:
    """The known name closest to a misspelt ``word``, if one is close enough: the one
    "did you mean" of lich (config keys, plugin and hook names, commands, tools).

    A name one edit away (:func:`edit_distance`: one swap, insertion, deletion or
    substitution, as git's "did you mean") wins for words of
    :data:`ONE_EDIT_MIN_LEN` letters or more, the first such name when several are;
    otherwise the most similar name whose :mod:`difflib` ratio reaches ``cutoff``.
    """
    import difflib

    names = [name for name in known if name != word]
    if len(word) >= ONE_EDIT_MIN_LEN:
        for name in names:
            if edit_distance(word, name) == 1:
                return name
    close = difflib.get_close_matches(word, names, n=1, cutoff=cutoff)
    return close[0] if close else None


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a misspelt ``key``, or ''."""
    close = closest(key, known)
    return f" (did you mean {close!r}?)" if close else ""
