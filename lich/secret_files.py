"""What makes a file a secret file: its name, or its content (a private key).

The rule :class:`lich.protected.ProtectedPaths` applies for every tool. Standard
library only, on purpose: ``grep_files``' worker (``python -I -S``, no
site-packages) loads this file by path and applies the very same rule.

By name (:data:`SECRET_FILE_GLOBS`, matched without case against the components
of a path below the root a tool works in; a glob with ``/`` matches that many
consecutive components, so ``.aws/credentials`` is the ``credentials`` file of
any ``.aws`` directory): dotenv files, key and certificate stores, ssh and gpg
directories and keys, and the credential files of the common tools (npm, pip,
git, curl/netrc, PostgreSQL, Docker, AWS, kubectl, gh, Google client secrets).

By content (:func:`holds_private_key`): a PEM private key block (``-----BEGIN
… PRIVATE KEY-----`` followed by its base64 body: RSA, EC, DSA, OpenSSH,
PKCS#8, encrypted PKCS#8, PGP private key blocks) or a PuTTY key, wherever it is
and whatever the file is called. The header alone, as a string in source code or
docs, is not a key.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Sequence

__all__ = [
    "PRIVATE_KEY_SCAN_BYTES",
    "SECRET_FILE_GLOBS",
    "fd_holds_private_key",
    "holds_private_key",
    "name_matches",
]

SECRET_FILE_GLOBS: tuple[str, ...] = (
    # dotenv files
    # (".env*" as the shell reads it: .envrc, .env-prod and .env_local hold the same)
    ".env*", "*.env",
    # keys, certificates with keys, key stores
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.ppk",
    # ssh and gpg
    ".ssh", ".gnupg", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "id_xmss*",
    # the credential files of common tools
    ".npmrc", ".yarnrc.yml", ".pypirc", ".netrc", "_netrc", ".git-credentials",
    ".pgpass", ".my.cnf", ".htpasswd", ".dockercfg", "credentials.json",
    "client_secret*.json", ".aws/credentials", ".docker/config.json", ".kube/config",
    ".config/gh/hosts.yml", ".azure/accesstokens.json", ".config/gcloud/credentials.db",
    ".config/gcloud/application_default_credentials.json",
    ".vault-token", ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials",
    ".terraformrc", "credentials.tfrc.json", ".boto", ".s3cfg", ".passwd-s3fs",
    ".composer/auth.json", ".config/rclone/rclone.conf", ".m2/settings-security.xml",
    "*.kdbx", ".password-store",
)
"""Secret files by name: :mod:`fnmatch` globs, lower case, matched without case."""

PRIVATE_KEY_SCAN_BYTES = 64 * 1024 * 1024
"""How much of a file :func:`fd_holds_private_key` reads (a key file is small; this
bounds the cost of checking a huge log before a window of it is read)."""

# The PEM header, optional RFC 1421 headers (Proc-Type:, DEK-Info:), a blank line,
# then base64: a key, not a string that names one.
# A line break, real or escaped as in a JSON string (a cloud service account's
# "private_key": "-----BEGIN PRIVATE KEY-----\nMIIE..." is a key file too).
_NL = rb"(?:\r?\n|(?:\\r)?\\n)"
_PEM_KEY = re.compile(
    rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[ \t]*" + _NL
    + rb"(?:[A-Za-z][A-Za-z0-9-]*:[^\r\n\\]*" + _NL + rb")*(?:[ \t]*" + _NL + rb")?"
    rb"[ \t]*[A-Za-z0-9+/]{16,}"
)
_PUTTY_KEY = re.compile(rb"(?m)^PuTTY-User-Key-File-[0-9]+: .*\r?\n(?:.*\r?\n){0,8}?"
                        rb"Private-Lines: [0-9]+")
_CHUNK = 1024 * 1024
_OVERLAP = 8192  # a key's header and first lines straddling two chunks


def name_matches(parts: Sequence[str], globs: Iterable[str]) -> bool:
    """Whether the path components ``parts`` hold a name one of ``globs`` (lower case)
    matches: a one-component glob any component, an ``a/b`` glob two consecutive ones."""
    lowered = [part.lower() for part in parts]
    for glob in globs:
        pieces = glob.split("/")
        width = len(pieces)
        for start in range(len(lowered) - width + 1):
            if all(fnmatch.fnmatchcase(lowered[start + i], pieces[i]) for i in range(width)):
                return True
    return False


def holds_private_key(data: bytes) -> bool:
    """Whether ``data`` holds a PEM private key block or a PuTTY private key."""
    return bool(_PEM_KEY.search(data) or _PUTTY_KEY.search(data))


def fd_holds_private_key(fd: int, limit: int = PRIVATE_KEY_SCAN_BYTES) -> bool:
    """Whether the file open as ``fd`` holds a private key in its first ``limit``
    bytes; read with ``pread`` (the descriptor's offset is left where it was), in
    overlapping chunks, so memory stays bounded."""
    offset = 0
    tail = b""
    while offset < limit:
        chunk = os.pread(fd, min(_CHUNK, limit - offset), offset)
        if not chunk:
            return False
        window = tail + chunk
        if holds_private_key(window):
            return True
        tail = window[-_OVERLAP:]
        offset += len(chunk)
    return False
