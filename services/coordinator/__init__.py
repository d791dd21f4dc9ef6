"""The group coordinator service (issue 4): consumer groups and committed offsets.

Built so far (pure logic, no I/O, unit-tested in ``tests/coordinator``):

    records.py      the offsets-topic record layout (keys for compaction, JSON values, the
                    epoch header) and its decoder
    group.py        a group's durable + volatile state, GroupState, GroupTable.replay (the
                    one function that changes durable state, live and at load; fencing by
                    the highest epoch marker seen)
    outcome.py      Ctx (time, epoch, id generator) and Outcome (records, response, parked
                    key, replies to parked JoinGroup/SyncGroup requests)
    membership.py   JoinGroup / SyncGroup / Heartbeat / LeaveGroup / timers (tick)
    offsets.py      OffsetCommit (generation fencing) / OffsetFetch / DescribeGroups (lag
                    from measured log ends) / ListGroups / DeleteGroups / retention

Not built yet (the runtime): the per-partition task that appends an Outcome's records to
``__consumer_offsets`` (acks=all), reads them back below the high watermark and replays them
before answering; etcd registration and partition ownership (``/headwater/coordinators/ids/``,
``/headwater/coordinators/owners/<p>`` with epoch CAS, marker append + replay on takeover);
the gRPC servicer and ``python -m services.coordinator``; lag polling and metrics;
LocalCluster/``headwater dev`` processes. The controller already publishes registered
coordinators in UpdateMetadata (``services.controller.coordinators``) and brokers serve them in
``MetadataResponse.coordinators``.
"""
