package headwater

import (
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "headwater.dev/clients/go/gen/headwater/v1"
)

// ErrorCodeMetadataKey is the trailing metadata key in which a failed call carries its
// decimal ErrorCode (docs/api.md, "Errors").
const ErrorCodeMetadataKey = "headwater-error-code"

// Error is a failure the cluster reported with one of the ErrorCodes of errors.proto: in a
// response's error_code field, or in the headwater-error-code trailer of a failed call.
type Error struct {
	Code    pb.ErrorCode
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Retriable reports whether the same request may succeed after a metadata refresh or a
// wait (the same codes the Python client retries, headwater/errors.py).
func (e *Error) Retriable() bool {
	_, ok := retriable[e.Code]
	return ok
}

var retriable = map[pb.ErrorCode]struct{}{
	pb.ErrorCode_BROKER_NOT_AVAILABLE:             {},
	pb.ErrorCode_CONCURRENT_TRANSACTIONS:          {},
	pb.ErrorCode_COORDINATOR_LOAD_IN_PROGRESS:     {},
	pb.ErrorCode_COORDINATOR_NOT_AVAILABLE:        {},
	pb.ErrorCode_ELIGIBLE_LEADERS_NOT_AVAILABLE:   {},
	pb.ErrorCode_FENCED_LEADER_EPOCH:              {},
	pb.ErrorCode_KAFKA_STORAGE_ERROR:              {},
	pb.ErrorCode_LEADER_NOT_AVAILABLE:             {},
	pb.ErrorCode_NETWORK_EXCEPTION:                {},
	pb.ErrorCode_NOT_CONTROLLER:                   {},
	pb.ErrorCode_NOT_COORDINATOR:                  {},
	pb.ErrorCode_NOT_ENOUGH_REPLICAS:              {},
	pb.ErrorCode_NOT_ENOUGH_REPLICAS_AFTER_APPEND: {},
	pb.ErrorCode_NOT_LEADER_OR_FOLLOWER:           {},
	pb.ErrorCode_OFFSET_NOT_AVAILABLE:             {},
	pb.ErrorCode_PREFERRED_LEADER_NOT_AVAILABLE:   {},
	pb.ErrorCode_REPLICA_NOT_AVAILABLE:            {},
	pb.ErrorCode_REQUEST_TIMED_OUT:                {},
	pb.ErrorCode_UNKNOWN_LEADER_EPOCH:             {},
	pb.ErrorCode_UNKNOWN_TOPIC_OR_PARTITION:       {},
	pb.ErrorCode_UNSTABLE_OFFSET_COMMIT:           {},
}

// IsCode reports whether err is (or wraps) an *Error with the given code.
func IsCode(err error, code pb.ErrorCode) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// IsRetriable reports whether err is a retriable *Error (see Error.Retriable).
func IsRetriable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retriable()
}

// codeError turns a response's error_code / error_message into an error; nil for NONE.
func codeError(code pb.ErrorCode, message string) error {
	if code == pb.ErrorCode_NONE {
		return nil
	}
	return &Error{Code: code, Message: message}
}

// statusError turns a failed call into an *Error: the code of its headwater-error-code trailer
// when present; otherwise UNAVAILABLE is NETWORK_EXCEPTION and DEADLINE_EXCEEDED
// REQUEST_TIMED_OUT (both retriable). Other failures (a cancelled context, ...) stay as they are.
func statusError(err error, trailer metadata.MD) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, v := range trailer.Get(ErrorCodeMetadataKey) {
		if n, perr := strconv.Atoi(v); perr == nil {
			return &Error{Code: pb.ErrorCode(n), Message: st.Message()}
		}
	}
	switch st.Code() {
	case codes.Unavailable:
		return &Error{Code: pb.ErrorCode_NETWORK_EXCEPTION, Message: st.Message()}
	case codes.DeadlineExceeded:
		return &Error{Code: pb.ErrorCode_REQUEST_TIMED_OUT, Message: st.Message()}
	}
	return fmt.Errorf("headwater: %w", err)
}
