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
    "redact_url",
    "redact_urls",
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


# Query parameters that carry a credential whatever a name rule says (signed URLs,
# OAuth codes); the rest are judged by is_secret_name.
_SECRET_QUERY_KEYS = frozenset({
    "SIG", "SIGNATURE", "CODE", "X_AMZ_SIGNATURE", "X_AMZ_CREDENTIAL", "X_GOOG_SIGNATURE",
    "X_GOOG_CREDENTIAL", "SAS", "SV", "SE", "SKOID", "SKTID",
})
# A URL in running text: a scheme, "://", then up to a space, a quote, a bracket or a
# comma (a list of servers is written "a, b" or "a,b").
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{},]+")


def redact_url(url: str) -> str:
    """``url`` without its credentials, for a line lich prints or logs: the userinfo
    (``nats://user:pw@host``, ``https://TOKEN@host``) and the value of every query
    parameter whose name looks secret (``?token=…``, ``&api_key=…``, ``&sig=…``)
    become ``[redacted]``; the rest (scheme, host, port, path) is kept, so the line
    still says where. A string that is not a URL is returned as it is."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{REDACTED}@{netloc.rpartition('@')[2]}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        secret = [_secret_query_key(k) for k, _ in pairs]
        if any(secret):
            query = urlencode([(k, REDACTED if hide else v)
                               for (k, v), hide in zip(pairs, secret, strict=True)],
                              safe="[]")
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _secret_query_key(key: str) -> bool:
    name = key.upper().replace("-", "_")
    return name in _SECRET_QUERY_KEYS or is_secret_name(name)


def redact_urls(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`): for error lines,
    log records and tables, which quote the URLs of providers, buses and stores."""
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)
