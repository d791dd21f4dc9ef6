"""build_registry: every handler of the operator, bound to one :class:`OperatorConfig`."""

from __future__ import annotations

from typing import Any

import kopf

from headwater.client.admin import AsyncAdminClient
from headwater_operator import config as config_mod
from headwater_operator import groups, topics


def build_registry(config: config_mod.OperatorConfig) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        config_mod.apply_kopf_settings(settings)
        memo.config = config
        memo.admin = AsyncAdminClient(
            config.bootstrap, request_timeout_ms=config.request_timeout_ms
        )

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        admin = getattr(memo, "admin", None)
        if admin is not None:
            await admin.close()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        """In a pod: the service account; elsewhere: $KUBECONFIG or ~/.kube/config (kopf's
        own minimal readers, no Kubernetes client library needed)."""
        return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

    topics.register(registry, config)
    groups.register(registry, config)
    return registry
