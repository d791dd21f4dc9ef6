"""Topic configuration: the one table of keys, types, defaults and checks.

The controller validates overrides with :func:`validate_topic_configs` before writing them to
etcd; brokers turn the stored overrides into a :class:`TopicConfig` with
:func:`resolve_topic_config`. Names and meanings are Kafka's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from headwater.errors import InvalidConfigError


@dataclass(frozen=True)
class ConfigKey:
    name: str
    kind: type
    default: object
    doc: str
    check: Callable[[Any], bool] = lambda v: True
    check_doc: str = ""
    #: Cannot be altered dynamically (a broker start-up flag); reported by describe only.
    read_only: bool = False


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {text!r}")


_DAY_MS = 24 * 3600 * 1000
_LONG_MAX = 2**63 - 1


def _normalise_policy(text: str) -> str:
    """``compact,delete`` in either order (spaces allowed) -> the canonical spelling."""
    parts = sorted({p.strip() for p in text.split(",") if p.strip()})
    return ",".join(parts)


_POLICIES = ("delete", "compact", "compact,delete")

TOPIC_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey(
            "retention.ms",
            int,
            7 * _DAY_MS,
            "Delete whole segments whose newest record is older than this; -1: forever.",
            lambda v: v == -1 or v >= 0,
            ">= 0 or -1",
        ),
        ConfigKey(
            "retention.bytes",
            int,
            -1,
            "Delete the oldest segments while the partition is larger; -1: no limit.",
            lambda v: v == -1 or v >= 0,
            ">= 0 or -1",
        ),
        ConfigKey(
            "segment.bytes",
            int,
            1024 * 1024 * 1024,
            "Roll a new segment when the active one would exceed this size.",
            lambda v: v >= 1024,
            ">= 1024",
        ),
        ConfigKey(
            "segment.ms",
            int,
            7 * _DAY_MS,
            "Roll a new segment when the active one's first record is older than this.",
            lambda v: v >= 1,
            ">= 1",
        ),
        ConfigKey(
            "segment.index.bytes",
            int,
            10 * 1024 * 1024,
            "Largest offset index per segment; reaching it rolls the segment.",
            lambda v: v >= 64,
            ">= 64",
        ),
        ConfigKey(
            "index.interval.bytes",
            int,
            4096,
            "Bytes of log between two entries of the sparse offset and time indexes.",
            lambda v: v >= 0,
            ">= 0",
        ),
        ConfigKey(
            "max.message.bytes",
            int,
            8 * 1024 * 1024 + 64,
            "Largest record batch (compressed, with header) the topic accepts.",
            lambda v: 64 <= v <= 512 * 1024 * 1024,
            "64 .. 512 MiB",
        ),
        ConfigKey(
            "flush.messages",
            int,
            -1,
            "fsync after this many records; -1: leave flushing to the OS (default).",
            lambda v: v == -1 or v >= 1,
            ">= 1 or -1",
        ),
        ConfigKey(
            "flush.ms",
            int,
            -1,
            "fsync when the oldest unflushed record is older than this; -1: never forced.",
            lambda v: v == -1 or v >= 0,
            ">= 0 or -1",
        ),
        ConfigKey(
            "cleanup.policy",
            str,
            "delete",
            "delete: retention by time and size; compact: keep the latest record per key "
            "(log compaction); compact,delete: both.",
            lambda v: v in _POLICIES,
            "delete | compact | compact,delete",
        ),
        ConfigKey(
            "delete.retention.ms",
            int,
            _DAY_MS,
            "Compacted topics: how long a tombstone (null value) stays after its segment was "
            "first cleaned, so that consumers reading the head see the delete.",
            lambda v: v >= 0,
            ">= 0",
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            int,
            0,
            "Compacted topics: a record stays uncompacted for at least this long.",
            lambda v: v >= 0,
            ">= 0",
        ),
        ConfigKey(
            "max.compaction.lag.ms",
            int,
            _LONG_MAX,
            "Compacted topics: a log whose oldest uncleaned record is older than this is "
            "cleaned whatever its dirty ratio.",
            lambda v: v >= 1,
            ">= 1",
        ),
        ConfigKey(
            "min.cleanable.dirty.ratio",
            float,
            0.5,
            "Compacted topics: clean a log only when uncleaned bytes / cleanable bytes reach "
            "this ratio.",
            lambda v: 0.0 <= v <= 1.0,
            "0 .. 1",
        ),
        ConfigKey(
            "message.timestamp.type",
            str,
            "CreateTime",
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps on append.",
            lambda v: v in ("CreateTime", "LogAppendTime"),
            "CreateTime | LogAppendTime",
        ),
        ConfigKey(
            "min.insync.replicas",
            int,
            1,
            "With acks=all, the fewest in-sync replicas that must have a write.",
            lambda v: v >= 1,
            ">= 1",
        ),
        ConfigKey(
            "unclean.leader.election.enable",
            bool,
            False,
            "Allow a replica outside the ISR to become leader (may lose records).",
            lambda v: True,
            "true | false",
        ),
    ]
}


@dataclass(frozen=True)
class TopicConfig:
    """Effective configuration of one topic (defaults overlaid with its overrides)."""

    retention_ms: int = 7 * _DAY_MS
    retention_bytes: int = -1
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * _DAY_MS
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    max_message_bytes: int = 8 * 1024 * 1024 + 64
    flush_messages: int = -1
    flush_ms: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = _DAY_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    @property
    def compact_enabled(self) -> bool:
        """cleanup.policy includes compact."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete_enabled(self) -> bool:
        """cleanup.policy includes delete (time and size retention apply)."""
        return "delete" in self.cleanup_policy.split(",")


