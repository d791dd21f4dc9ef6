"""The authorizer's per-topic split of a Produce request works on the broker's hand-parsed view.

Produce is deserialised by services/broker/handlers/produce_wire.py into a view without
protobuf's CopyFrom; a request naming an allowed and a denied topic must still be split (the
denied partitions answered TOPIC_AUTHORIZATION_FAILED, the others appended), not fail the call.
"""

from __future__ import annotations

import pytest

from headwater.platform.auth import rules
from headwater.platform.auth.interceptor import _split
from headwater.v1 import broker_pb2
from services.broker.handlers.produce_wire import decode_produce_request

pytestmark = pytest.mark.fast


def _request() -> bytes:
    req = broker_pb2.ProduceRequest(acks=1, timeout_ms=1000, client_id="c")
    for topic, p in (("ok", 0), ("secret", 0), ("ok", 1)):
        req.partitions.add(topic=topic, partition=p, records=b"batch-" + topic.encode())
    return req.SerializeToString()


def test_a_view_with_a_denied_topic_is_split_not_failed() -> None:
    inband = rules.Inband("partitions", "partitions", rules.WRITE, broker_pb2.ProduceResponse)
    view = decode_produce_request(_request())

    kept, denied = _split(inband, lambda _r, _op, topic: topic == "ok", view)

    assert [(p.topic, p.partition) for p in kept.partitions] == [("ok", 0), ("ok", 1)]
    assert [(p.topic, p.partition) for p in denied] == [("secret", 0)]
    assert bytes(kept.partitions[1].records) == b"batch-ok"
    assert (kept.acks, kept.timeout_ms, kept.client_id) == (1, 1000, "c")
    assert len(view.partitions) == 3  # the received request is left as it was


def test_the_protobuf_message_path_is_unchanged() -> None:
    inband = rules.Inband("partitions", "partitions", rules.WRITE, broker_pb2.ProduceResponse)
    msg = broker_pb2.ProduceRequest.FromString(_request())
    kept, denied = _split(inband, lambda _r, _op, topic: topic == "ok", msg)
    assert [p.topic for p in kept.partitions] == ["ok", "ok"] and len(denied) == 1
    assert len(msg.partitions) == 3
