package example;

import dev.headwater.client.ConsumerRecord;
import dev.headwater.client.GroupConsumer;
import dev.headwater.client.HeadwaterClient;
import dev.headwater.client.HeadwaterException;
import dev.headwater.client.ProducerRecord;
import headwater.v1.Errors.ErrorCode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/** Produce ten greetings, then read them back as a member of a consumer group. */
public final class Example {
  public static void main(String[] args) {
    String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:9092";
    try (HeadwaterClient client = HeadwaterClient.connect(bootstrap)) {
      try {
        client.createTopics(List.of(HeadwaterClient.NewTopic.of("greetings", 3)));
      } catch (HeadwaterException e) {
        if (e.code() != ErrorCode.TOPIC_ALREADY_EXISTS) {
          throw e;
        }
      }
      var producer = client.newProducer(dev.headwater.client.Producer.Options.defaults());
      List<ProducerRecord> records = new ArrayList<>();
      for (int i = 0; i < 10; i++) {
        byte[] key = ("user-" + i).getBytes(StandardCharsets.UTF_8);
        records.add(ProducerRecord.of(key, ("hello " + i).getBytes(StandardCharsets.UTF_8)));
      }
      producer.send("greetings", records);

      var config = GroupConsumer.Config.of("greeters", "greetings").withMemberId("example-1");
      try (GroupConsumer consumer = client.newGroupConsumer(config)) {
        Set<String> seen = new HashSet<>(); // at-least-once: a rebalance may deliver again
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (seen.size() < 10 && System.nanoTime() < deadline) {
          for (ConsumerRecord r : consumer.poll(Duration.ofMillis(500))) {
            String value = new String(r.value(), StandardCharsets.UTF_8);
            System.out.printf("%s-%d@%d %s%n", r.topic(), r.partition(), r.offset(), value);
            seen.add(r.partition() + "@" + r.offset());
          }
          consumer.commitSync(); // the group resumes after what was processed
        }
        System.out.println("consumed " + seen.size());
      }
    }
  }
}
