"""The fault-injection harness.

Modules: ``history`` (Jepsen-style operation history), ``checker`` (pure: history + final reads
+ replica logs -> report), ``proxy`` (per-link TCP proxies: cut, hang, heal), ``faults``
(process faults on LocalCluster children), ``workload`` (producer processes recording a
history, the final reader), ``replicas`` (each broker's on-disk log of a partition),
``cluster`` (a LocalCluster whose broker-to-broker links run through proxies, partition state
read from etcd).
"""
