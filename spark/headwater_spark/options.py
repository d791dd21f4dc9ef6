"""Parsing the ``headwater`` format's options (names and meanings as Spark's Kafka source).

Pure logic: no I/O, no Spark import. Every bad value raises
:class:`headwater.errors.InvalidConfigError` naming the option, before anything is read.

Offset specs (:data:`OffsetSpec`) are ``"earliest"``, ``"latest"`` or a per-partition dict
``{TopicPartition: offset}`` where offset -2 means earliest and -1 latest (Spark's JSON
``{"topic": {"0": 23, "1": -1}}``). Timestamp specs (:data:`TimestampSpec`) are one ms value
for every partition (``startingTimestamp``) or a per-partition dict
(``startingOffsetsByTimestamp``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headwater.client.types import TopicPartition
from headwater.errors import InvalidConfigError
from headwater_spark.security import PLAINTEXT, SECURITY_OPTIONS, SecuritySpec, parse_security

EARLIEST_SPEC = -2
LATEST_SPEC = -1

OffsetSpec = str | dict[TopicPartition, int]
TimestampSpec = int | dict[TopicPartition, int] | None

#: Options every use of the format takes (besides the security ones, security.SECURITY_OPTIONS).
COMMON = frozenset({"kafka.bootstrap.servers", "bootstrap.servers", "path"})
#: Read options (batch and streaming; parse_source_options refuses the stream-only ones in a
#: batch read and the batch-only ones in a stream).
READ = frozenset(
    {
        "subscribe",
        "subscribepattern",
        "assign",
        "startingoffsets",
        "endingoffsets",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestampstrategy",
        "minpartitions",
        "maxrecordsperpartition",
        "minrecordspertask",
        "maxoffsetspertrigger",
        "minoffsetspertrigger",
        "maxtriggerdelay",
        "failondataloss",
        "includeheaders",
        "committogroup",
        "groupidprefix",
        "kafka.group.id",
        "kafka.isolation.level",
        "polltimeoutms",
        "kafkaconsumer.polltimeoutms",
        "fetchmaxbytes",
        "arrowbatches",
    }
)
#: Write options (batch and streaming; exactlyOnce and its companions are streaming only).
WRITE = frozenset(
    {
        "topic",
        "acks",
        "lingerms",
        "exactlyonce",
        "transactionalidprefix",
        "transactiontimeoutms",
        "committopic",
        "checkpointlocation",
    }
)
#: Options of Spark's Kafka source/sink (or Kafka client settings passed as ``kafka.*``) that
#: Headwater refuses, with what to use instead (docs/spark.md, "Every option of Spark's Kafka
#: source").
ALTERNATIVES = {
    "fetchoffset.numretries": "Headwater's client retries offset lookups itself (within its "
    "request timeout): remove it",
    "fetchoffset.retryintervalms": "Headwater's client retries offset lookups itself (within "
    "its request timeout): remove it",
    "kafka.auto.offset.reset": "use startingOffsets (Spark's Kafka source refuses it too)",
    "kafka.enable.auto.commit": "use kafka.group.id or commitToGroup (offsets committed after "
    "each micro-batch)",
    "kafka.group.instance.id": "the source uses no consumer group membership: remove it",
    "kafka.key.deserializer": "keys are always binary (cast the key column), as in Spark",
    "kafka.value.deserializer": "values are always binary (cast the value column), as in Spark",
    "kafka.key.serializer": "write a binary or string key column, as in Spark",
    "kafka.value.serializer": "write a binary or string value column, as in Spark",
    "kafka.interceptor.classes": "Java interceptors do not apply (Spark refuses it too)",
    "kafka.fetch.max.bytes": "use fetchMaxBytes",
    "kafka.max.partition.fetch.bytes": "use fetchMaxBytes",
    "kafka.max.poll.records": "use maxRecordsPerPartition / maxOffsetsPerTrigger",
    "kafka.acks": "use acks",
    "kafka.linger.ms": "use lingerMs",
    "kafka.transactional.id": "use exactlyOnce=true with transactionalIdPrefix",
    "kafka.enable.idempotence": "use exactlyOnce=true with transactionalIdPrefix for "
    "exactly-once output",
    "kafka.transaction.timeout.ms": "use transactionTimeoutMs",
}
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
DEFAULT_COMMIT_TOPIC = "__headwater_spark_commits"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
#: minRecordsPerTask's default: ranges under this many offsets are grouped into one task
DEFAULT_MIN_RECORDS_PER_TASK = 50_000  # Spark's default maxTriggerDelay, 15m
STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "commitToGroup")


@dataclass(frozen=True)
class SourceOptions:
    """The parsed read options (see docs/spark.md for each one)."""

    bootstrap: str
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[TopicPartition, ...] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_ts: TimestampSpec
    ending_ts: TimestampSpec
    starting_ts_strategy: str
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    commit_to_group: str | None
    poll_timeout_ms: int
    fetch_max_bytes: int
    arrow_batches: bool
    isolation_level: str = "read_uncommitted"
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    group_id_prefix: str | None = None
    security: SecuritySpec = PLAINTEXT
    #: minRecordsPerTask; None (option 0): one task per range
    min_records_per_task: int | None = DEFAULT_MIN_RECORDS_PER_TASK

    def executor_config(self) -> ExecutorConfig:
        return ExecutorConfig(
            self.bootstrap,
            self.fail_on_data_loss,
            self.include_headers,
            self.poll_timeout_ms,
            self.fetch_max_bytes,
            self.arrow_batches,
            self.isolation_level,
            self.security,
        )


@dataclass(frozen=True)
class ExecutorConfig:
    """What an executor needs to read one range (picklable, shipped with each partition)."""

    bootstrap: str
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    fetch_max_bytes: int
    arrow_batches: bool
    isolation_level: str = "read_uncommitted"
    security: SecuritySpec = PLAINTEXT


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def bootstrap_of(opts: Mapping[str, str]) -> str:
    o = _lower(opts)
    servers = o.get("kafka.bootstrap.servers") or o.get("bootstrap.servers")
    if not servers:
        raise InvalidConfigError(
            "option kafka.bootstrap.servers (or bootstrap.servers) is required"
        )
    return servers


def _bool(o: dict[str, str], name: str, default: bool) -> bool:
    raw = o.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidConfigError(f"option {name} must be true or false, not {raw!r}")


def _pos_int(o: dict[str, str], name: str, default: int | None = None) -> int | None:
    raw = o.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidConfigError(f"option {name} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise InvalidConfigError(f"option {name} must be > 0, not {value}")
    return value


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"option {name} is not valid JSON: {exc}") from None


def parse_partition_map(name: str, raw: str, *, min_value: int) -> dict[TopicPartition, int]:
    """``{"topic": {"0": v, ...}, ...}`` -> {TopicPartition: v}; v must be >= min_value."""
    doc = _json(name, raw)
    if not isinstance(doc, dict) or not doc:
        raise InvalidConfigError(f'option {name} must be a JSON object {{"topic": {{"0": n}}}}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise InvalidConfigError(f"option {name}: topic {topic!r} must map to an object")
        for p, v in parts.items():
            try:
                part = int(p)
            except ValueError:
                raise InvalidConfigError(f"option {name}: bad partition {p!r}") from None
            if isinstance(v, bool) or not isinstance(v, int) or v < min_value or part < 0:
                raise InvalidConfigError(f"option {name}: bad value {v!r} for {topic}[{p}]")
            out[TopicPartition(topic, part)] = v
    return out


def _offset_spec(o: dict[str, str], name: str, default: str) -> OffsetSpec:
    raw = o.get(name.lower(), default).strip()
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    return parse_partition_map(name, raw, min_value=LATEST_SPEC - 1)


def _timestamp_spec(o: dict[str, str], single: str, by_partition: str) -> TimestampSpec:
    if single.lower() in o:
        raw = o[single.lower()]
        try:
            ts = int(raw)
        except ValueError:
            raise InvalidConfigError(f"option {single} must be ms since the epoch") from None
        if ts < 0:
            raise InvalidConfigError(f"option {single} must be >= 0")
        return ts
    if by_partition.lower() in o:
        return parse_partition_map(by_partition, o[by_partition.lower()], min_value=0)
    return None


def _assign(raw: str) -> tuple[TopicPartition, ...]:
    doc = _json("assign", raw)
    if not isinstance(doc, dict) or not doc:
        raise InvalidConfigError('option assign must be a JSON object {"topic": [0, 1]}')
    out: list[TopicPartition] = []
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise InvalidConfigError(f"option assign: {topic!r} must map to a list of partitions")
        out.extend(TopicPartition(topic, p) for p in parts)
    return tuple(out)


def check_names(o: Mapping[str, str], allowed: frozenset[str], use: str) -> None:
    """Raise InvalidConfigError naming the first option of ``o`` (lower-cased names) that
    ``use`` ("read" or "write") does not take, with the alternative when there is one.
    Security options are checked by :func:`headwater_spark.security.parse_security`."""
    other = WRITE if use == "read" else READ
    for name in sorted(o):
        if name in allowed or name in COMMON or name in SECURITY_OPTIONS:
            continue
        if name.startswith(("kafka.ssl.", "kafka.sasl.")):
            continue  # refused or mapped by parse_security, with its own message
        if name in ALTERNATIVES:
            raise InvalidConfigError(f"option {name} is not supported: {ALTERNATIVES[name]}")
        if name in other:
            raise InvalidConfigError(f"option {name} is not a {use} option of format headwater")
        if name.startswith("kafka."):
            raise InvalidConfigError(
                f"option {name} is not supported: Headwater's client has no such setting "
                "(docs/spark.md lists the kafka.* options it maps)"
            )
        raise InvalidConfigError(f"unknown option {name} for format headwater")


def check_read_options(options: Mapping[str, str]) -> None:
    """The checks that need no batch/stream distinction (names, security): what ``load()``
    runs (the data source's ``schema()``), so a misspelt or unsupported option fails there."""
    o = _lower(options)
    check_names(o, READ, "read")
    parse_security(o)


def parse_duration_ms(name: str, raw: str) -> int:
    """Spark's time strings (``15m``, ``30s``, ``500ms``, ``1h``; a bare number is ms) -> ms."""
    m = re.fullmatch(r"\s*(\d+)\s*(us|ms|s|sec|m|min|h|d)?\s*", raw.lower())
    if m is None:
        raise InvalidConfigError(
            f"option {name} must be a duration such as 500ms, 30s, 15m or 1h, not {raw!r}"
        )
    scale = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "sec": 1000, "m": 60_000,
             "min": 60_000, "h": 3_600_000, "d": 86_400_000}[m.group(2)]  # fmt: skip
    return int(int(m.group(1)) * scale)


