"use strict";
// The key partitioner every Headwater client and the broker's records path share
// (docs/batch-format.md; Python: headwater.client.crc32c_partition, Go: headwater.Partition):
// CRC32C(key) mod partitions. clients/partitioner-vectors.json holds the shared test vectors.

const TABLE = new Uint32Array(256);
for (let n = 0; n < 256; n++) {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
  TABLE[n] = c >>> 0;
}

/** CRC-32C (Castagnoli) of bytes as an unsigned 32-bit integer; crc32c("123456789") = 0xe3069283. */
function crc32c(bytes) {
  let crc = 0xffffffff;
  for (const b of bytes) crc = TABLE[(crc ^ b) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** The partition of a (non-null) key among `partitions`. */
function partition(key, partitions) {
  return crc32c(Buffer.from(key)) % partitions;
}

module.exports = { crc32c, partition };
