"""What every service process does the same way at start: reach etcd, publish readiness.

* :func:`connect_etcd` — connect to etcd with the service's security settings, retrying
  until ``timeout`` while etcd is not reachable yet (services may start before it);
* :func:`write_ready_file` — publish the bound ports as JSON once serving (what
  ``headwater dev`` and the tests wait for).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

from headwater.platform import etcd as hetcd
from headwater.platform.security_flags import PLAINTEXT, ServerSecurity

log = logging.getLogger(__name__)


def write_ready_file(path: Path, payload: dict[str, Any]) -> None:
    """Atomically (write + rename) publish ``payload`` as JSON."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


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
