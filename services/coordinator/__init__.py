"""The group coordinator service (arrives with the consumer-group issue, issue 4).

Nothing runs here yet; this package is the home the design card mandates. It will own:

* **consumer groups** — FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  DescribeGroups, and the group state machine (Empty, PreparingRebalance,
  CompletingRebalance, Stable, Dead) with generations fencing stale members
  (``ILLEGAL_GENERATION``), session timeouts, max poll interval and static membership;
* **committed offsets** — stored as records in an internal compacted offsets topic keyed by
  (group, topic, partition); the coordinator of a group is the leader of partition
  ``hash(group) mod offsets-topic partitions``, and its state is rebuilt by replaying that
  partition after a failover (records are the only source of state).

Until it lands, consumers use explicit assignment (``assign``/``seek``) without groups.
"""
