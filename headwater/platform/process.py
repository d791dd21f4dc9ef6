"""What every service process does the same way at start: reach etcd.

* :func:`connect_etcd` — connect to etcd with the service's security settings, retrying
  until ``timeout`` while etcd is not reachable yet (services may start before it).

The rest of a process's life (ready file, signals, tasks, shutdown) is
:mod:`headwater.platform.runner`.
"""

from __future__ import annotations

import asyncio
import logging

from headwater.platform import etcd as hetcd
from headwater.platform.security_flags import PLAINTEXT, ServerSecurity

log = logging.getLogger(__name__)


async def connect_etcd(
    endpoint: str, timeout: float = 30.0, *, security: ServerSecurity = PLAINTEXT
) -> hetcd.Etcd:
    """A connected etcd client; retries every 0.5 s while etcd is unreachable and raises the
    last :class:`~headwater.platform.etcd.EtcdError` after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await hetcd.Etcd.connect(endpoint, **security.etcd_kwargs())
        except hetcd.EtcdError as exc:
            if asyncio.get_running_loop().time() >= deadline:
                raise
            log.warning("etcd at %s not reachable yet: %s", endpoint, exc)
            await asyncio.sleep(0.5)
