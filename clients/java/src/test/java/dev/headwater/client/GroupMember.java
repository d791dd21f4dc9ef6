package dev.headwater.client;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A group member as its own process, for tests/interop/test_cross_language_group.py: consumes
 * TOPIC as GROUP over the group stream with a fixed member id, and prints one line per event
 * (flushed at once, so a SIGKILL loses nothing printed):
 *
 * <pre>
 *   ASSIGNED generation p,p,...
 *   RECORD partition offset value
 *   COMMITTED partition=offset,...     (after the server acknowledged the commit)
 * </pre>
 *
 * It commits after every poll that returned records, and runs until it is killed.
 *
 * <p>Usage: GroupMember BOOTSTRAP GROUP TOPIC MEMBER_ID SESSION_TIMEOUT_MS
 */
public final class GroupMember {
  private GroupMember() {}

  public static void main(String[] args) {
    String bootstrap = args[0];
    GroupConsumer.Config config =
        GroupConsumer.Config.of(args[1], args[2])
            .withMemberId(args[3])
            .withSessionTimeout(Duration.ofMillis(Long.parseLong(args[4])))
            .withCredit(50, 1L << 20);
    try (HeadwaterClient client = HeadwaterClient.connect(bootstrap);
        GroupConsumer consumer = client.newGroupConsumer(config)) {
      int generation = -2;
      java.util.Set<TopicPartition> assigned = null;
      while (true) {
        List<ConsumerRecord> records = consumer.poll(Duration.ofMillis(200));
        if (consumer.generation() != generation || !consumer.assignment().equals(assigned)) {
          generation = consumer.generation();
          assigned = consumer.assignment();
          StringBuilder parts = new StringBuilder();
          consumer.assignment().stream()
              .map(TopicPartition::partition)
              .sorted()
              .forEach(p -> parts.append(parts.length() == 0 ? "" : ",").append(p));
          System.out.println("ASSIGNED " + generation + " " + parts);
        }
        Map<Integer, Long> next = new TreeMap<>();
        for (ConsumerRecord r : records) {
          System.out.println(
              "RECORD " + r.partition() + " " + r.offset() + " " + new String(r.value()));
          next.put(r.partition(), r.offset() + 1);
        }
        System.out.flush();
        if (!records.isEmpty()) {
          try {
            consumer.commitSync();
            StringBuilder line = new StringBuilder("COMMITTED ");
            next.forEach((p, o) -> line.append(p).append('=').append(o).append(','));
            System.out.println(line);
            System.out.flush();
          } catch (HeadwaterException e) {
            // revoked by a rebalance meanwhile: the new owner starts from the last commit
            System.out.println("COMMIT-REFUSED " + e.code());
            System.out.flush();
          }
        }
      }
    }
  }
}
