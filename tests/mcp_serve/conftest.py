"""The fixtures of ``test_serve.py`` (a work dir with the test plugins, a home, the hook
log, the server's stderr file), for the other modules here."""

from .test_serve import home, hook_log, stderr, work  # noqa: F401
