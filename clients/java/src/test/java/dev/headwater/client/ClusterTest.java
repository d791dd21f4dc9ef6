package dev.headwater.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.protobuf.ByteString;
import headwater.v1.BrokerOuterClass;
import headwater.v1.Errors.ErrorCode;
import headwater.v1.Transaction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Admin, producer and partition consumer against a real cluster. */
class ClusterTest {
  /** Produced by produceAndConsumeByPartition; tests/interop/test_java_client.py reads it. */
  static final String RECORDS_TOPIC = "java-client-records";

  static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void adminCreatesListsAndDescribesTopics() throws Exception {
    try (HeadwaterClient c = Cluster.connect()) {
      String name = "java-admin-" + System.nanoTime();
      HeadwaterClient.TopicDescription d = Cluster.createTopic(c, name, 3);
      assertFalse(d.topicId().isEmpty());
      for (int i = 0; i < 3; i++) {
        HeadwaterClient.PartitionDescription p = d.partitions().get(i);
        assertEquals(i, p.partition());
        assertFalse(p.replicas().isEmpty());
        assertFalse(p.isr().isEmpty());
      }
      assertTrue(c.listTopics().contains(name));
      HeadwaterException again =
          assertThrows(
              HeadwaterException.class,
              () -> c.createTopics(List.of(HeadwaterClient.NewTopic.of(name, 1))));
      assertEquals(ErrorCode.TOPIC_ALREADY_EXISTS, again.code());
      HeadwaterException missing =
          assertThrows(HeadwaterException.class, () -> c.describeTopics(name + "-missing"));
      assertEquals(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, missing.code());
    }
  }

  @Test
  void produceAndConsumeByPartition() throws Exception {
    int partitions = 3;
    try (HeadwaterClient c = Cluster.connect()) {
      Cluster.createTopic(c, RECORDS_TOPIC, partitions);
      Producer producer = c.newProducer(new Producer.Options("zstd", java.time.Duration.ZERO));
      List<ProducerRecord> sent = new ArrayList<>();
      for (int round = 0; round < 5; round++) {
        for (int k = 0; k < 12; k++) {
          sent.add(
              new ProducerRecord(
                  bytes("key-" + k),
                  bytes("value-" + k + "-" + round),
                  List.of(new Header("round", new byte[] {(byte) round}), new Header("null", null)),
                  1_700_000_000_000L));
        }
      }
      // two sends: the second continues each partition's sequence
      List<RecordMetadata> meta = new ArrayList<>(producer.send(RECORDS_TOPIC, sent.subList(0, 30)));
      meta.addAll(producer.send(RECORDS_TOPIC, sent.subList(30, 60)));
      Map<Integer, Integer> perPartition = new HashMap<>();
      for (int i = 0; i < sent.size(); i++) {
        assertEquals(Partitioner.partition(sent.get(i).key(), partitions), meta.get(i).partition());
        perPartition.merge(meta.get(i).partition(), 1, Integer::sum);
      }
      // a null key and a null value
      producer.sendTo(
          RECORDS_TOPIC,
          0,
          List.of(ProducerRecord.of(null, bytes("no-key")), ProducerRecord.of(bytes("no-value"), null)));
      perPartition.merge(0, 2, Integer::sum);

      int seen = 0;
      for (int p = 0; p < partitions; p++) {
        List<ConsumerRecord> got = consumeAll(c, RECORDS_TOPIC, p, perPartition.getOrDefault(p, 0));
        long expected = got.isEmpty() ? 0 : got.get(0).offset();
        for (ConsumerRecord r : got) {
          assertEquals(expected++, r.offset(), "offsets in order, none twice");
          if (r.key() != null && r.value() != null) {
            assertEquals(p, Partitioner.partition(r.key(), partitions));
            assertEquals(1_700_000_000_000L, r.timestampMs());
            assertEquals("round", r.headers().get(0).key());
            assertNull(r.headers().get(1).value());
          }
        }
        seen += got.size();
      }
      assertEquals(62, seen);
    }
  }

  static List<ConsumerRecord> consumeAll(HeadwaterClient c, String topic, int partition, int want) {
    long deadline = System.nanoTime() + Cluster.DEADLINE.toNanos();
    List<ConsumerRecord> got = new ArrayList<>();
    try (PartitionConsumer pc = c.consumePartition(topic, partition, PartitionConsumer.EARLIEST)) {
      while (got.size() < want) {
        if (System.nanoTime() > deadline) {
          fail(topic + "-" + partition + ": " + got.size() + " of " + want + " records");
        }
        got.addAll(pc.poll());
      }
      assertEquals(got.get(got.size() - 1).offset() + 1, pc.position());
      assertTrue(pc.highWatermark() >= pc.position());
    }
    return got;
  }

  @Test
  void retriedProduceIsStoredOnce() throws Exception {
    try (HeadwaterClient c = Cluster.connect()) {
      String topic = "java-retry-" + System.nanoTime();
      Cluster.createTopic(c, topic, 1);
      // the request the producer sends, sent twice as a retry after a lost answer would be
      Transaction.InitProducerIdResponse id =
          c.brokerStub(c.anyBroker())
              .initProducerId(
                  Transaction.InitProducerIdRequest.newBuilder()
                      .setProducerId(-1)
                      .setProducerEpoch(-1)
                      .build());
      BrokerOuterClass.ProduceRecordsRequest req =
          BrokerOuterClass.ProduceRecordsRequest.newBuilder()
              .setTopic(topic)
              .setAcks(BrokerOuterClass.Acks.ACKS_ALL)
              .setProducerId(id.getProducerId())
              .setProducerEpoch(id.getProducerEpoch())
              .addRecords(BrokerOuterClass.Record.newBuilder().setValue(ByteString.copyFromUtf8("once")))
              .build();
      long first = c.leader(topic, 0).produceRecords(req).getPartitions(0).getBaseOffset();
      BrokerOuterClass.PartitionProduceResult retry =
          c.leader(topic, 0).produceRecords(req).getPartitions(0);
      assertEquals(first, retry.getBaseOffset());
      // the client's producer continues after what is stored
      RecordMetadata next = c.newProducer(Producer.Options.defaults()).send(topic, ProducerRecord.of(null, bytes("two")));
      assertEquals(first + 1, next.offset());
      List<ConsumerRecord> all = consumeAll(c, topic, 0, 2);
      assertEquals(2, all.size());
      assertArrayEquals(bytes("once"), all.get(0).value());
      assertArrayEquals(bytes("two"), all.get(1).value());
    }
  }

  @Test
  void unknownTopicIsATypedError() {
    try (HeadwaterClient c =
        HeadwaterClient.connect(
            System.getenv("HEADWATER_BOOTSTRAP"),
            new HeadwaterClient.Options(
                "java-test",
                io.grpc.InsecureChannelCredentials.create(),
                2,
                java.time.Duration.ofMillis(50),
                java.time.Duration.ofSeconds(10)))) {
      HeadwaterException e =
          assertThrows(
              HeadwaterException.class,
              () -> c.newProducer(Producer.Options.defaults()).send("java-no-such-topic", ProducerRecord.of(null, bytes("x"))));
      assertEquals(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, e.code());
      assertTrue(e.retriable());
    }
  }
}
