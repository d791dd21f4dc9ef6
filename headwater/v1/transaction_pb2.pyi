from headwater.v1 import errors_pb2 as _errors_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransactionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TXN_EMPTY: _ClassVar[TransactionState]
    TXN_ONGOING: _ClassVar[TransactionState]
    TXN_PREPARE_COMMIT: _ClassVar[TransactionState]
    TXN_PREPARE_ABORT: _ClassVar[TransactionState]
    TXN_COMPLETE_COMMIT: _ClassVar[TransactionState]
    TXN_COMPLETE_ABORT: _ClassVar[TransactionState]
    TXN_DEAD: _ClassVar[TransactionState]
TXN_EMPTY: TransactionState
TXN_ONGOING: TransactionState
TXN_PREPARE_COMMIT: TransactionState
TXN_PREPARE_ABORT: TransactionState
TXN_COMPLETE_COMMIT: TransactionState
TXN_COMPLETE_ABORT: TransactionState
TXN_DEAD: TransactionState

class InitProducerIdRequest(_message.Message):
    __slots__ = ("transactional_id", "transaction_timeout_ms", "producer_id", "producer_epoch")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int
    producer_epoch: int
    def __init__(self, transactional_id: _Optional[str] = ..., transaction_timeout_ms: _Optional[int] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class InitProducerIdResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id", "producer_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    producer_id: int
    producer_epoch: int
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class TxnTopicPartitions(_message.Message):
    __slots__ = ("topic", "partitions")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ...) -> None: ...

class AddPartitionsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "partitions")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: _containers.RepeatedCompositeFieldContainer[TxnTopicPartitions]
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TxnTopicPartitions, _Mapping]]] = ...) -> None: ...

class AddPartitionsToTxnResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: _errors_pb2.ErrorCode
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ...) -> None: ...

class AddPartitionsToTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[AddPartitionsToTxnResult]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[AddPartitionsToTxnResult, _Mapping]]] = ...) -> None: ...

class AddOffsetsToTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "group_id")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., group_id: _Optional[str] = ...) -> None: ...

class AddOffsetsToTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ...) -> None: ...

class EndTxnRequest(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "producer_epoch", "committed")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., committed: _Optional[bool] = ...) -> None: ...

class EndTxnResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "producer_id", "producer_epoch")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    error_message: str
    producer_id: int
    producer_epoch: int
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., error_message: _Optional[str] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ...) -> None: ...

class DescribeTransactionsRequest(_message.Message):
    __slots__ = ("transactional_ids",)
    TRANSACTIONAL_IDS_FIELD_NUMBER: _ClassVar[int]
    transactional_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, transactional_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribedTransaction(_message.Message):
    __slots__ = ("transactional_id", "error_code", "state", "producer_id", "producer_epoch", "transaction_timeout_ms", "transaction_start_ms", "partitions", "groups")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_START_MS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    error_code: _errors_pb2.ErrorCode
    state: TransactionState
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_ms: int
    partitions: _containers.RepeatedCompositeFieldContainer[TxnTopicPartitions]
    groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, transactional_id: _Optional[str] = ..., error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., state: _Optional[_Union[TransactionState, str]] = ..., producer_id: _Optional[int] = ..., producer_epoch: _Optional[int] = ..., transaction_timeout_ms: _Optional[int] = ..., transaction_start_ms: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[TxnTopicPartitions, _Mapping]]] = ..., groups: _Optional[_Iterable[str]] = ...) -> None: ...

class DescribeTransactionsResponse(_message.Message):
    __slots__ = ("transactions",)
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    transactions: _containers.RepeatedCompositeFieldContainer[DescribedTransaction]
    def __init__(self, transactions: _Optional[_Iterable[_Union[DescribedTransaction, _Mapping]]] = ...) -> None: ...

class ListTransactionsRequest(_message.Message):
    __slots__ = ("states",)
    STATES_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[TransactionState]
    def __init__(self, states: _Optional[_Iterable[_Union[TransactionState, str]]] = ...) -> None: ...

class ListedTransaction(_message.Message):
    __slots__ = ("transactional_id", "producer_id", "state")
    TRANSACTIONAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    transactional_id: str
    producer_id: int
    state: TransactionState
    def __init__(self, transactional_id: _Optional[str] = ..., producer_id: _Optional[int] = ..., state: _Optional[_Union[TransactionState, str]] = ...) -> None: ...

class ListTransactionsResponse(_message.Message):
    __slots__ = ("error_code", "transactions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: _errors_pb2.ErrorCode
    transactions: _containers.RepeatedCompositeFieldContainer[ListedTransaction]
    def __init__(self, error_code: _Optional[_Union[_errors_pb2.ErrorCode, str]] = ..., transactions: _Optional[_Iterable[_Union[ListedTransaction, _Mapping]]] = ...) -> None: ...
