"""The local cluster: etcd, controllers and brokers as child processes on 127.0.0.1.

Used by ``headwater dev`` and by the tests. Nothing here is used in production deployments.
"""
