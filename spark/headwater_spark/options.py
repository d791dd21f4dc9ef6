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

EARLIEST_SPEC = -2
LATEST_SPEC = -1

OffsetSpec = str | dict[TopicPartition, int]
TimestampSpec = int | dict[TopicPartition, int] | None

KNOWN = {
    "kafka.bootstrap.servers",
    "bootstrap.servers",
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
    "maxoffsetspertrigger",
    "failondataloss",
    "includeheaders",
    "committogroup",
    "polltimeoutms",
    "fetchmaxbytes",
    "arrowbatches",
    "topic",
    "acks",
    "lingerms",
    "path",
    "exactlyonce",
    "transactionalidprefix",
    "transactiontimeoutms",
    "committopic",
}

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
DEFAULT_COMMIT_TOPIC = "__headwater_spark_commits"


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

    def executor_config(self) -> ExecutorConfig:
        return ExecutorConfig(
            self.bootstrap,
            self.fail_on_data_loss,
            self.include_headers,
            self.poll_timeout_ms,
            self.fetch_max_bytes,
            self.arrow_batches,
            self.isolation_level,
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


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate and parse read options; raises InvalidConfigError (naming the option)."""
    o = _lower(options)
    unknown = sorted(k for k in o if k not in KNOWN and not k.startswith("kafka."))
    if unknown:
        raise InvalidConfigError(f"unknown option(s) for format headwater: {unknown}")
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
        if "maxoffsetspertrigger" in o:
            raise InvalidConfigError("maxOffsetsPerTrigger is only valid for a streaming query")
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
        max_offsets_per_trigger=_pos_int(o, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(o, "failOnDataLoss", True),
        include_headers=_bool(o, "includeHeaders", False),
        commit_to_group=o.get("committogroup") or None,
        poll_timeout_ms=_pos_int(o, "pollTimeoutMs", 120_000) or 120_000,
        fetch_max_bytes=_pos_int(o, "fetchMaxBytes", 4 * 1024 * 1024) or 4 * 1024 * 1024,
        arrow_batches=_bool(o, "arrowBatches", True),
        isolation_level=_isolation(o),
    )


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


MAX_TXN_TIMEOUT_MS = 15 * 60 * 1000  # the transaction coordinator's default limit


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    o = _lower(options)
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
    )
