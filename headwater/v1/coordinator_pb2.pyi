from headwater.v1 import errors_pb2 as _errors_pb2
from headwater.v1 import metadata_pb2 as _metadata_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CoordinatorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP: _ClassVar[CoordinatorType]
    TRANSACTION: _ClassVar[CoordinatorType]
GROUP: CoordinatorType
TRANSACTION: CoordinatorType

class FindCoordinatorRequest(_message.Message):
    __slots__ = ("group_id", "key_type")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_TYPE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    key_type: CoordinatorType
    def __init__(self, group_id: _Optional[str] = ..., key_type: _Optional[_Union[CoordinatorType, str]] = ...) -> None: ...

class FindCoordinatorResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "coordinator", "offsets_partition")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_PARTITION_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    coordinator: _metadata_pb2.BrokerInfo
    offsets_partition: int
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., coordinator: _Optional[_Union[_metadata_pb2.BrokerInfo, _Mapping]] = ..., offsets_partition: _Optional[int] = ...) -> None: ...

class TopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class ConsumerSubscription(_message.Message):
    __slots__ = ("topics", "owned_partitions", "user_data", "generation_id")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    OWNED_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    owned_partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    user_data: bytes
    generation_id: int
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., owned_partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., user_data: _Optional[bytes] = ..., generation_id: _Optional[int] = ...) -> None: ...

class ConsumerAssignment(_message.Message):
    __slots__ = ("partitions", "user_data")
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    USER_DATA_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    user_data: bytes
    def __init__(self, partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., user_data: _Optional[bytes] = ...) -> None: ...

class JoinGroupProtocol(_message.Message):
    __slots__ = ("name", "metadata")
    NAME_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    name: str
    metadata: bytes
    def __init__(self, name: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupRequest(_message.Message):
    __slots__ = ("group_id", "session_timeout_ms", "rebalance_timeout_ms", "member_id", "group_instance_id", "protocol_type", "protocols", "client_id", "reason")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REBALANCE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    member_id: str
    group_instance_id: str
    protocol_type: str
    protocols: _containers.RepeatedCompositeFieldContainer[JoinGroupProtocol]
    client_id: str
    reason: str
    def __init__(self, group_id: _Optional[str] = ..., session_timeout_ms: _Optional[int] = ..., rebalance_timeout_ms: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocols: _Optional[_Iterable[_Union[JoinGroupProtocol, _Mapping]]] = ..., client_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class JoinGroupMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "metadata")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    metadata: bytes
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., metadata: _Optional[bytes] = ...) -> None: ...

class JoinGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "generation_id", "protocol_name", "leader", "member_id", "members", "skip_assignment")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    SKIP_ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    generation_id: int
    protocol_name: str
    leader: str
    member_id: str
    members: _containers.RepeatedCompositeFieldContainer[JoinGroupMember]
    skip_assignment: bool
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., generation_id: _Optional[int] = ..., protocol_name: _Optional[str] = ..., leader: _Optional[str] = ..., member_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[JoinGroupMember, _Mapping]]] = ..., skip_assignment: _Optional[bool] = ...) -> None: ...

class SyncGroupAssignment(_message.Message):
    __slots__ = ("member_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    assignment: bytes
    def __init__(self, member_id: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class SyncGroupRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "assignments")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    assignments: _containers.RepeatedCompositeFieldContainer[SyncGroupAssignment]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., assignments: _Optional[_Iterable[_Union[SyncGroupAssignment, _Mapping]]] = ...) -> None: ...

class SyncGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "assignment")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    assignment: bytes
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., assignment: _Optional[bytes] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "throttle_time_ms")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    throttle_time_ms: int
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., throttle_time_ms: _Optional[int] = ...) -> None: ...

class MemberIdentity(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "reason")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    reason: str
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaveGroupRequest(_message.Message):
    __slots__ = ("group_id", "members")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    members: _containers.RepeatedCompositeFieldContainer[MemberIdentity]
    def __init__(self, group_id: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberIdentity, _Mapping]]] = ...) -> None: ...

class LeaveGroupResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "members")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    members: _containers.RepeatedCompositeFieldContainer[MemberResult]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., members: _Optional[_Iterable[_Union[MemberResult, _Mapping]]] = ...) -> None: ...

class MemberResult(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "error_code")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    error_code: _errors_pb2.ErrorCode
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ...) -> None: ...

class OffsetCommitPartition(_message.Message):
    __slots__ = ("topic", "partition", "offset", "leader_epoch", "metadata")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ...) -> None: ...

