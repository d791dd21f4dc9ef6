"""Free TCP ports on 127.0.0.1, picked at run time."""

from __future__ import annotations

from headwater.dev.procs import free_port

__all__ = ["free_port", "free_ports"]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that were free a moment ago."""
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)
