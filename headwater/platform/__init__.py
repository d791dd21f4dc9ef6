"""The server platform: what every Headwater service (broker, controller, coordinator) shares.

* etcd access — :mod:`.etcd` (client), :mod:`.cluster_layout` (the cluster metadata's keys),
  :mod:`.producer_ids` (producer id blocks), :mod:`.dynamic_config` (cluster/broker configs);
* gRPC server set-up — :mod:`.server` (health, reflection, interceptors, shutdown),
  :mod:`.limits` (request limits), :mod:`.security_flags` (TLS / mTLS / authorizer flags),
  :mod:`.principal` (certificate subjects -> principals);
* authentication and ACLs — :mod:`.auth`;
* metrics — :mod:`.metrics` (per-RPC Prometheus metrics and error mapping);
* process set-up — :mod:`.process` (etcd connection at start, the ready file).

Layers (docs/architecture.md "Layers", enforced by ``lint-imports`` in ``make lint``): the
platform builds on the client-safe core (``headwater.client``, ``headwater.batch``,
``headwater.errors``, ``headwater.config``, ``headwater.v1``, ...) and never imports a
service; the services build on both and never on each other. The core never imports the
platform, and the platform's third-party dependencies (prometheus-client, cryptography,
grpcio-health-checking, grpcio-reflection) are installed by the ``server`` extra only (the etcd
client, :mod:`.etcd`, needs only grpcio and protobuf).
"""
