"""One module per Broker RPC. Handlers translate wire messages to replica-manager calls and
back; per-partition failures become ``ErrorCode`` fields (via headwater.errors.code_of), whole
request failures are raised as HeadwaterError (the server interceptor maps them to a status)."""