def _parse(key: ConfigKey, text: str) -> object:
    try:
        if key.kind is bool:
            value: object = _parse_bool(text)
        elif key.kind is int:
            value = int(text.strip())
            if not -_LONG_MAX - 1 <= value <= _LONG_MAX:  # Kafka's LONG: a 64-bit integer
                raise ValueError("out of the 64-bit integer range")
        elif key.kind is float:
            value = float(text.strip())
            if value != value:  # NaN
                raise ValueError("not a number")
        elif key.name == "cleanup.policy":
            value = _normalise_policy(text)
        else:
            value = text.strip()
    except ValueError as exc:
        raise InvalidConfigError(f"{key.name}={text!r}: {exc}") from None
    if not key.check(value):
        raise InvalidConfigError(f"{key.name}={text!r}: must be {key.check_doc}")
    return value


def _validate(
    table: Mapping[str, ConfigKey], what: str, overrides: Mapping[str, str]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, text in overrides.items():
        key = table.get(name)
        if key is None:
            raise InvalidConfigError(
                f"unknown {what} config {name!r}; known: {', '.join(sorted(table))}"
            )
        if key.read_only:
            raise InvalidConfigError(
                f"{what} config {name!r} is read-only: it cannot be altered dynamically "
                "(it is a start-up flag)"
            )
        value = _parse(key, str(text))
        out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def validate_topic_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    """Check every override; returns them normalised. Raises InvalidConfigError."""
    return _validate(TOPIC_KEYS, "topic", overrides)


def resolve_topic_config(
    overrides: Mapping[str, str], defaults: Mapping[str, str] | None = None
) -> TopicConfig:
    """The effective config: built-in defaults, then broker ``defaults``, then ``overrides``."""
    merged = {**(defaults or {}), **overrides}
    values = {
        name.replace(".", "_"): _parse(TOPIC_KEYS[name], text)
        for name, text in validate_topic_configs(merged).items()
    }
    return TopicConfig(**values)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- brokers, quotas

#: Dynamic broker keys other than the topic defaults: the quota sampling window (§4.9).
QUOTA_WINDOW_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey(
            "quota.window.num",
            int,
            11,
            "Number of samples kept to measure a client's rate against its quota.",
            lambda v: 1 <= v <= 1000,
            "1 .. 1000",
        ),
        ConfigKey(
            "quota.window.size.seconds",
            int,
            1,
            "Length of one quota sample window in seconds.",
            lambda v: 1 <= v <= 3600,
            "1 .. 3600",
        ),
    ]
}