def _group(o: dict[str, str]) -> tuple[str | None, str | None]:
    """(the group offsets are committed to, groupIdPrefix): kafka.group.id or commitToGroup
    name the group itself; groupIdPrefix makes one per query run (the stream reader). A batch
    read commits nothing (as Spark's, which never commits), so it only checks them."""
    group = o.get("kafka.group.id") or None
    legacy = o.get("committogroup") or None
    if group and legacy and group != legacy:
        raise InvalidConfigError(
            "options kafka.group.id and commitToGroup name different groups: give one"
        )
    group = group or legacy
    prefix = o.get("groupidprefix")
    if prefix is not None and not prefix.strip():
        raise InvalidConfigError("option groupIdPrefix must not be empty")
    if prefix and group:
        raise InvalidConfigError(
            "options groupIdPrefix and kafka.group.id (or commitToGroup) both name the group: "
            "give one (kafka.group.id wins in Spark; Headwater asks you to choose)"
        )
    return group, prefix


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate and parse read options; raises InvalidConfigError (naming the option)."""
    o = _lower(options)
    check_names(o, READ, "read")
    security = parse_security(o)
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if k in o]
    if len(chosen) != 1:
        raise InvalidConfigError(
            "exactly one of the options subscribe, subscribePattern, assign must be given"
        )
    subscribe = pattern = assign = None
    if "subscribe" in o:
        subscribe = tuple(t.strip() for t in o["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise InvalidConfigError("option subscribe names no topic")
    elif "subscribepattern" in o:
        pattern = o["subscribepattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidConfigError(f"option subscribePattern is not a regex: {exc}") from None
    else:
        assign = _assign(o["assign"])
    starting = _offset_spec(o, "startingOffsets", "latest" if streaming else "earliest")
    ending = _offset_spec(o, "endingOffsets", "latest")
    if streaming and (
        "endingoffsets" in o or "endingtimestamp" in o or "endingoffsetsbytimestamp" in o
    ):
        raise InvalidConfigError("ending offsets are not valid for a streaming query")
    if not streaming:
        if starting == "latest" or (
            isinstance(starting, dict) and LATEST_SPEC in starting.values()
        ):
            raise InvalidConfigError("startingOffsets latest (-1) is not valid for a batch query")
        if ending == "earliest" or (isinstance(ending, dict) and EARLIEST_SPEC in ending.values()):
            raise InvalidConfigError("endingOffsets earliest (-2) is not valid for a batch query")
        for name in STREAM_ONLY:
            if name.lower() in o:
                raise InvalidConfigError(f"{name} is only valid for a streaming query")
    max_rows, min_rows, delay = _admission(o)
    group, prefix = _group(o)
    strategy = o.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise InvalidConfigError("startingOffsetsByTimestampStrategy must be error or latest")
    return SourceOptions(
        bootstrap=bootstrap_of(o),
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        starting_ts=_timestamp_spec(o, "startingTimestamp", "startingOffsetsByTimestamp"),
        ending_ts=_timestamp_spec(o, "endingTimestamp", "endingOffsetsByTimestamp"),
        starting_ts_strategy=strategy,
        min_partitions=_pos_int(o, "minPartitions"),
        max_records_per_partition=_pos_int(o, "maxRecordsPerPartition"),
        min_records_per_task=_min_records_per_task(o),
        max_offsets_per_trigger=max_rows,
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=delay,
        fail_on_data_loss=_bool(o, "failOnDataLoss", True),
        include_headers=_bool(o, "includeHeaders", False),
        commit_to_group=group,
        group_id_prefix=prefix,
        poll_timeout_ms=_poll_timeout(o),
        fetch_max_bytes=_pos_int(o, "fetchMaxBytes", 4 * 1024 * 1024) or 4 * 1024 * 1024,
        arrow_batches=_bool(o, "arrowBatches", True),
        isolation_level=_isolation(o),
        security=security,
    )


def _min_records_per_task(o: dict[str, str]) -> int | None:
    """minRecordsPerTask: a positive count, or 0 to plan one task per range (no grouping)."""
    if o.get("minrecordspertask", "").strip() == "0":
        return None
    return _pos_int(o, "minRecordsPerTask", DEFAULT_MIN_RECORDS_PER_TASK)


def _admission(o: dict[str, str]) -> tuple[int | None, int | None, int]:
    """(maxOffsetsPerTrigger, minOffsetsPerTrigger, maxTriggerDelay ms), as Spark checks
    them: min <= max, and maxTriggerDelay only with minOffsetsPerTrigger."""
    max_rows = _pos_int(o, "maxOffsetsPerTrigger")
    min_rows = _pos_int(o, "minOffsetsPerTrigger")
    delay = DEFAULT_MAX_TRIGGER_DELAY_MS
    if "maxtriggerdelay" in o:
        if min_rows is None:
            raise InvalidConfigError("option maxTriggerDelay needs minOffsetsPerTrigger")
        delay = parse_duration_ms("maxTriggerDelay", o["maxtriggerdelay"])
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise InvalidConfigError(
            f"option minOffsetsPerTrigger ({min_rows}) must be <= maxOffsetsPerTrigger ({max_rows})"
        )
    return max_rows, min_rows, delay


def _poll_timeout(o: dict[str, str]) -> int:
    """pollTimeoutMs, or Spark's name for it, kafkaConsumer.pollTimeoutMs (not both)."""
    if "polltimeoutms" in o and "kafkaconsumer.polltimeoutms" in o:
        raise InvalidConfigError("give one of pollTimeoutMs and kafkaConsumer.pollTimeoutMs")
    name = "kafkaConsumer.pollTimeoutMs" if "kafkaconsumer.polltimeoutms" in o else "pollTimeoutMs"
    return _pos_int(o, name, 120_000) or 120_000


