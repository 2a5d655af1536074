"""The ``nats`` bus: the gateway's inbound messages through NATS JetStream.

:mod:`lich.nats_bus.plugin` is the builtin plugin (entry point ``nats``):
``[bus] kind = "nats"`` makes the gateway publish every message to one
work-queue stream, partitioned by conversation, and run them from one durable
pull consumer per partition. :mod:`lich.nats_bus.settings` is the ``[bus]``
table, :mod:`lich.nats_bus.bus` the bus itself (it imports nats-py, the
``lich-agent[nats]`` extra, and is imported only when that bus is made). See
``docs/cluster.md``.
"""
