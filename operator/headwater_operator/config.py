"""OperatorConfig: the operator's settings, from the command line (see ``__main__``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import kopf

from headwater_operator import model


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    #: Headwater bootstrap addresses (brokers), "host:port[,host:port...]"
    bootstrap: str
    #: watched namespaces; empty with ``all_namespaces`` False means "default"
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    #: seconds between drift checks of each Topic (out-of-band changes reverted/reported)
    drift_interval_s: float = 60.0
    #: seconds between status (lag) refreshes of each ConsumerGroup
    group_interval_s: float = 15.0
    #: failed delete attempts after which the finalizer is removed anyway (the topic is left
    #: in the cluster, a Warning event says so) so a namespace never hangs in Terminating
    delete_attempts: int = 8
    #: ceiling of the exponential backoff of temporary errors (seconds)
    max_backoff_s: float = 60.0
    #: Headwater request timeout
    request_timeout_ms: int = 10_000
    #: DEBUG logging
    verbose: bool = False

    def backoff(self, retry: int) -> float:
        """Delay before the next attempt after ``retry`` failed ones: 1, 2, 4 ... max."""
        return float(min(self.max_backoff_s, 2 ** min(retry, 16)))


def apply_kopf_settings(settings: kopf.OperatorSettings) -> None:
    """Our finalizer name and annotation-only progress storage under headwater.dev.

    Progress and the last-handled spec live in annotations: the CRDs' structural schemas
    would prune kopf's default ``status.kopf`` field.
    """
    settings.persistence.finalizer = model.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=model.GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=model.GROUP, key="last-handled-configuration"
    )
    # kopf's own log lines become events only from WARNING up (no "Timer succeeded" event per
    # object per drift interval); the operator's Normal events are posted explicitly
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 30
