"""The group coordinator service (issue 4): consumer groups and committed offsets.

Built so far (pure logic, no I/O, unit-tested in ``tests/coordinator``):

    records.py      the offsets-topic records as typed messages (EpochMarker, GroupMetadata,
                    OffsetCommit, PendingOffsetCommit), their byte layout (keys for
                    compaction, JSON values, the epoch header) and their decoder
    group.py        a group's durable + volatile state, GroupState, GroupTable.apply (the
                    one function that changes durable state, live and at load; fencing by
                    the highest epoch marker seen)
    handlers.py     Registry: one pure handler per request type, with its in-band error
    group_handlers.py  the group coordinator's requests (RPC protobufs, internal
                    dataclasses) and their registry HANDLERS
    outcome.py      Ctx (time, epoch, id generator) and Outcome (records, response, parked
                    key, replies to parked JoinGroup/SyncGroup requests)
    membership.py   JoinGroup / SyncGroup / Heartbeat / LeaveGroup / timers (tick)
    offsets.py      OffsetCommit (generation fencing) / OffsetFetch / DescribeGroups (lag
                    from measured log ends) / ListGroups / DeleteGroups / retention

The runtime and the process:

    runtime.py      PartitionRuntime: one task per owned offsets-topic partition (epoch
                    marker appended acks=all, replay below the high watermark until the
                    marker is applied, then handle -> append -> read back -> answer; parked
                    JoinGroup/SyncGroup; tick timers; NOT_COORDINATOR when fenced/released)
    ownership.py    registration under a lease at ``/headwater/coordinators/ids/<id>``,
                    partition p -> sorted(live ids)[p % n], ``/headwater/coordinators/owners/<p>``
                    taken with an epoch CAS, rebalanced on every change of the ids prefix
    servicer.py     the GroupCoordinator gRPC servicer (FindCoordinator from etcd, routing,
                    lag measured with ListOffsets at DescribeGroups time)
    app.py          ``python -m services.coordinator`` (creates ``__consumer_offsets``,
                    compacted, when absent; lag / member / rebalance metrics)

The controller publishes registered coordinators in UpdateMetadata
(``services.controller.coordinators``) and brokers serve them in
``MetadataResponse.coordinators``; ``LocalCluster(coordinators=N)`` and ``headwater dev`` run
them.
"""
