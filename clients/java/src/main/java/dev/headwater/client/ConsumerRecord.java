package dev.headwater.client;

import headwater.v1.BrokerOuterClass;
import java.util.ArrayList;
import java.util.List;

/** One consumed record; a null key or value is a null one. */
public record ConsumerRecord(
    String topic,
    int partition,
    long offset,
    byte[] key,
    byte[] value,
    List<Header> headers,
    long timestampMs) {

  static ConsumerRecord of(String topic, int partition, BrokerOuterClass.Record r) {
    List<Header> headers = new ArrayList<>(r.getHeadersCount());
    for (BrokerOuterClass.RecordHeader h : r.getHeadersList()) {
      headers.add(new Header(h.getKey(), h.hasValue() ? h.getValue().toByteArray() : null));
    }
    return new ConsumerRecord(
        topic,
        partition,
        r.getOffset(),
        r.hasKey() ? r.getKey().toByteArray() : null,
        r.hasValue() ? r.getValue().toByteArray() : null,
        List.copyOf(headers),
        r.getTimestamp());
  }

  /** The partition this record came from. */
  public TopicPartition topicPartition() {
    return new TopicPartition(topic, partition);
  }
}
