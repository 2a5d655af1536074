"""Example lich plugins, shipped as their own distribution (``lich-examples``).

Entry points (group ``lich``):

* ``data_tools`` (:mod:`lich_examples.tools`) — ``sqlite_query`` and
  ``json_query``, read-only data tools confined to the work dir;
* ``audit`` (:mod:`lich_examples.audit`) — an fsync'd JSONL log of every tool call;
* ``guard`` (:mod:`lich_examples.guard`) — a policy that denies tools, commands
  and paths and rewrites arguments.

This package imports nothing on purpose: lich lists installed plugins from
their metadata, and loads a module only when the config names it.
"""

__version__ = "0.1.0"
