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
(``DATABASE_URL``, ``*_DSN``), which carries a password, or when it is one
of the well-known names of tools that hand a credential over the environment
(``SSHPASS``, ``BW_SESSION``, ``OP_SESSION_*``, ``CI_JOB_JWT*``, ``*_JWT``). A
few well-known names that match but hold no secret (``PWD``, ``OLDPWD``,
``SSH_AUTH_SOCK``, a socket path) are exempt.

A *value* is secret, whatever its variable is called, when it holds a URL with
credentials (userinfo, or a query parameter such as ``password=``/``token=``:
the rule of :func:`redact_url`), a PEM private key, or a token of a format
that secret scanners know by its shape (:data:`VALUE_RULES`: the rule ids and
patterns of gitleaks' default configuration, restated here as facts).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = [
    "REDACTED",
    "VALUE_RULES",
    "is_secret_entry",
    "is_secret_name",
    "is_secret_value",
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
    "JWT", "SSHPASS",
})
# Whole names and prefixes of tools that pass a credential in the environment: sshpass
# (SSHPASS), Bitwarden's CLI (BW_SESSION), 1Password's CLI (OP_SESSION_<account>),
# GitLab CI's ID tokens (CI_JOB_JWT, CI_JOB_JWT_V1, CI_JOB_JWT_V2).
_SECRET_NAMES = frozenset({"BW_SESSION"})
_SECRET_PREFIXES = ("OP_SESSION_", "CI_JOB_JWT")
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

VALUE_RULES: tuple[tuple[str, str], ...] = (
    # (gitleaks rule id, pattern): tokens recognised by their shape.
    ("private-key", r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"),
    ("stripe-access-token", r"\b(?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{8,99}"),
    ("github-pat", r"\bghp_[0-9a-zA-Z]{36}"),
    ("github-oauth", r"\bgho_[0-9a-zA-Z]{36}"),
    ("github-app-token", r"\b(?:ghu|ghs)_[0-9a-zA-Z]{36}"),
    ("github-refresh-token", r"\bghr_[0-9a-zA-Z]{36,76}"),
    ("github-fine-grained-pat", r"\bgithub_pat_[0-9a-zA-Z_]{82}"),
    ("gitlab-pat", r"\bglpat-[0-9a-zA-Z_-]{20}"),
    ("gitlab-ptt", r"\bglptt-[0-9a-zA-Z_-]{40}"),
    ("slack-token", r"\bxox[abprs]-[0-9a-zA-Z-]{10,}"),
    ("slack-app-token", r"\b(?i:xapp)-\d-[A-Za-z0-9]+-\d+-[A-Za-z0-9]+"),
    ("aws-access-token", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    ("gcp-api-key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("openai-api-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    ("anthropic-api-key", r"\bsk-ant-(?:api|admin)\d\d-[a-zA-Z0-9_-]{20,}"),
    ("huggingface-access-token", r"\bhf_[a-zA-Z]{34}\b"),
    ("npm-access-token", r"\bnpm_[A-Za-z0-9]{36}"),
    ("pypi-upload-token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}"),
    ("sendgrid-api-token", r"\bSG\.[a-zA-Z0-9=_.-]{66}"),
    ("digitalocean-pat", r"\bdop_v1_[a-f0-9]{64}"),
    ("shopify-access-token", r"\bshpat_[a-fA-F0-9]{32}"),
    ("doppler-api-token", r"\bdp\.pt\.[a-zA-Z0-9]{43}"),
    ("1password-service-account-token", r"\bops_eyJ[a-zA-Z0-9+/]{250,}={0,3}"),
    ("age-secret-key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    # Not a gitleaks id: a password in a keyword/value connection string (libpq's
    # "host=db password=…", ODBC's "Pwd=…;") or a query string without a URL around it.
    ("password-assignment", r"(?:^|[\s;&?])(?i:password|passwd|pwd)=[^\s&;]+"),
    ("jwt", r"\bey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9/\\_-]{17,}\.(?:[a-zA-Z0-9/\\_-]{10,}={0,2})?"),
)
"""Token formats secret by their shape, as ``(rule id, regular expression)``: the
ids and patterns of gitleaks' default rules (``config/gitleaks.toml``), and a
password assignment in a connection string."""
_SECRET_VALUE = re.compile("|".join(f"(?:{pattern})" for _, pattern in VALUE_RULES))
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
    if upper in _SECRET_NAMES or upper.startswith(_SECRET_PREFIXES):
        return True
    if any(word in _SECRET_WORDS for word in upper.split("_")):
        return True
    return any(part in upper for part in _SECRET_PARTS) or upper.endswith(_SECRET_SUFFIXES)


def is_secret_value(value: str) -> bool:
    """Whether ``value`` is a secret whatever names it: a URL with credentials in its
    userinfo or query (``?password=``), a private key, or a token of a known shape
    (:data:`VALUE_RULES`)."""
    if _CREDENTIALS_IN_URL.search(value) or _SECRET_VALUE.search(value):
        return True
    return "://" in value and redact_urls(value) != value


def is_secret_entry(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` holds a secret: a secret-looking name
    (:func:`is_secret_name`) or a secret value (:func:`is_secret_value`)."""
    return is_secret_name(name) or is_secret_value(value)


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
        # (An empty value hides nothing: left as it is, so a URL redacted once and
        # read again, its "[redacted]" cut off by the text around it, stays the same.)
        secret = [bool(v) and v != REDACTED and _secret_query_key(k) for k, v in pairs]
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
