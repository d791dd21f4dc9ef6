package dev.headwater.client;

import headwater.v1.Errors.ErrorCode;
import io.grpc.Metadata;
import io.grpc.Status;
import java.util.EnumSet;
import java.util.Set;

/**
 * A failure the cluster reported with one of the ErrorCodes of errors.proto: in a response's
 * {@code error_code} field, or in the {@code headwater-error-code} trailer of a failed call
 * (docs/api.md, "Errors"). Calls that fail without such a code are mapped as the Python and Go
 * clients map them: UNAVAILABLE is NETWORK_EXCEPTION, DEADLINE_EXCEEDED is REQUEST_TIMED_OUT.
 */
public class HeadwaterException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The trailing metadata key in which a failed call carries its decimal ErrorCode. */
  public static final Metadata.Key<String> ERROR_CODE_KEY =
      Metadata.Key.of("headwater-error-code", Metadata.ASCII_STRING_MARSHALLER);

  /** The codes after which the same request may succeed (the Python client's list). */
  private static final Set<ErrorCode> RETRIABLE =
      EnumSet.of(
          ErrorCode.BROKER_NOT_AVAILABLE,
          ErrorCode.CONCURRENT_TRANSACTIONS,
          ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
          ErrorCode.COORDINATOR_NOT_AVAILABLE,
          ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
          ErrorCode.FENCED_LEADER_EPOCH,
          ErrorCode.KAFKA_STORAGE_ERROR,
          ErrorCode.LEADER_NOT_AVAILABLE,
          ErrorCode.NETWORK_EXCEPTION,
          ErrorCode.NOT_CONTROLLER,
          ErrorCode.NOT_COORDINATOR,
          ErrorCode.NOT_ENOUGH_REPLICAS,
          ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
          ErrorCode.NOT_LEADER_OR_FOLLOWER,
          ErrorCode.OFFSET_NOT_AVAILABLE,
          ErrorCode.REQUEST_TIMED_OUT,
          ErrorCode.UNKNOWN_LEADER_EPOCH,
          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
          ErrorCode.UNSTABLE_OFFSET_COMMIT);

  private final ErrorCode code;

  public HeadwaterException(ErrorCode code, String message) {
    this(code, message, null);
  }

  public HeadwaterException(ErrorCode code, String message, Throwable cause) {
    super(message == null || message.isEmpty() ? code.name() : code.name() + ": " + message, cause);
    this.code = code;
  }

  /** The ErrorCode of errors.proto. */
  public ErrorCode code() {
    return code;
  }

  /** Whether the same request may succeed after a metadata refresh or a wait. */
  public boolean retriable() {
    return RETRIABLE.contains(code);
  }

  /** A response's error_code / error_message as an exception; null for NONE. */
  static HeadwaterException of(ErrorCode code, String message) {
    return code == ErrorCode.NONE ? null : new HeadwaterException(code, message);
  }

  /** Throws {@link #of} unless the code is NONE. */
  static void check(ErrorCode code, String message) {
    HeadwaterException e = of(code, message);
    if (e != null) {
      throw e;
    }
  }

  /**
   * A failed call as a HeadwaterException: the code of its headwater-error-code trailer when
   * present; otherwise UNAVAILABLE is NETWORK_EXCEPTION, DEADLINE_EXCEEDED REQUEST_TIMED_OUT,
   * and any other status UNKNOWN_SERVER_ERROR (not retriable), the status kept as the cause.
   */
  public static HeadwaterException fromStatus(Throwable t) {
    if (t instanceof HeadwaterException he) {
      return he;
    }
    Status status = Status.fromThrowable(t);
    Metadata trailers = Status.trailersFromThrowable(t);
    String description = status.getDescription() == null ? "" : status.getDescription();
    if (trailers != null) {
      String raw = trailers.get(ERROR_CODE_KEY);
      if (raw != null) {
        try {
          ErrorCode code = ErrorCode.forNumber(Integer.parseInt(raw.trim()));
          if (code != null) {
            return new HeadwaterException(code, description, t);
          }
        } catch (NumberFormatException ignored) {
          // not a number: fall through to the status code
        }
      }
    }
    ErrorCode code =
        switch (status.getCode()) {
          case UNAVAILABLE -> ErrorCode.NETWORK_EXCEPTION;
          case DEADLINE_EXCEEDED -> ErrorCode.REQUEST_TIMED_OUT;
          default -> ErrorCode.UNKNOWN_SERVER_ERROR;
        };
    String message = status.getCode() + (description.isEmpty() ? "" : ": " + description);
    return new HeadwaterException(code, message, t);
  }

}
