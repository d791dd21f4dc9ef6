package dev.headwater.client;

import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.List;

/** The cluster the tests run against: HEADWATER_BOOTSTRAP (tests/interop/test_java_client.py). */
final class Cluster {
  static final Duration DEADLINE = Duration.ofSeconds(90);

  private Cluster() {}

  static HeadwaterClient connect() {
    String bootstrap = System.getenv("HEADWATER_BOOTSTRAP");
    if (bootstrap == null || bootstrap.isEmpty()) {
      fail("HEADWATER_BOOTSTRAP is not set: run through tests/interop/test_java_client.py");
    }
    return HeadwaterClient.connect(bootstrap, HeadwaterClient.Options.defaults().withClientId("java-test"));
  }

  /** Creates a topic and waits (bounded) until every partition has a leader. */
  static HeadwaterClient.TopicDescription createTopic(HeadwaterClient c, String name, int partitions)
      throws InterruptedException {
    c.createTopics(List.of(HeadwaterClient.NewTopic.of(name, partitions)));
    long deadline = System.nanoTime() + DEADLINE.toNanos();
    while (true) {
      HeadwaterClient.TopicDescription d = null;
      try {
        d = c.describeTopics(name).get(0);
      } catch (HeadwaterException e) {
        // the brokers' metadata learns of a new topic shortly after the controller
        if (e.code() != headwater.v1.Errors.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) {
          throw e;
        }
      }
      if (d != null
          && d.partitions().size() == partitions
          && d.partitions().stream().allMatch(p -> p.leader() >= 0)) {
        return d;
      }
      if (System.nanoTime() > deadline) {
        fail(name + ": partitions without a leader until the deadline: " + d);
      }
      Thread.sleep(50);
    }
  }
}
