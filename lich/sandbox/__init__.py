"""The ``sandbox`` plugin: every process lich starts for a tool or an MCP server runs in
a bubblewrap sandbox (Linux namespaces), through the ``lich_make_process_runner`` seam.

* :mod:`lich.sandbox.settings` — the ``[sandbox]`` table (``mode``,
  ``profile``, ``read_paths``).
* :mod:`lich.sandbox.bwrap` — the probe (is ``bwrap`` there, new enough, and can it
  create its namespaces on this machine) and the sandbox's command line.
* :mod:`lich.sandbox.plugin` — the hooks: the runner, the config check, ``lich sandbox``.

See ``docs/sandbox.md`` for what each profile allows and what is not defended.
"""
