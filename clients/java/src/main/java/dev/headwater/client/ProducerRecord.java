package dev.headwater.client;

import java.util.List;

/**
 * A record to send. A null key or value is null (a null value is a tombstone on a compacted
 * topic); timestampMs 0 means the broker's clock.
 */
public record ProducerRecord(byte[] key, byte[] value, List<Header> headers, long timestampMs) {
  public ProducerRecord {
    headers = headers == null ? List.of() : List.copyOf(headers);
  }

  /** A record with a key and a value, no headers, the broker's timestamp. */
  public static ProducerRecord of(byte[] key, byte[] value) {
    return new ProducerRecord(key, value, List.of(), 0);
  }
}
