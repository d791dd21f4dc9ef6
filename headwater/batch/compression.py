"""Whole-section compression of a batch's records (producer compresses, consumers decompress).

A compressed records section is framed as::

    u32 uncompressed_length   u32 compressed_length   compressed bytes   zero padding to 8

The uncompressed length is checked against a limit *before* inflating, and the inflated size
must match it exactly, so a hostile batch cannot make a consumer allocate without bound.
Codecs: gzip (zlib, standard library), lz4 (frame format), zstd (zstandard, level 1 by
default). The broker never calls this module on produce or fetch.
"""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import zstandard

from headwater.batch.layout import ALIGNMENT, Compression
from headwater.errors import CorruptRecordError, UnsupportedCompressionTypeError

FRAME = struct.Struct("<II")

_ZSTD_LEVEL = 1
_zstd_compressors: dict[int, zstandard.ZstdCompressor] = {}
_zstd_decompressor = zstandard.ZstdDecompressor()


def _zstd(level: int) -> zstandard.ZstdCompressor:
    c = _zstd_compressors.get(level)
    if c is None:
        c = _zstd_compressors[level] = zstandard.ZstdCompressor(level=level)
    return c


def compress(codec: Compression, section: bytes, level: int | None = None) -> list[bytes]:
    """The framed compressed section as a list of pieces (frame header, data, padding)."""
    if codec == Compression.GZIP:
        data = zlib.compress(section, 1 if level is None else level)
    elif codec == Compression.LZ4:
        data = lz4.frame.compress(section, compression_level=0 if level is None else level)
    elif codec == Compression.ZSTD:
        data = _zstd(_ZSTD_LEVEL if level is None else level).compress(section)
    else:
        raise UnsupportedCompressionTypeError(f"cannot compress with {codec!r}")
    pad = -(FRAME.size + len(data)) % ALIGNMENT
    return [FRAME.pack(len(section), len(data)), data, b"\0" * pad]


def decompress(codec: Compression, framed: bytes | memoryview, max_uncompressed: int) -> bytes:
    """Inflate a framed section; raises CorruptRecordError on any inconsistency."""
    if len(framed) < FRAME.size:
        raise CorruptRecordError("compressed section shorter than its frame header")
    raw_len, comp_len = FRAME.unpack_from(framed, 0)
    if raw_len > max_uncompressed:
        raise CorruptRecordError(
            f"uncompressed records section of {raw_len} bytes exceeds the {max_uncompressed} limit"
        )
    end = FRAME.size + comp_len
    if end > len(framed) or len(framed) - end >= ALIGNMENT:
        raise CorruptRecordError(
            f"compressed length {comp_len} does not match the section ({len(framed)} bytes)"
        )
    data = memoryview(framed)[FRAME.size : end]
    try:
        if codec == Compression.GZIP:
            d = zlib.decompressobj()
            out = d.decompress(data, raw_len + 1)
            if not d.eof:
                raise CorruptRecordError("gzip stream is truncated or longer than declared")
        elif codec == Compression.LZ4:
            lz = lz4.frame.LZ4FrameDecompressor()
            out = lz.decompress(data, max_length=raw_len + 1)
            if not lz.eof:
                raise CorruptRecordError("lz4 frame is truncated or longer than declared")
        elif codec == Compression.ZSTD:
            declared = zstandard.frame_content_size(data)
            if declared > raw_len:
                raise CorruptRecordError(f"zstd frame declares {declared} bytes, header {raw_len}")
            out = _zstd_decompressor.decompress(data, max_output_size=raw_len)
        else:
            raise UnsupportedCompressionTypeError(f"cannot decompress {codec!r}")
    except CorruptRecordError:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, ValueError) as exc:
        raise CorruptRecordError(f"{codec.name.lower()} decompression failed: {exc}") from exc
    if len(out) != raw_len:
        raise CorruptRecordError(
            f"records section inflated to {len(out)} bytes, header says {raw_len}"
        )
    return out
