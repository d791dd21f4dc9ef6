"""Headwater: a partitioned, replicated commit log (Apache Kafka's design) in Python.

Two layers live here (docs/architecture.md "Layers"):

* the client-safe core, what every service and client shares: the record-batch format
  (``headwater.batch``), error codes (``headwater.errors``), config types
  (``headwater.config``, ``headwater.config_entities``), wire helpers
  (``headwater.protowire``, ``headwater.scram``), generated gRPC stubs (``headwater.v1``),
  the client library (``headwater.client``) and the CLI (``headwater.cli``); it imports
  nothing of the server, and ``pip install headwater`` installs only its dependencies;
* the server platform (``headwater.platform``, installed with ``headwater[server]``), which
  the services (``services.broker``, ``services.controller``, ``services.coordinator``)
  build on; ``headwater.dev`` (the local cluster of ``headwater dev``) uses it too.
"""

__version__ = "0.1.0"
