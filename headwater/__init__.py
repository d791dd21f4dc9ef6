"""Headwater: a partitioned, replicated commit log (Apache Kafka's design) in Python.

This package is what every service and client shares: the record-batch format
(``headwater.batch``), error codes (``headwater.errors``), generated gRPC stubs
(``headwater.v1``), the client library (``headwater.client``) and the CLI (``headwater.cli``).
"""

__version__ = "0.1.0"
