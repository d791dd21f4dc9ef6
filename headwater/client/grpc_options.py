"""gRPC channel options shared by every Headwater channel: the client's and the services'.

Tuned for few, large, long-lived RPCs (see PERFORMANCE-NOTES): messages up to
:data:`DEFAULT_MAX_MESSAGE_BYTES`, and keepalive pings every 20 s that the services' server
options (:func:`headwater.platform.server.server_options`) permit. Part of the client
library: it imports nothing of the server.
"""

from __future__ import annotations

from typing import Any

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024


#: Channel/server options tuned for few, large, long-lived RPCs (see PERFORMANCE-NOTES).
def channel_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 20_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.keepalive_permit_without_calls", 1),
    ]