def _isolation(o: dict[str, str]) -> str:
    raw = o.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if raw not in ISOLATION_LEVELS:
        raise InvalidConfigError(
            f"option kafka.isolation.level must be read_uncommitted or read_committed, not {raw!r}"
        )
    return raw


@dataclass(frozen=True)
class SinkOptions:
    """The parsed write options. ``exactly_once`` (streaming only) needs ``txn_prefix``
    (option transactionalIdPrefix: unique per query, stable across its restarts)."""

    bootstrap: str
    topic: str | None
    acks: str
    linger_ms: int
    exactly_once: bool = False
    txn_prefix: str | None = None
    txn_timeout_ms: int = 300_000
    commit_topic: str = DEFAULT_COMMIT_TOPIC
    security: SecuritySpec = PLAINTEXT


MAX_TXN_TIMEOUT_MS = 15 * 60 * 1000  # the transaction coordinator's default limit


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate and parse write options; raises InvalidConfigError (naming the option)."""
    o = _lower(options)
    check_names(o, WRITE, "write")
    security = parse_security(o)
    acks = o.get("acks", "all")
    if acks not in ("all", "-1", "1", "0"):
        raise InvalidConfigError(f"option acks must be all, -1, 1 or 0, not {acks!r}")
    exactly_once = _bool(o, "exactlyOnce", False)
    prefix = o.get("transactionalidprefix") or None
    if exactly_once:
        if prefix is None:
            raise InvalidConfigError(
                "exactlyOnce=true needs the option transactionalIdPrefix (unique per query, "
                "the same across its restarts)"
            )
        if "/" in prefix:
            raise InvalidConfigError("option transactionalIdPrefix must not contain '/'")
        if acks not in ("all", "-1"):
            raise InvalidConfigError("exactlyOnce=true needs acks=all")
    timeout = _pos_int(o, "transactionTimeoutMs", 300_000) or 300_000
    if timeout > MAX_TXN_TIMEOUT_MS:
        raise InvalidConfigError(f"option transactionTimeoutMs must be <= {MAX_TXN_TIMEOUT_MS}")
    return SinkOptions(
        bootstrap=bootstrap_of(o),
        topic=o.get("topic") or None,
        acks=acks,
        linger_ms=_pos_int(o, "lingerMs", 5) or 5,
        exactly_once=exactly_once,
        txn_prefix=prefix,
        txn_timeout_ms=timeout,
        commit_topic=o.get("committopic") or DEFAULT_COMMIT_TOPIC,
        security=security,
    )
