"""``python -m lich``: the same as the ``lich`` command."""

import os
import sys

# `python -m` puts the current directory first on sys.path, which the `lich` command
# does not: inside a cloned repository its `click.py` or `httpx.py` would be imported
# (and run) in place of the library, before any trust is asked. Only `lich` itself is
# imported yet (lich/__init__ is lazy), so taking the entry out here covers the rest.
if not sys.flags.safe_path and sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]

from lich.cli import main

if __name__ == "__main__":
    main()
