"""Helpers of the operator tests: kubectl, resource reads, the operator as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from headwater.dev.procs import ChildProcess
from tests.helpers.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "charts" / "headwater" / "crds"
T = TypeVar("T")


class Kube:
    """kubectl against the test API server, in one namespace."""

    def __init__(self, env: Mapping[str, str], namespace: str) -> None:
        self.env = dict(env)
        self.namespace = namespace
        #: extra text for timeout messages (the operator's log tail)
        self.diagnose: Callable[[], str] = lambda: ""

    def run(self, *args: str, stdin: str | None = None, timeout: float = 30) -> str:
        proc = subprocess.run(
            ["kubectl", "-n", self.namespace, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def apply(self, manifest: Mapping[str, Any]) -> None:
        self.run("apply", "-f", "-", stdin=json.dumps(manifest))

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        proc = subprocess.run(
            ["kubectl", "-n", self.namespace, "get", kind, name, "-o", "json"],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=30,
        )
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise RuntimeError(f"kubectl get {kind} {name} failed: {proc.stderr.strip()}")
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        out = json.loads(
            self.run(
                "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "json"
            )
        )
        items: list[dict[str, Any]] = out["items"]
        return items


def condition(obj: Mapping[str, Any] | None, type_: str = "Ready") -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return {}


def eventually(
    fn: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
    diagnose: Callable[[], str] = lambda: "",
) -> T:
    """Poll ``fn`` until it returns something truthy (returned); AssertionError after
    ``timeout`` seconds with ``diagnose()`` appended."""
    last: list[T | None] = [None]

    def probe() -> T | None:
        last[0] = fn()
        return last[0]

    try:
        return wait_for(probe, timeout=timeout, what=what, interval=interval)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last={last[0]!r}\n{diagnose()}") from None


def topic(name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("replicationFactor", 1)
    return {
        "apiVersion": "headwater.dev/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": name},
        "spec": spec,
    }


def consumer_group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "headwater.dev/v1alpha1",
        "kind": "ConsumerGroup",
        "metadata": {"name": name},
        "spec": spec,
    }


@contextmanager
def running_operator(
    env: Mapping[str, str], log: Path, bootstrap: str, *args: str
) -> Iterator[ChildProcess]:
    """``python -m headwater_operator`` as a child process, stopped (SIGTERM, by PID) after."""
    proc = ChildProcess(
        "operator",
        [sys.executable, "-m", "headwater_operator", "--bootstrap", bootstrap, *args],
        log,
        env=env,
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop(timeout=15)
