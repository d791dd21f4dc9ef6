"""What a failed node test's report carries so that its cause can be found afterwards: the
pods of the Headwater releases on the node (their state, the tail of their logs, the previous
container's tail after a restart) and the recent events of their namespaces.

Collected by the ``pytest_runtest_makereport`` hook of conftest.py when a test of
tests/k8s_node fails in setup or call (before the fixtures' teardown removes the release),
with every client started through :meth:`Node.run` (inside the node's namespaces). Bounded:
each kubectl call has its own timeout, the whole collection stops starting calls after
:data:`BUDGET_S`, and each log is cut to its last :data:`LOG_LINES` lines and
:data:`LOG_CHARS` characters.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from tests.k8s_node.node import Node

#: stop starting kubectl calls after this many seconds (each call is bounded by CALL_TIMEOUT_S)
BUDGET_S = 90.0
CALL_TIMEOUT_S = 30.0
#: lines kept of a controller's or broker's log (the components whose logs explain a failure)
LOG_LINES = 300
#: lines kept of any other pod's log (coordinators, operator, etcd, the tests' own pods)
OTHER_LOG_LINES = 80
#: lines kept of the container that ran before the last restart
PREVIOUS_LOG_LINES = 100
#: characters kept of one log (its end)
LOG_CHARS = 48_000
EVENTS = 60
RELEASE_LABEL = "app.kubernetes.io/part-of=headwater"
COMPONENT = "app.kubernetes.io/component"
MAIN_COMPONENTS = ("controller", "broker")


class _Budget:
    def __init__(self, node: Node, seconds: float) -> None:
        self.node = node
        self.deadline = time.monotonic() + seconds
        self.skipped = 0

    def kubectl(self, *args: str) -> str:
        """kubectl's output (stderr appended when it fails); empty once the budget is spent."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.skipped += 1
            return ""
        timeout = min(CALL_TIMEOUT_S, left)
        what = f"kubectl {' '.join(args)}"
        try:
            proc = self.node.run("kubectl", *args, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return f"({what}: no answer within {timeout:.0f} s)"
        if proc.returncode != 0:
            return f"{proc.stdout}({what} exited {proc.returncode}: {proc.stderr.strip()})"
        return proc.stdout


def _tail(text: str, lines: int) -> str:
    kept = text.splitlines()[-lines:]
    out = "\n".join(kept)
    if len(out) > LOG_CHARS:
        out = "(... cut ...)" + out[-LOG_CHARS:]
    return out


def _state(pod: dict[str, Any]) -> str:
    """One line per container: ready, restarts, current and last state."""
    rows = []
    for c in pod.get("status", {}).get("containerStatuses") or ():
        rows.append(
            f"  {c['name']}: ready={c.get('ready')} restarts={c.get('restartCount', 0)} "
            f"state={json.dumps(c.get('state', {}))} last={json.dumps(c.get('lastState', {}))}"
        )
    conditions = {
        c["type"]: f"{c['status']}@{c.get('lastTransitionTime')}"
        for c in pod.get("status", {}).get("conditions") or ()
    }
    return "\n".join([f"  phase={pod.get('status', {}).get('phase')} {conditions}", *rows])


def collect(node: Node, namespaces: list[str] | None = None, budget_s: float = BUDGET_S) -> str:
    """The diagnostics of the Headwater releases in ``namespaces`` (None: every namespace
    holding a pod of a Headwater release) as one text (module doc for what and its bounds)."""
    b = _Budget(node, budget_s)
    if namespaces is None:
        listed = b.kubectl("get", "pods", "-A", "-l", RELEASE_LABEL, "-o", "json")
        try:
            items = json.loads(listed)["items"] if listed else []
        except ValueError:
            return f"listing the releases' pods failed:\n{listed}"
        namespaces = sorted({p["metadata"]["namespace"] for p in items})
    if not namespaces:
        return "no pod of a Headwater release on the node"
    parts: list[str] = []
    for ns in namespaces:
        raw = b.kubectl("-n", ns, "get", "pods", "-o", "json")
        try:
            pods = json.loads(raw)["items"] if raw else []
        except ValueError:
            parts.append(f"=== namespace {ns}: listing pods failed:\n{raw}")
            continue
        parts.append(f"=== namespace {ns}: {len(pods)} pods")
        # controllers and brokers first: the budget goes to them before the others
        pods.sort(key=lambda p: p["metadata"].get("labels", {}).get(COMPONENT) not in
                  MAIN_COMPONENTS)  # fmt: skip
        for pod in pods:
            name = pod["metadata"]["name"]
            main = pod["metadata"].get("labels", {}).get(COMPONENT) in MAIN_COMPONENTS
            lines = LOG_LINES if main else OTHER_LOG_LINES
            parts.append(f"--- pod {ns}/{name}\n{_state(pod)}")
            logs = b.kubectl("-n", ns, "logs", name, "--all-containers", "--timestamps",
                             f"--tail={lines}")  # fmt: skip
            parts.append(f"--- logs {ns}/{name} (last {lines} lines)\n{_tail(logs, lines)}")
            restarted = any(
                c.get("restartCount", 0) > 0
                for c in pod.get("status", {}).get("containerStatuses") or ()
            )
            if restarted:
                prev = b.kubectl("-n", ns, "logs", name, "--all-containers", "--previous",
                                 "--timestamps", f"--tail={PREVIOUS_LOG_LINES}")  # fmt: skip
                parts.append(
                    f"--- logs {ns}/{name} before its last restart "
                    f"(last {PREVIOUS_LOG_LINES} lines)\n{_tail(prev, PREVIOUS_LOG_LINES)}"
                )
        events = b.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp")
        parts.append(f"--- events {ns} (last {EVENTS})\n{_tail(events, EVENTS)}")
    if b.skipped:
        parts.append(f"({b.skipped} kubectl calls not made: the {budget_s:.0f} s budget ran out)")
    return "\n".join(parts)