class OffsetCommitRequest(_message.Message):
    __slots__ = ("group_id", "generation_id", "member_id", "group_instance_id", "partitions")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartition]
    def __init__(self, group_id: _Optional[str] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class OffsetCommitPartitionResult(_message.Message):
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

class OffsetCommitResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartitionResult]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartitionResult, _Mapping]]] = ...) -> None: ...

class OffsetFetchRequest(_message.Message):
    __slots__ = ("group_id", "partitions", "require_stable")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_STABLE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    require_stable: bool
    def __init__(self, group_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ..., require_stable: _Optional[bool] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset", "leader_epoch", "metadata", "error_code")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    error_code: _errors_pb2.ErrorCode
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., metadata: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ...) -> None: ...

class OffsetFetchResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "offsets")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    offsets: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class DescribeGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribedMember(_message.Message):
    __slots__ = ("member_id", "group_instance_id", "client_id", "assignment")
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENT_FIELD_NUMBER: _ClassVar[int]
    member_id: str
    group_instance_id: str
    client_id: str
    assignment: _containers.RepeatedCompositeFieldContainer[TopicPartitions]
    def __init__(self, member_id: _Optional[str] = ..., group_instance_id: _Optional[str] = ..., client_id: _Optional[str] = ..., assignment: _Optional[_Iterable[_Union[TopicPartitions, _Mapping]]] = ...) -> None: ...

class PartitionLag(_message.Message):
    __slots__ = ("topic", "partition", "committed", "end", "lag", "member_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    committed: int
    end: int
    lag: int
    member_id: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., committed: _Optional[int] = ..., end: _Optional[int] = ..., lag: _Optional[int] = ..., member_id: _Optional[str] = ...) -> None: ...

class DescribedGroup(_message.Message):
    __slots__ = ("group_id", "error_code", "state", "protocol_type", "protocol_name", "generation_id", "leader", "members", "partitions", "total_lag")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_NAME_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: _errors_pb2.ErrorCode
    state: str
    protocol_type: str
    protocol_name: str
    generation_id: int
    leader: str
    members: _containers.RepeatedCompositeFieldContainer[DescribedMember]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionLag]
    total_lag: int
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., state: _Optional[str] = ..., protocol_type: _Optional[str] = ..., protocol_name: _Optional[str] = ..., generation_id: _Optional[int] = ..., leader: _Optional[str] = ..., members: _Optional[_Iterable[_Union[DescribedMember, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[PartitionLag, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...

class DescribeGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[DescribedGroup]
    def __init__(self, groups: _Optional[_Iterable[_Union[DescribedGroup, _Mapping]]] = ...) -> None: ...

class ListGroupsRequest(_message.Message):
    __slots__ = ("states",)
    STATES_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, states: _Optional[_Iterable[str]] = ...) -> None: ...

class ListedGroup(_message.Message):
    __slots__ = ("group_id", "state", "protocol_type")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_TYPE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: str
    protocol_type: str
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[str] = ..., protocol_type: _Optional[str] = ...) -> None: ...

class ListGroupsResponse(_message.Message):
    __slots__ = ("error_code", "groups")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    groups: _containers.RepeatedCompositeFieldContainer[ListedGroup]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., groups: _Optional[_Iterable[_Union[ListedGroup, _Mapping]]] = ...) -> None: ...

class DeleteGroupsRequest(_message.Message):
    __slots__ = ("group_ids",)
    GROUP_IDS_FIELD_NUMBER: _ClassVar[int]
    group_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, group_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteGroupsResult(_message.Message):
    __slots__ = ("group_id", "error_code", "error_message")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, group_id: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteGroupsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DeleteGroupsResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DeleteGroupsResult, _Mapping]]] = ...) -> None: ...

class TxnOffsetCommitRequest(_message.Message):
    __slots__ = ("transactional_id", "group_id", "producer_id", "producer_epoch", "generation_id", "member_id", "partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    partitions: _containers.RepeatedCompositeFieldContainer[OffsetCommitPartition]
    def __init__(self, transactional_id: _Optional[str] = ..., group_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., generation_id: _Optional[int] = ..., member_id: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[OffsetCommitPartition, _Mapping]]] = ...) -> None: ...

class WriteTxnOffsetMarkerRequest(_message.Message):
    __slots__ = ("group_id", "producer_id", "producer_epoch", "committed", "coordinator_epoch")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    def __init__(self, group_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ..., coordinator_epoch: _Optional[int] = ...) -> None: ...

class WriteTxnOffsetMarkerResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...
