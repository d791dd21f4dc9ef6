package dev.headwater.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import headwater.v1.Errors.ErrorCode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The group consumer on GroupStreamService.Consume against a real cluster. */
class GroupConsumerTest {
  private static final Set<ErrorCode> REBALANCING =
      Set.of(ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.REBALANCE_IN_PROGRESS);

  private static List<ProducerRecord> records(int from, int to) {
    List<ProducerRecord> out = new ArrayList<>();
    for (int i = from; i < to; i++) {
      out.add(
          ProducerRecord.of(
              ("key-" + i).getBytes(StandardCharsets.UTF_8),
              ("value-" + i).getBytes(StandardCharsets.UTF_8)));
    }
    return out;
  }

  private static Set<String> offsets(List<ConsumerRecord> records) {
    Set<String> out = new HashSet<>();
    records.forEach(r -> out.add(r.partition() + "@" + r.offset()));
    return out;
  }

  /** Polls until want records were handed out (bounded), checking each is of an assigned partition. */
  private static List<ConsumerRecord> pollUntil(GroupConsumer g, int want) {
    long deadline = System.nanoTime() + Cluster.DEADLINE.toNanos();
    List<ConsumerRecord> got = new ArrayList<>();
    while (got.size() < want) {
      if (System.nanoTime() > deadline) {
        fail(got.size() + " of " + want + " records; assignment " + g.assignment());
      }
      for (ConsumerRecord r : g.poll(Duration.ofMillis(200))) {
        assertTrue(g.assignment().contains(r.topicPartition()), r + " not assigned");
        got.add(r);
      }
    }
    return got;
  }

  @Test
  void memberConsumesCommitsAndTheNextResumesFromTheCommits() throws Exception {
    try (HeadwaterClient c = Cluster.connect()) {
      String topic = "java-group-" + System.nanoTime();
      String group = topic + "-g";
      Cluster.createTopic(c, topic, 4);
      Producer producer = c.newProducer(Producer.Options.defaults());
      producer.send(topic, records(0, 40));

      try (GroupConsumer a =
          c.newGroupConsumer(GroupConsumer.Config.of(group, topic).withMemberId("member-a"))) {
        List<ConsumerRecord> got = pollUntil(a, 40);
        assertEquals(40, offsets(got).size(), "every record once");
        assertEquals(4, a.assignment().size());
        assertEquals("member-a", a.memberId());
        a.commitSync();
        // a commit of a partition this member is not assigned is refused, typed
        HeadwaterException refused =
            assertThrows(
                HeadwaterException.class,
                () -> a.commitSync(Map.of(new TopicPartition(topic + "-other", 0), 1L)));
        assertTrue(
            refused.code() == ErrorCode.ILLEGAL_GENERATION
                || refused.code() == ErrorCode.UNKNOWN_MEMBER_ID,
            refused.toString());
      }
      producer.send(topic, records(40, 50));
      try (GroupConsumer b =
          c.newGroupConsumer(GroupConsumer.Config.of(group, topic).withMemberId("member-b"))) {
        List<ConsumerRecord> got = pollUntil(b, 10);
        Set<String> values = new HashSet<>();
        got.forEach(r -> values.add(new String(r.value(), StandardCharsets.UTF_8)));
        Set<String> want = new HashSet<>();
        for (int i = 40; i < 50; i++) {
          want.add("value-" + i);
        }
        assertEquals(want, values, "resumed at the committed offsets");
        assertTrue(b.poll(Duration.ofMillis(500)).isEmpty(), "nothing after the new records");
      }
    }
  }

  @Test
  void twoMembersShareThePartitions() throws Exception {
    try (HeadwaterClient c = Cluster.connect()) {
      String topic = "java-group2-" + System.nanoTime();
      String group = topic + "-g";
      Cluster.createTopic(c, topic, 4);
      c.newProducer(Producer.Options.defaults()).send(topic, records(0, 60));
      GroupConsumer.Config config =
          GroupConsumer.Config.of(group, topic).withSessionTimeout(Duration.ofSeconds(10));
      try (GroupConsumer one = c.newGroupConsumer(config.withMemberId("one"));
          GroupConsumer two = c.newGroupConsumer(config.withMemberId("two"))) {
        Set<String> seen = new HashSet<>();
        long deadline = System.nanoTime() + Cluster.DEADLINE.toNanos();
        boolean split = false;
        while (seen.size() < 60 || !split) {
          if (System.nanoTime() > deadline) {
            fail(seen.size() + " of 60; " + one.assignment() + " / " + two.assignment());
          }
          for (GroupConsumer g : List.of(one, two)) {
            for (ConsumerRecord r : g.poll(Duration.ofMillis(100))) {
              assertTrue(g.assignment().contains(r.topicPartition()));
              seen.add(r.partition() + "@" + r.offset());
            }
            try {
              g.commitSync();
            } catch (HeadwaterException e) {
              // a rebalance revoked a partition between the poll and the commit
              assertTrue(REBALANCING.contains(e.code()), e.toString());
            }
          }
          // within one generation no partition is assigned twice (a member's view of an older
          // generation may lag until it reads the revocation)
          if (one.generation() == two.generation()) {
            Set<TopicPartition> both = new HashSet<>(one.assignment());
            both.retainAll(two.assignment());
            assertTrue(both.isEmpty(), "a partition assigned to both: " + both);
          }
          split =
              one.assignment().size() == 2
                  && two.assignment().size() == 2
                  && one.generation() == two.generation();
        }
        assertEquals(60, seen.size());
      }
    }
  }
}
