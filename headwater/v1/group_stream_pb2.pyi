from headwater.v1 import broker_pb2 as _broker_pb2
from headwater.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OffsetReset(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OFFSET_RESET_UNSPECIFIED: _ClassVar[OffsetReset]
    OFFSET_RESET_LATEST: _ClassVar[OffsetReset]
    OFFSET_RESET_EARLIEST: _ClassVar[OffsetReset]

class DeliveryFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_FORMAT_UNSPECIFIED: _ClassVar[DeliveryFormat]
    DELIVERY_FORMAT_RECORDS: _ClassVar[DeliveryFormat]
    DELIVERY_FORMAT_BATCHES: _ClassVar[DeliveryFormat]
OFFSET_RESET_UNSPECIFIED: OffsetReset
OFFSET_RESET_LATEST: OffsetReset
OFFSET_RESET_EARLIEST: OffsetReset
DELIVERY_FORMAT_UNSPECIFIED: DeliveryFormat
DELIVERY_FORMAT_RECORDS: DeliveryFormat
DELIVERY_FORMAT_BATCHES: DeliveryFormat

class ConsumeOpen(_message.Message):
    __slots__ = ("group_id", "topics", "member_id", "client_id", "session_timeout_ms", "offset_reset", "format", "isolation_level", "credit_records", "credit_bytes")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_RESET_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_LEVEL_FIELD_NUMBER: _ClassVar[int]
    CREDIT_RECORDS_FIELD_NUMBER: _ClassVar[int]
    CREDIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    member_id: str
    client_id: str
    session_timeout_ms: int
    offset_reset: OffsetReset
    format: DeliveryFormat
    isolation_level: _broker_pb2.IsolationLevel
    credit_records: int
    credit_bytes: int
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., member_id: _Optional[str] = ..., client_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., offset_reset: _Optional[_Union[OffsetReset, str]] = ..., format: _Optional[_Union[DeliveryFormat, str]] = ..., isolation_level: _Optional[_Union[_broker_pb2.IsolationLevel, str]] = ..., credit_records: _Optional[int] = ..., credit_bytes: _Optional[int] = ...) -> None: ...

class ConsumeCredit(_message.Message):
    __slots__ = ("records", "bytes")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    records: int
    bytes: int
    def __init__(self, records: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class ConsumeCommitOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class ConsumeCommit(_message.Message):
    __slots__ = ("commit_id", "offsets")
    COMMIT_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    commit_id: int
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumeCommitOffset]
    def __init__(self, commit_id: _Optional[int] = ..., offsets: _Optional[_Iterable[_Union[ConsumeCommitOffset, _Mapping]]] = ...) -> None: ...

class ConsumeKeepAlive(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("open", "credit", "commit", "keep_alive")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    open: ConsumeOpen
    credit: ConsumeCredit
    commit: ConsumeCommit
    keep_alive: ConsumeKeepAlive
    def __init__(self, open: _Optional[_Union[ConsumeOpen, _Mapping]] = ..., credit: _Optional[_Union[ConsumeCredit, _Mapping]] = ..., commit: _Optional[_Union[ConsumeCommit, _Mapping]] = ..., keep_alive: _Optional[_Union[ConsumeKeepAlive, _Mapping]] = ...) -> None: ...

class ConsumeAssignedPartition(_message.Message):
    __slots__ = ("topic", "partition", "committed_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed_offset: _Optional[int] = ...) -> None: ...

class ConsumeAssignment(_message.Message):
    __slots__ = ("member_id", "generation_id", "partitions")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    generation_id: int
    partitions: _containers.RepeatedCompositeFieldContainer[ConsumeAssignedPartition]
    def __init__(self, member_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[ConsumeAssignedPartition, _Mapping]]] = ...) -> None: ...

class ConsumeRecords(_message.Message):
    __slots__ = ("topic", "partition", "generation_id", "records", "batches", "high_watermark", "next_offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    generation_id: int
    records: _containers.RepeatedCompositeFieldContainer[_broker_pb2.Record]
    batches: bytes
    high_watermark: int
    next_offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., generation_id: _Optional[int] = ..., records: _Optional[_Iterable[_Union[_broker_pb2.Record, _Mapping]]] = ..., batches: _Optional[bytes] = ..., high_watermark: _Optional[int] = ..., next_offset: _Optional[int] = ...) -> None: ...

class ConsumeCommitPartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class ConsumeCommitResult(_message.Message):
    __slots__ = ("commit_id", "error_code", "error_message", "partitions")
    COMMIT_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    commit_id: int
    error_code: _errors_pb2.ErrorCode
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[ConsumeCommitPartitionResult]
    def __init__(self, commit_id: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[ConsumeCommitPartitionResult, _Mapping]]] = ...) -> None: ...

class ConsumeResponse(_message.Message):
    __slots__ = ("assignment", "records", "commit_result")
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_RESULT_FIELD_NUMBER: _ClassVar[int]
    assignment: ConsumeAssignment
    records: ConsumeRecords
    commit_result: ConsumeCommitResult
    def __init__(self, assignment: _Optional[_Union[ConsumeAssignment, _Mapping]] = ..., records: _Optional[_Union[ConsumeRecords, _Mapping]] = ..., commit_result: _Optional[_Union[ConsumeCommitResult, _Mapping]] = ...) -> None: ...