#: Broker start-up flags reported by describe (source static) and refused by alter.
READ_ONLY_BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey("broker.id", int, None, "This broker's id (--broker-id).", read_only=True),
        ConfigKey("broker.rack", str, None, "Rack of this broker (--rack).", read_only=True),
        ConfigKey("log.dirs", str, None, "Log directories (--data-dirs).", read_only=True),
        ConfigKey(
            "replica.lag.time.max.ms",
            int,
            10_000,
            "A follower not caught up for this long leaves the ISR (--replica-lag-time-max-ms).",
            read_only=True,
        ),
        ConfigKey(
            "log.retention.check.interval.ms",
            int,
            30_000,
            "Pause between two retention passes (--log-retention-check-interval-ms).",
            read_only=True,
        ),
        ConfigKey(
            "log.cleaner.backoff.ms",
            int,
            15_000,
            "Pause between two log-compaction passes (--log-cleaner-backoff-ms).",
            read_only=True,
        ),
        ConfigKey(
            "log.page.cache.window.bytes",
            int,
            0,
            "Each log segment drops from the page cache what lies more than this many bytes "
            "behind its end; 0: never (--log-page-cache-window-bytes).",
            read_only=True,
        ),
    ]
}

#: Every broker key: topic keys (used as defaults for topics without an override), the quota
#: window and the read-only start-up flags. Precedence for a topic config on a broker: topic
#: override > brokers/<id> > brokers/<default> > the broker's static --config > built-in.
BROKER_KEYS: dict[str, ConfigKey] = {**TOPIC_KEYS, **QUOTA_WINDOW_KEYS, **READ_ONLY_BROKER_KEYS}

#: Quota keys of client, user and (user, client-id) entities (Kafka's names, seed 000 §4.9).
#: No default: an entity without a value at any level of the precedence chain is unlimited.
QUOTA_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        ConfigKey(
            "producer_byte_rate",
            int,
            None,
            "Produce quota: bytes per second per broker.",
            lambda v: v > 0,
            "> 0",
        ),
        ConfigKey(
            "consumer_byte_rate",
            int,
            None,
            "Fetch quota: bytes per second per broker.",
            lambda v: v > 0,
            "> 0",
        ),
        ConfigKey(
            "request_percentage",
            float,
            None,
            "Request quota: percent of one request-handling thread's time per quota window.",
            lambda v: 0 < v <= 10_000,
            "> 0 and <= 10000",
        ),
        ConfigKey(
            "controller_mutation_rate",
            float,
            None,
            "Controller mutation quota (KIP-599): partitions created or deleted per second by"
            " CreateTopics, CreatePartitions and DeleteTopics, enforced by the active controller.",
            lambda v: 0 < v <= 1_000_000,
            "> 0 and <= 1000000",
        ),
    ]
}


def validate_broker_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    """Check dynamic broker configs (brokers/<id> or brokers/<default>); returns them
    normalised. Unknown and read-only keys and bad values raise InvalidConfigError."""
    return _validate(BROKER_KEYS, "broker", overrides)


def validate_quota_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    """Check quota configs of a client, user or (user, client-id) entity."""
    return _validate(QUOTA_KEYS, "quota", overrides)


def topic_defaults_of(broker_configs: Mapping[str, str]) -> dict[str, str]:
    """The topic-key subset of broker configs (the defaults a broker applies to topics)."""
    return {k: v for k, v in broker_configs.items() if k in TOPIC_KEYS}


def parse_config_value(name: str, text: str) -> object:
    """Parse one value of any known key (topic, broker or quota); InvalidConfigError if bad."""
    key = BROKER_KEYS.get(name) or QUOTA_KEYS.get(name)
    if key is None:
        raise InvalidConfigError(f"unknown config {name!r}")
    return _parse(key, text)
