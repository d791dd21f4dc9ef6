"""Authentication (SCRAM -> bearer tokens) and authorization (ACLs) for every service.

* :mod:`.scram` — RFC 5802 SCRAM-SHA-256/512 through the scramp library, pure (no I/O).
* :mod:`.tokens` — HMAC-SHA256 signed bearer tokens and the cluster token key in etcd.
* :mod:`.authenticator` — the ``headwater.v1.Authenticator`` servicer (SCRAM over a stream).
* :mod:`.acls` — ACL bindings, matching and the etcd-backed ACL cache.
* :mod:`.rules` — the one table mapping every RPC to the resources and operations it needs.
* :mod:`.interceptor` — the server interceptor enforcing tokens and ACLs on every RPC.
* :mod:`.client` — the client side: token sources and the channel interceptor adding
  ``authorization: Bearer <token>``.
"""
