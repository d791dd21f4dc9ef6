package dev.headwater.client;

/** A partition of a topic. */
public record TopicPartition(String topic, int partition) {
  @Override
  public String toString() {
    return topic + "-" + partition;
  }
}
