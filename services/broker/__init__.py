"""The Headwater broker: partition logs on local disk, served over gRPC.

Layers (each imports only the ones below it)::

    server.py / __main__.py      process wiring, tasks, signals, etcd registration
    handlers/                    one module per RPC (wire messages <-> replica manager)
    replica_manager.py           partitions hosted here; LeaderAndIsr / StopReplica; fencing
    partition.py                 one partition: its Log, leader epoch, high watermark, appends
    metadata_cache.py            the cluster view pushed by the controller (UpdateMetadata)
    storage/                     segments, indexes, recovery (no gRPC, no asyncio)
"""
