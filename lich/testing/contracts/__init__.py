"""Contract test suites: what every implementation of a plugin boundary must pass.

* :class:`BusContract` — a gateway bus (``lich_make_bus``): order per
  conversation, parallelism across conversations, the queue limit, shutdown
  (:mod:`lich.testing.contracts.bus`).
* :class:`SessionStoreContract` — a transcript store (``lich_make_session_store``):
  append, read, list, resume, damaged records, concurrent writers
  (:mod:`lich.testing.contracts.store`).

Subclass one in a test module and give it the fixture it names; the inherited
tests then run against your implementation. lich runs both against its own
defaults and its ``nats`` and ``postgres`` plugins. Importing this package needs
pytest (the test extra); nothing else of :mod:`lich.testing` does.
"""

from lich.testing.contracts.bus import BusContract, ContractModel, contract_responder
from lich.testing.contracts.store import SessionStoreContract

__all__ = ["BusContract", "ContractModel", "SessionStoreContract", "contract_responder"]
