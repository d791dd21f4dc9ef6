package dev.headwater.client;

import java.util.zip.CRC32C;

/**
 * The key partitioner every Headwater client shares: partition = CRC32C(key) mod partitions,
 * with the unsigned CRC-32C (Castagnoli) of the key bytes (docs/architecture.md). Checked
 * against clients/partitioner-vectors.json, as the Python and Go clients are.
 */
public final class Partitioner {
  private Partitioner() {}

  /** The unsigned CRC-32C of data. */
  public static long crc32c(byte[] data) {
    CRC32C crc = new CRC32C();
    crc.update(data);
    return crc.getValue();
  }

  /** The partition of key among {@code partitions} (at least 1). */
  public static int partition(byte[] key, int partitions) {
    if (partitions < 1) {
      throw new IllegalArgumentException("partitions must be >= 1, got " + partitions);
    }
    return (int) (crc32c(key) % partitions);
  }
}
