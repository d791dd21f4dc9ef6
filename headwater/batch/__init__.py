"""The Headwater record-batch format (docs/batch-format.md): the one binary format shared by
producers, brokers, followers and consumers.

Public names are re-exported here; modules: ``layout`` (header), ``columns`` (records
section), ``compression`` (codecs), ``codec`` (encode, validate, decode), ``control``
(transaction markers).
"""

from headwater.batch.codec import (
    Record,
    RecordBatch,
    compute_crc,
    decode_batches,
    encode_batch,
    encode_batch_pieces,
    iter_headers,
    now_ms,
    patch_header,
    set_log_append_time,
    validate_batches,
    verify_crc,
    with_base_sequence,
)
from headwater.batch.control import (
    ControlRecord,
    encode_control_batch,
    is_control,
    is_transactional,
    parse_control_batch,
)
from headwater.batch.layout import (
    HEADER_SIZE,
    BatchHeader,
    Compression,
    TimestampType,
    parse_header,
)

__all__ = [
    "HEADER_SIZE",
    "BatchHeader",
    "Compression",
    "ControlRecord",
    "Record",
    "RecordBatch",
    "TimestampType",
    "compute_crc",
    "decode_batches",
    "encode_batch",
    "encode_batch_pieces",
    "encode_control_batch",
    "is_control",
    "is_transactional",
    "iter_headers",
    "now_ms",
    "parse_control_batch",
    "parse_header",
    "patch_header",
    "set_log_append_time",
    "validate_batches",
    "verify_crc",
    "with_base_sequence",
]
