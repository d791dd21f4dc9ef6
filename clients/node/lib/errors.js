"use strict";
// Errors: a refusal by the cluster is a HeadwaterError carrying the ErrorCode name of
// proto/headwater/v1/errors.proto, from a response's error_code or the "headwater-error-code"
// trailer of a failed call (docs/api.md, "Errors").

const grpc = require("@grpc/grpc-js");
const { api } = require("./api");

const ERROR_CODE_KEY = "headwater-error-code";

// the codes the Python and Go clients retry after a metadata refresh or a pause
const RETRIABLE = new Set([
  "BROKER_NOT_AVAILABLE", "CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS",
  "COORDINATOR_NOT_AVAILABLE", "ELIGIBLE_LEADERS_NOT_AVAILABLE", "FENCED_LEADER_EPOCH",
  "KAFKA_STORAGE_ERROR", "LEADER_NOT_AVAILABLE", "NETWORK_EXCEPTION", "NOT_CONTROLLER",
  "NOT_COORDINATOR", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
  "NOT_LEADER_OR_FOLLOWER", "OFFSET_NOT_AVAILABLE", "PREFERRED_LEADER_NOT_AVAILABLE",
  "REPLICA_NOT_AVAILABLE", "REQUEST_TIMED_OUT", "UNKNOWN_LEADER_EPOCH",
  "UNKNOWN_TOPIC_OR_PARTITION", "UNSTABLE_OFFSET_COMMIT",
]);

class HeadwaterError extends Error {
  /** @param {string} code an ErrorCode name ("TOPIC_ALREADY_EXISTS") @param {string} message */
  constructor(code, message) {
    super(message ? `${code}: ${message}` : code);
    this.name = "HeadwaterError";
    this.code = code;
    this.detail = message || "";
  }

  /** Whether the same request may succeed after a metadata refresh or a pause. */
  get retriable() {
    return RETRIABLE.has(this.code);
  }
}

/** The error of a response's error_code / error_message; null for NONE. */
function codeError(code, message) {
  return !code || code === "NONE" ? null : new HeadwaterError(code, message);
}

/**
 * A failed gRPC call as a HeadwaterError: the code of its headwater-error-code trailer when
 * present; otherwise UNAVAILABLE is NETWORK_EXCEPTION and DEADLINE_EXCEEDED REQUEST_TIMED_OUT
 * (both retriable). Other failures (a cancelled call, ...) are returned as they are.
 */
function statusError(err) {
  if (!err || err instanceof HeadwaterError || err.code === undefined) return err;
  const values = err.metadata ? err.metadata.get(ERROR_CODE_KEY) : [];
  if (values.length > 0) {
    const n = Number(String(values[0]));
    return new HeadwaterError(api().errorNames.get(n) || `ERROR_CODE_${n}`, err.details);
  }
  if (err.code === grpc.status.UNAVAILABLE) return new HeadwaterError("NETWORK_EXCEPTION", err.details);
  if (err.code === grpc.status.DEADLINE_EXCEEDED) return new HeadwaterError("REQUEST_TIMED_OUT", err.details);
  return err;
}

const isRetriable = (err) => err instanceof HeadwaterError && err.retriable;

module.exports = { HeadwaterError, codeError, statusError, isRetriable, ERROR_CODE_KEY };
