"""Headwater's exceptions: one class per wire error code, and the only translation between them.

The codes live in ``proto/headwater/v1/errors.proto``. Every exception carries its
:class:`ErrorCode`, a ``retriable`` flag (the client retries these after refreshing metadata
when ``invalid_metadata`` is set), and a message for humans.

Translation happens here and nowhere else:

* :func:`error_for_code` turns a wire code (plus message) into an exception instance;
* :func:`code_of` turns any exception into the wire code to send, with a safe default of
  ``UNKNOWN_SERVER_ERROR`` for exceptions Headwater did not raise on purpose;
* whole-RPC failures travel as a gRPC status whose trailing metadata key
  ``headwater-error-code`` holds the code (:func:`to_trailing_metadata`,
  :func:`from_rpc_error`).
"""

from __future__ import annotations

from typing import ClassVar

import grpc

from headwater.v1.errors_pb2 import ErrorCode

ERROR_CODE_METADATA_KEY = "headwater-error-code"


class HeadwaterError(Exception):
    """Base of every Headwater error. Subclasses set ``code`` and the flags."""

    code: ClassVar[int] = ErrorCode.UNKNOWN_SERVER_ERROR
    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    #: gRPC status used when this error fails a whole RPC.
    grpc_status: ClassVar[grpc.StatusCode] = grpc.StatusCode.INTERNAL

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code_name())
        self.message = message or self.code_name()

    @classmethod
    def code_name(cls) -> str:
        return str(ErrorCode.Name(cls.code))

    def __str__(self) -> str:
        return f"{self.code_name()}: {self.message}"


