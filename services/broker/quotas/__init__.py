"""Client quotas (seed 000 §4.9, docs/quotas.md): byte-rate quotas for produce and fetch and
request-time quotas, per (user, client-id) / user / client-id with ``<default>`` entities.

* :mod:`rate` — sampled-window rate and throttle delay (pure);
* :mod:`entities` — etcd keys, quota values, the precedence (pure);
* :mod:`manager` — sensors per quota group, delays, holds, metrics (the broker's loop);
* :mod:`watcher` — keeps the manager's configs equal to etcd;
* :mod:`timing` — run time of a handler coroutine for the request quota.
"""
