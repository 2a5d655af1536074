"""Which environment variables hold secrets, and how their values are kept out of text.

One rule for every place that must not reveal a secret: the terminal tool
scrubs these names from a command's environment, ``env_get`` redacts them,
and :func:`redact_values` replaces their *values* in text that came from
outside lich (a provider error body quoting the key) before it reaches an
event, the transcript or a log.

A name is secret-looking when one of its ``_``-separated words (any case) is
a credential word (``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PWD``,
``AUTH``, ...), when it contains ``SECRET``, ``PASSWORD``, ``TOKEN``,
``APIKEY``, ``CREDENTIAL`` ... anywhere (``GITHUBTOKEN``), or when it names a connection string
(``DATABASE_URL``, ``*_DSN``), which carries a password. A few well-known
names that match but hold no secret (``PWD``, ``OLDPWD``, ``SSH_AUTH_SOCK``,
a socket path) are exempt.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = [
    "REDACTED",
    "is_secret_entry",
    "is_secret_name",
    "redact_values",
    "secret_values",
]

REDACTED = "[redacted]"

# Words that, as a whole ``_``-separated part of a name, mark it as a secret.
_SECRET_WORDS = frozenset({
    "KEY", "KEYS", "APIKEY", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD",
    "PASSWORDS", "PASSWD", "PASS", "PWD", "AUTH", "CREDENTIAL", "CREDENTIALS", "CREDS",
    "COOKIE", "DSN", "PASSPHRASE", "OAUTH", "AUTHORIZATION", "PAT", "WEBHOOK",
})
# Substrings that mark a name wherever they occur (names written without ``_``).
_SECRET_PARTS = (
    "SECRET", "PASSWORD", "TOKEN", "APIKEY", "PASSPHRASE", "CREDENTIAL", "PRIVATEKEY",
    "ACCESSKEY",
)
# Names that hold connection strings (``postgres://user:password@host/db``).
_SECRET_SUFFIXES = ("DATABASE_URL", "DB_URL", "CONNECTION_STRING")
# Names that match the words above but hold no secret: the shell's working
# directories, and the path of the ssh agent's socket (git over ssh needs it).
_NOT_SECRET = frozenset({"PWD", "OLDPWD", "SSH_AUTH_SOCK"})
# A URL that carries its own credentials (``redis://:pw@host``, ``http://u:pw@proxy``):
# a secret whatever the variable is called.
_CREDENTIALS_IN_URL = re.compile(r"://[^/\s:@]*:[^/\s@]+@")
# A value shorter than this is not replaced in text: "1" or "yes" would turn
# every occurrence of a common word into noise and protect nothing.
_MIN_VALUE_CHARS = 6


def is_secret_name(name: str) -> bool:
    """Whether the environment variable ``name`` looks like it holds a secret.

    ``API_KEY``, ``OPENAI_KEY``, ``TOKEN``, ``PRIVATE_KEY``, ``MY_AUTH``,
    ``AWS_ACCESS_KEY_ID``, ``DATABASE_URL`` and ``MYSQL_PWD`` do; ``PATH``,
    ``HOME``, ``PWD`` and ``KEYBOARD_LAYOUT`` do not.
    """
    upper = name.upper()
    if upper in _NOT_SECRET:
        return False
    if any(word in _SECRET_WORDS for word in upper.split("_")):
        return True
    return any(part in upper for part in _SECRET_PARTS) or upper.endswith(_SECRET_SUFFIXES)


def is_secret_entry(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` holds a secret: a secret-looking name
    (:func:`is_secret_name`), or a value that is a URL with a password in it."""
    return is_secret_name(name) or bool(_CREDENTIALS_IN_URL.search(value))


def secret_values(
    names: Iterable[str] = (), env: Mapping[str, str] | None = None
) -> frozenset[str]:
    """The values in ``env`` (default ``os.environ``) of ``names`` and of every
    secret-looking name: what :func:`redact_values` must hide.

    Read when called, not cached: a key set after lich started is covered too.
    """
    source = os.environ if env is None else env
    wanted = set(names)
    return frozenset(
        value
        for key, value in source.items()
        if (key in wanted or is_secret_entry(key, value)) and len(value) >= _MIN_VALUE_CHARS
    )


def redact_values(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``values`` replaced by ``[redacted]``.

    Longer values first, so a key that contains another secret is hidden whole.
    """
    for value in sorted(values, key=len, reverse=True):
        if len(value) >= _MIN_VALUE_CHARS and value in text:
            text = text.replace(value, REDACTED)
    return text
