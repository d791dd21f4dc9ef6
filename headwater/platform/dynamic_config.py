"""The broker's dynamic configuration: a watch of ``/headwater/configs/brokers/``.

The effective broker config is, per key, ``brokers/<this id>`` over ``brokers/<default>``
over the broker's static ``--config`` flags (over the built-in defaults of
:data:`headwater.config.BROKER_KEYS`). Its topic keys are the defaults of every topic
without an override; on every change they are handed to
:meth:`services.broker.replica_manager.ReplicaManager.set_topic_defaults`, which applies them
to the hosted partitions at once (no restart). Other keys (the quota window) are read from
:attr:`BrokerConfig.current` by their users, and ``listeners`` are called after each change.

The controller uses the same class without a broker id (``broker_id=None``): it then follows
``brokers/<default>`` only, the cluster-wide level, over the static configs it is given
(the topic defaults its leader elections resolve ``unclean.leader.election.enable`` with).

One task (:meth:`BrokerConfig.run`) owns the state: it reads the prefix, applies it, then
watches from the next revision; when the watch fails it re-reads after a short pause. A stored
value that fails validation (written by hand: the controller validates) is logged and
ignored key by key, so one bad key never blocks the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from headwater import config as hconfig
from headwater import config_entities as ce
from headwater.errors import InvalidConfigError
from headwater.platform import etcd as hetcd

log = logging.getLogger(__name__)

RETRY_S = 0.5


def parse_static(pairs: list[str]) -> dict[str, str]:
    """``--config KEY=VALUE`` flags -> validated static broker configs (ValueError if bad)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--config expects KEY=VALUE, got {pair!r}")
        out[name.strip()] = value.strip()
    try:
        return hconfig.validate_broker_configs(out)
    except InvalidConfigError as exc:
        raise ValueError(f"--config: {exc.message}") from None


def _valid_subset(where: str, values: Mapping[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in values.items():
        try:
            out.update(hconfig.validate_broker_configs({k: v}))
        except InvalidConfigError as exc:
            log.error("ignoring invalid dynamic config %s %s=%r: %s", where, k, v, exc.message)
    return out


def effective(
    static: Mapping[str, str], default: Mapping[str, str], own: Mapping[str, str]
) -> dict[str, str]:
    """Per key: ``own`` (brokers/<id>) > ``default`` (brokers/<default>) > ``static``."""
    return {**static, **default, **own}


class BrokerConfig:
    """This broker's effective dynamic config (see module doc)."""

    def __init__(
        self,
        etcd: hetcd.Etcd,
        broker_id: int | None,
        static: Mapping[str, str],
        apply_topic_defaults: Callable[[dict[str, str]], Awaitable[None]],
    ) -> None:
        self._etcd = etcd
        #: ``brokers/<id>``; None: the cluster-wide level only (see module doc).
        self._own_key = None if broker_id is None else ce.BROKERS_PREFIX + str(broker_id)
        self._default_key = ce.BROKERS_PREFIX + ce.DEFAULT
        self.static = dict(static)
        self._apply = apply_topic_defaults
        #: the effective broker config (only keys set at some dynamic or static level)
        self.current: dict[str, str] = dict(self.static)
        #: called (no arguments) after every applied change
        self.listeners: list[Callable[[], None]] = []
        self._applied_topic_defaults: dict[str, str] | None = None

    def value(self, name: str) -> object:
        """The parsed effective value of broker key ``name`` (the built-in default if unset)."""
        text = self.current.get(name)
        if text is None:
            return hconfig.BROKER_KEYS[name].default
        return hconfig.parse_config_value(name, text)

    async def load(self) -> int:
        """Read and apply the stored configs once; returns the etcd revision read."""
        snap = await self._etcd.get_prefix(ce.BROKERS_PREFIX)
        stored: dict[str, dict[str, str]] = {}
        for kv in snap.items:
            if kv.key in (self._own_key, self._default_key):
                try:
                    stored[kv.key] = _valid_subset(kv.key, ce.decode_configs(kv.value))
                except ValueError as exc:
                    log.error("ignoring malformed %s: %s", kv.key, exc)
        own = stored.get(self._own_key, {}) if self._own_key is not None else {}
        await self._set(effective(self.static, stored.get(self._default_key, {}), own))
        return snap.revision

    async def _set(self, current: dict[str, str]) -> None:
        changed = current != self.current
        self.current = current
        defaults = hconfig.topic_defaults_of(current)
        if defaults != self._applied_topic_defaults:
            log.info("topic defaults from broker configs: %s", defaults)
            await self._apply(defaults)
            self._applied_topic_defaults = defaults
        if changed:
            for listener in list(self.listeners):
                listener()

    async def run(self) -> None:
        """Keep :attr:`current` in step with etcd until cancelled."""
        while True:
            try:
                revision = await self.load()
                watch = await self._etcd.watch_prefix(
                    ce.BROKERS_PREFIX, start_revision=revision + 1
                )
                try:
                    async for ev in watch:
                        if ev.key in (self._own_key, self._default_key):
                            await self.load()
                finally:
                    await watch.cancel()
            except hetcd.EtcdError as exc:
                log.warning("broker config watch ended (%s); re-reading", exc)
            await asyncio.sleep(RETRY_S)
