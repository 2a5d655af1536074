"""Checkpoints: snapshots of the work dir before the agent writes, and ``lich rewind``.

The plugin (:mod:`lich.checkpoints.plugin`, entry point ``checkpoints``) snapshots
into a shadow git store (:mod:`lich.checkpoints.store`) and records each snapshot
in the transcript; :mod:`lich.checkpoints.ledger` reads the records back and plans
a rewind; :mod:`lich.checkpoints.cli` holds the commands. See docs/checkpoints.md.
"""
