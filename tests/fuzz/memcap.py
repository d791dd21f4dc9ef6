"""Run each service process of a test cluster under a memory cap, and read what it used.

:class:`MemoryCap` picks the strongest mechanism the machine allows, in this order:

* **cgroup v2** — a child group with ``memory.max`` under the first writable cgroup2 mount
  whose root offers the ``memory`` controller (``memory.peak``, ``memory.events``
  ``oom_kill``);
* **cgroup v1** — a child group of the ``memory`` hierarchy with ``memory.limit_in_bytes``
  (``memory.max_usage_in_bytes``, ``memory.oom_control`` ``oom_kill``);
* **prlimit** — ``prlimit --as=<cap>``: an allocation past the cap fails in the process
  instead of the kernel killing it.

One group per process (``<root>/headwater-memcap-<random>/<process name>``), so every
process gets the whole cap and its own peak. :meth:`MemoryCap.prefix` is the argv prefix a
launcher puts in front of a service's command line (``LocalCluster(launch_prefix=...)``): a
shell that moves itself into the group and ``exec``s the service (same PID), or ``prlimit``
(which also ``exec``s). The peak resident set (``VmHWM`` of ``/proc/<pid>/status``) is read in
every mode; :meth:`MemoryCap.close` removes the groups once their processes are gone.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

GiB = 1 << 30
_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _writable_group_dir(parent: Path) -> Path | None:
    """A fresh group directory under ``parent``, or None when the kernel refuses it."""
    probe = parent / f"headwater-memcap-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError:
        return None
    return probe


def _cgroup2_parent() -> Path | None:
    for cand in (_CGROUP_ROOT, _CGROUP_ROOT / "unified"):
        try:
            controllers = (cand / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if "memory" in controllers:
            return cand
    return None


@dataclass
class MemoryCap:
    """A per-process memory cap of ``cap_bytes``; ``mode`` ("cgroup2", "cgroup1" or
    "prlimit") is the mechanism found, or "prlimit" when given (to try that path)."""

    cap_bytes: int = 3 * GiB // 2
    mode: str = ""
    base: Path | None = None
    _groups: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode == "prlimit":  # asked for: no cgroup even where one could be made
            return
        parent = _cgroup2_parent()
        if parent is not None:
            self.base = _writable_group_dir(parent)
            if self.base is not None:
                try:  # children of base may then use the memory controller
                    (self.base / "cgroup.subtree_control").write_text("+memory")
                    self.mode = "cgroup2"
                except OSError:
                    self.base.rmdir()
                    self.base = None
        if not self.mode and (_CGROUP_ROOT / "memory" / "memory.limit_in_bytes").exists():
            self.base = _writable_group_dir(_CGROUP_ROOT / "memory")
            if self.base is not None:
                self.mode = "cgroup1"
        if not self.mode:
            if shutil.which("prlimit") is None:
                raise RuntimeError("no writable memory cgroup and no prlimit: cannot cap memory")
            self.mode = "prlimit"

    def _group(self, name: str) -> Path:
        if name not in self._groups:
            assert self.base is not None
            g = self.base / name
            g.mkdir(exist_ok=True)
            limit = "memory.max" if self.mode == "cgroup2" else "memory.limit_in_bytes"
            (g / limit).write_text(str(self.cap_bytes))
            if self.mode == "cgroup2" and (g / "memory.swap.max").exists():
                (g / "memory.swap.max").write_text("0")  # the cap is not escaped into swap
            self._groups[name] = g
        return self._groups[name]

    def prefix(self, name: str) -> list[str]:
        """The argv prefix that starts process ``name`` under the cap (and keeps its PID)."""
        if self.mode == "prlimit":
            return ["prlimit", f"--as={self.cap_bytes}", "--"]
        group = self._group(name)
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(group)]

    def peak_bytes(self, name: str, pid: int | None) -> int:
        """The most memory process ``name`` has used: the group's peak (cgroups, includes its
        page cache) or, with prlimit, the peak resident set of ``pid`` (0 when gone)."""
        if self.mode == "cgroup2":
            return int((self._groups[name] / "memory.peak").read_text())
        if self.mode == "cgroup1":
            return int((self._groups[name] / "memory.max_usage_in_bytes").read_text())
        return peak_rss_bytes(pid) if pid is not None else 0

    def oom_kills(self, name: str) -> int:
        """How many times the kernel killed a process of group ``name`` for memory (0 with
        prlimit, where an allocation fails instead)."""
        if self.mode == "prlimit":
            return 0
        g = self._groups[name]
        text = (
            g / ("memory.events" if self.mode == "cgroup2" else "memory.oom_control")
        ).read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def close(self) -> None:
        """Remove the groups (their processes must have exited)."""
        for g in [*self._groups.values(), *([self.base] if self.base else [])]:
            with contextlib.suppress(OSError):
                g.rmdir()


def peak_rss_bytes(pid: int) -> int:
    """Peak resident set size of a live process (``VmHWM``), 0 when it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0
