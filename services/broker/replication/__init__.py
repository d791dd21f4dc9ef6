"""Replication on the broker: follower fetching, ISR changes, controller calls.

Modules: ``peers`` (addresses and channels to other brokers and the controller),
``fetcher`` (one follower fetch session per leader broker), ``truncation`` (where a new
follower cuts its log: KIP-101/279), ``isr`` (shrink/expand proposals sent as AlterPartition),
``shutdown`` (controlled shutdown before the broker stops).
"""
