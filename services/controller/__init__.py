"""The controller service: one active instance (elected through etcd) drives cluster metadata.

Modules: ``election`` (who is active, the controller epoch), ``state`` (the etcd layout and its
JSON codecs), ``placement`` (replica assignment), ``events`` (the single event loop that owns
the in-memory cluster state), ``topics`` (topic commands run by that loop),
``broker_channels`` (controller -> broker RPCs), ``service`` (the gRPC servicer) and ``app``
(process wiring).
"""
