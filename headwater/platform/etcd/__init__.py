"""Headwater's etcd client: asyncio over grpc.aio stubs of etcd's v3 API.

Nothing else in Headwater speaks to etcd. Callers use :class:`Etcd` and the small builder
helpers (``cmp_*`` comparisons and ``op_*`` operations for :meth:`Etcd.txn`), all importable
from this package. By concern:

* :mod:`~headwater.platform.etcd.client` — :class:`Etcd`: connecting (TLS, client
  certificates), key/value and transaction calls, granting leases and starting watches. Every
  call is a grpc.aio call on the client's one channel, on the event loop that connected, with
  a gRPC deadline.
* :mod:`~headwater.platform.etcd.kv` — the value types returned (:class:`KeyMeta`,
  :class:`KeyValue`, :class:`PrefixSnapshot`, :class:`TxnResult`), the transaction builders,
  and their translation to and from etcd's messages.
* :mod:`~headwater.platform.etcd.lease` — :class:`LeaseKeeper`: one named keepalive thread per
  lease (not a task on the loop: a handler holding the loop for a while must not cost the
  process its lease); the loss is reported once, on the loop. A loop that has not run for
  ``LOOP_STALL_LIMIT_S`` is taken for wedged: the keeper stops refreshing, so the lease expires
  and another process can take over what it guarded.
* :mod:`~headwater.platform.etcd.watch` — :class:`Watch`: one etcd Watch stream per watch, read
  on the loop, consumed by one async iterator.
* :mod:`~headwater.platform.etcd.errors` — :class:`EtcdError` and its subclasses.
* :mod:`~headwater.platform.etcd.etcdserverpb` — the generated stubs (``make proto``).

Keys are ``str``; values are returned as ``bytes`` (``put`` accepts ``str`` or ``bytes``).
Every gRPC failure surfaces as :class:`EtcdError` (or a subclass) with the original exception
chained as ``__cause__``. A failed call never puts etcd aside: the next call tries it again
(an outage ends for every client as soon as etcd answers again and the channel reconnected).
"""

from headwater.platform.etcd.client import DEFAULT_RPC_TIMEOUT, Etcd
from headwater.platform.etcd.errors import (
    EtcdError,
    EtcdUnavailableError,
    EtcdWatchError,
    LeaseLostError,
)
from headwater.platform.etcd.kv import (
    Compare,
    KeyMeta,
    KeyValue,
    Op,
    PrefixSnapshot,
    TxnResult,
    cmp_absent,
    cmp_create,
    cmp_exists,
    cmp_mod,
    cmp_value,
    cmp_version,
    op_delete,
    op_delete_prefix,
    op_get,
    op_get_prefix,
    op_put,
)
from headwater.platform.etcd.lease import LOOP_STALL_LIMIT_S, RETRY_REFRESH_S, LeaseKeeper
from headwater.platform.etcd.watch import Watch, WatchEvent

__all__ = [
    "DEFAULT_RPC_TIMEOUT",
    "LOOP_STALL_LIMIT_S",
    "RETRY_REFRESH_S",
    "Compare",
    "Etcd",
    "EtcdError",
    "EtcdUnavailableError",
    "EtcdWatchError",
    "KeyMeta",
    "KeyValue",
    "LeaseKeeper",
    "LeaseLostError",
    "Op",
    "PrefixSnapshot",
    "TxnResult",
    "Watch",
    "WatchEvent",
    "cmp_absent",
    "cmp_create",
    "cmp_exists",
    "cmp_mod",
    "cmp_value",
    "cmp_version",
    "op_delete",
    "op_delete_prefix",
    "op_get",
    "op_get_prefix",
    "op_put",
]