class UnknownServerError(HeadwaterError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(HeadwaterError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE
    grpc_status = grpc.StatusCode.OUT_OF_RANGE


class CorruptRecordError(HeadwaterError):
    """A record batch failed validation: bad CRC, magic, lengths or header fields."""

    code = ErrorCode.CORRUPT_MESSAGE
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class UnknownTopicOrPartitionError(HeadwaterError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.NOT_FOUND


class InvalidFetchSizeError(HeadwaterError):
    code = ErrorCode.INVALID_FETCH_SIZE
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class LeaderNotAvailableError(HeadwaterError):
    code = ErrorCode.LEADER_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class NotLeaderOrFollowerError(HeadwaterError):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class RequestTimedOutError(HeadwaterError):
    code = ErrorCode.REQUEST_TIMED_OUT
    retriable = True
    grpc_status = grpc.StatusCode.DEADLINE_EXCEEDED


class BrokerNotAvailableError(HeadwaterError):
    code = ErrorCode.BROKER_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class ReplicaNotAvailableError(HeadwaterError):
    code = ErrorCode.REPLICA_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class MessageTooLargeError(HeadwaterError):
    """A batch (or request) is larger than max.message.bytes or the request limit."""

    code = ErrorCode.MESSAGE_TOO_LARGE
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class StaleControllerEpochError(HeadwaterError):
    code = ErrorCode.STALE_CONTROLLER_EPOCH
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class NetworkError(HeadwaterError):
    code = ErrorCode.NETWORK_EXCEPTION
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class InvalidTopicError(HeadwaterError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class RecordListTooLargeError(HeadwaterError):
    code = ErrorCode.RECORD_LIST_TOO_LARGE
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class NotEnoughReplicasError(HeadwaterError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class NotEnoughReplicasAfterAppendError(HeadwaterError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class InvalidRequiredAcksError(HeadwaterError):
    code = ErrorCode.INVALID_REQUIRED_ACKS
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class InvalidTimestampError(HeadwaterError):
    code = ErrorCode.INVALID_TIMESTAMP
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class UnsupportedVersionError(HeadwaterError):
    code = ErrorCode.UNSUPPORTED_VERSION
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class TopicAlreadyExistsError(HeadwaterError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS
    grpc_status = grpc.StatusCode.ALREADY_EXISTS


class InvalidPartitionsError(HeadwaterError):
    code = ErrorCode.INVALID_PARTITIONS
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class InvalidReplicationFactorError(HeadwaterError):
    code = ErrorCode.INVALID_REPLICATION_FACTOR
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class InvalidReplicaAssignmentError(HeadwaterError):
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class InvalidConfigError(HeadwaterError):
    code = ErrorCode.INVALID_CONFIG
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class NotControllerError(HeadwaterError):
    code = ErrorCode.NOT_CONTROLLER
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class InvalidRequestError(HeadwaterError):
    code = ErrorCode.INVALID_REQUEST
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class KafkaStorageError(HeadwaterError):
    """The log directory holding the partition failed (I/O error)."""

    code = ErrorCode.KAFKA_STORAGE_ERROR
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class FencedLeaderEpochError(HeadwaterError):
    code = ErrorCode.FENCED_LEADER_EPOCH
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class UnknownLeaderEpochError(HeadwaterError):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH
    retriable = True
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class UnsupportedCompressionTypeError(HeadwaterError):
    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class StaleBrokerEpochError(HeadwaterError):
    code = ErrorCode.STALE_BROKER_EPOCH
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class OffsetNotAvailableError(HeadwaterError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class PreferredLeaderNotAvailableError(HeadwaterError):
    code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class EligibleLeadersNotAvailableError(HeadwaterError):
    code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class ElectionNotNeededError(HeadwaterError):
    code = ErrorCode.ELECTION_NOT_NEEDED
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class IneligibleReplicaError(HeadwaterError):
    """An ISR expansion to a replica that may not join it: its broker is not alive, is in
    controlled shutdown, or refused to host the partition (an offline replica). Nothing
    changed; the leader proposes again once the replica is eligible."""

    code = ErrorCode.INELIGIBLE_REPLICA
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class NoReassignmentInProgressError(HeadwaterError):
    code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class ReassignmentInProgressError(HeadwaterError):
    code = ErrorCode.REASSIGNMENT_IN_PROGRESS
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class OffsetMetadataTooLargeError(HeadwaterError):
    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class CoordinatorLoadInProgressError(HeadwaterError):
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class CoordinatorNotAvailableError(HeadwaterError):
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class NotCoordinatorError(HeadwaterError):
    code = ErrorCode.NOT_COORDINATOR
    retriable = True
    invalid_metadata = True
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class IllegalGenerationError(HeadwaterError):
    code = ErrorCode.ILLEGAL_GENERATION
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class InconsistentGroupProtocolError(HeadwaterError):
    code = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class InvalidGroupIdError(HeadwaterError):
    code = ErrorCode.INVALID_GROUP_ID
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class UnknownMemberIdError(HeadwaterError):
    code = ErrorCode.UNKNOWN_MEMBER_ID
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class InvalidSessionTimeoutError(HeadwaterError):
    code = ErrorCode.INVALID_SESSION_TIMEOUT
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class RebalanceInProgressError(HeadwaterError):
    code = ErrorCode.REBALANCE_IN_PROGRESS
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class InvalidCommitOffsetSizeError(HeadwaterError):
    code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class NonEmptyGroupError(HeadwaterError):
    code = ErrorCode.NON_EMPTY_GROUP
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class GroupIdNotFoundError(HeadwaterError):
    code = ErrorCode.GROUP_ID_NOT_FOUND
    grpc_status = grpc.StatusCode.NOT_FOUND


class MemberIdRequiredError(HeadwaterError):
    code = ErrorCode.MEMBER_ID_REQUIRED
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class GroupMaxSizeReachedError(HeadwaterError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED


class FencedInstanceIdError(HeadwaterError):
    code = ErrorCode.FENCED_INSTANCE_ID
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


# --------------------------------------------------------------- idempotence and transactions


class OutOfOrderSequenceNumberError(HeadwaterError):
    """A batch's sequence does not follow the last one the partition has from this producer:
    records were lost between them. Fatal for the producer (never silently reset)."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class DuplicateSequenceNumberError(HeadwaterError):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER
    grpc_status = grpc.StatusCode.ALREADY_EXISTS


class InvalidProducerEpochError(HeadwaterError):
    """The producer epoch is older than the one the partition or coordinator knows."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class ProducerFencedError(HeadwaterError):
    """A newer producer with the same transactional.id (higher epoch) exists: this one is a
    zombie and must stop. Fatal."""

    code = ErrorCode.PRODUCER_FENCED
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class InvalidTxnStateError(HeadwaterError):
    code = ErrorCode.INVALID_TXN_STATE
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class InvalidProducerIdMappingError(HeadwaterError):
    """The producer id is not the one the coordinator has for this transactional.id."""

    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class InvalidTransactionTimeoutError(HeadwaterError):
    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class ConcurrentTransactionsError(HeadwaterError):
    """The previous transaction of this transactional.id is still completing; retry."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


class TransactionCoordinatorFencedError(HeadwaterError):
    """A transaction marker or request came from a coordinator epoch older than known."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class UnknownProducerIdError(HeadwaterError):
    """The partition has no state for this producer id and the batch does not start at
    sequence 0 (its state was removed with the log it described)."""

    code = ErrorCode.UNKNOWN_PRODUCER_ID
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class UnstableOffsetCommitError(HeadwaterError):
    """A transactional offset commit for the partition is pending; retry after it ends."""

    code = ErrorCode.UNSTABLE_OFFSET_COMMIT
    retriable = True
    grpc_status = grpc.StatusCode.UNAVAILABLE


# --------------------------------------------------------------- security


class TopicAuthorizationFailedError(HeadwaterError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    grpc_status = grpc.StatusCode.PERMISSION_DENIED


class GroupAuthorizationFailedError(HeadwaterError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    grpc_status = grpc.StatusCode.PERMISSION_DENIED


class ClusterAuthorizationFailedError(HeadwaterError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    grpc_status = grpc.StatusCode.PERMISSION_DENIED


class TransactionalIdAuthorizationFailedError(HeadwaterError):
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grpc_status = grpc.StatusCode.PERMISSION_DENIED


class SaslAuthenticationFailedError(HeadwaterError):
    """Wrong user or password, or an invalid / expired token (one answer for all)."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED
    grpc_status = grpc.StatusCode.UNAUTHENTICATED


class UnsupportedSaslMechanismError(HeadwaterError):
    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class IllegalSaslStateError(HeadwaterError):
    code = ErrorCode.ILLEGAL_SASL_STATE
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class SecurityDisabledError(HeadwaterError):
    """A security operation on a cluster where that mechanism is not enabled."""

    code = ErrorCode.SECURITY_DISABLED
    grpc_status = grpc.StatusCode.FAILED_PRECONDITION


class ThrottlingQuotaExceededError(HeadwaterError):
    """A topic mutation refused by the controller mutation rate (``controller_mutation_rate``,
    docs/quotas.md): nothing was created or deleted. Not retriable by default, as in Kafka's
    admin client: the response's ``throttle_time_ms`` says when the same request would be
    admitted, and the caller decides whether to wait and send it again. Also a group stream
    refused by a broker serving ``--group-stream-max-streams`` streams already."""

    code = ErrorCode.THROTTLING_QUOTA_EXCEEDED
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED


_BY_CODE: dict[int, type[HeadwaterError]] = {
    cls.code: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, HeadwaterError) and cls is not HeadwaterError
}


def error_class(code: int) -> type[HeadwaterError]:
    """The exception class for a wire code; unknown codes map to a generic class."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    # A code from errors.proto without a dedicated class yet (or from a newer server).
    return type(
        f"HeadwaterError{code}",
        (HeadwaterError,),
        {"code": code},
    )


def error_for_code(code: int, message: str = "") -> HeadwaterError | None:
    """An exception for ``code``, or None for ``NONE``."""
    if code == ErrorCode.NONE:
        return None
    return error_class(code)(message)


def raise_for_code(code: int, message: str = "") -> None:
    """Raise the exception for ``code`` unless it is ``NONE``."""
    err = error_for_code(code, message)
    if err is not None:
        raise err


def code_of(exc: BaseException) -> int:
    """The wire code for an exception; anything unexpected is UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, HeadwaterError):
        return exc.code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def message_of(exc: BaseException) -> str:
    if isinstance(exc, HeadwaterError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


def to_trailing_metadata(exc: HeadwaterError) -> tuple[tuple[str, str], ...]:
    return ((ERROR_CODE_METADATA_KEY, str(exc.code)),)


def from_rpc_error(err: grpc.RpcError) -> HeadwaterError:
    """Turn a failed RPC into a Headwater exception.

    A status carrying ``headwater-error-code`` becomes that code's class; transport failures
    (UNAVAILABLE, DEADLINE_EXCEEDED, ...) become retriable network/timeout errors.
    """
    details = ""
    code_fn = getattr(err, "code", None)
    status = code_fn() if callable(code_fn) else None
    details_fn = getattr(err, "details", None)
    if callable(details_fn):
        details = details_fn() or ""
    trailing_fn = getattr(err, "trailing_metadata", None)
    trailing = trailing_fn() if callable(trailing_fn) else None
    for key, value in trailing or ():
        if key == ERROR_CODE_METADATA_KEY:
            try:
                wire = int(value)
            except ValueError:
                break
            exc = error_for_code(wire, details)
            if exc is not None:
                return exc
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RequestTimedOutError(details or "deadline exceeded")
    if status in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return NetworkError(details or str(status))
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return MessageTooLargeError(details or "request too large")
    if status == grpc.StatusCode.UNIMPLEMENTED:
        return UnsupportedVersionError(details or "method not implemented by this server")
    return UnknownServerError(f"{status}: {details}")
