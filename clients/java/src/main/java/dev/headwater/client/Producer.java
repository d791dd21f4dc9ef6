package dev.headwater.client;

import com.google.protobuf.ByteString;
import headwater.v1.BrokerOuterClass;
import headwater.v1.Transaction.InitProducerIdRequest;
import headwater.v1.Transaction.InitProducerIdResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Sends records through the records path (Broker.ProduceRecords) with acks=all, as an
 * idempotent producer: it takes a producer id from Broker.InitProducerId on first use and
 * numbers each partition's records (producer_id, producer_epoch, base_sequence), so a request
 * retried after a lost answer or a leader change is stored once (the broker answers the retry
 * with the original offset). A keyed record goes to {@link Partitioner#partition}, the
 * partitioner every Headwater client shares; null keys are spread round-robin.
 *
 * <p>A send that fails without a known outcome drops the producer id; the next send takes a new
 * one, so it never trips over a sequence gap. Sends are synchronous and serialized (the methods
 * are synchronized): one request per partition in flight, in order.
 */
public final class Producer {

  /**
   * Producer options.
   *
   * @param compression of the batches the broker builds: "", "none", "gzip", "lz4", "zstd"
   * @param timeout the broker's wait for the in-sync replicas (zero: the broker's default)
   */
  public record Options(String compression, Duration timeout) {
    public static Options defaults() {
      return new Options("", Duration.ZERO);
    }
  }

  private final HeadwaterClient client;
  private final Options options;
  private long producerId = -1;
  private int producerEpoch;
  private final Map<TopicPartition, Integer> nextSequence = new HashMap<>();
  private final Map<String, Integer> roundRobin = new HashMap<>();

  Producer(HeadwaterClient client, Options options) {
    this.client = client;
    this.options = options;
  }

  /** Sends one record; where it was stored. */
  public RecordMetadata send(String topic, ProducerRecord record) {
    return send(topic, List.of(record)).get(0);
  }

  /**
   * Sends records to topic, each keyed one to its key's partition; the result has one
   * RecordMetadata per record, in order. On a failure, the records of partitions sent before
   * it are stored.
   */
  public synchronized List<RecordMetadata> send(String topic, List<ProducerRecord> records) {
    int n = client.partitionCount(topic);
    int[] targets = new int[records.size()];
    for (int i = 0; i < records.size(); i++) {
      byte[] key = records.get(i).key();
      if (key != null) {
        targets[i] = Partitioner.partition(key, n);
      } else {
        int next = roundRobin.getOrDefault(topic, 0);
        roundRobin.put(topic, next + 1);
        targets[i] = Math.floorMod(next, n);
      }
    }
    return sendGrouped(topic, records, targets);
  }

  /** Sends records to one partition of topic, in order. */
  public synchronized List<RecordMetadata> sendTo(
      String topic, int partition, List<ProducerRecord> records) {
    int[] targets = new int[records.size()];
    java.util.Arrays.fill(targets, partition);
    return sendGrouped(topic, records, targets);
  }

  private List<RecordMetadata> sendGrouped(
      String topic, List<ProducerRecord> records, int[] targets) {
    Map<Integer, List<Integer>> groups = new LinkedHashMap<>();
    for (int i = 0; i < targets.length; i++) {
      groups.computeIfAbsent(targets[i], k -> new ArrayList<>()).add(i);
    }
    RecordMetadata[] out = new RecordMetadata[records.size()];
    for (Map.Entry<Integer, List<Integer>> g : groups.entrySet()) {
      int partition = g.getKey();
      List<ProducerRecord> recs = g.getValue().stream().map(records::get).toList();
      long base = sendPartition(topic, partition, recs);
      for (int j = 0; j < g.getValue().size(); j++) {
        out[g.getValue().get(j)] = new RecordMetadata(topic, partition, base + j);
      }
    }
    return List.of(out);
  }

  private void ensureIdentity() {
    if (producerId >= 0) {
      return;
    }
    InitProducerIdResponse resp =
        client.retry(
            () -> {
              InitProducerIdResponse r =
                  client
                      .brokerStub(client.anyBroker())
                      .initProducerId(
                          InitProducerIdRequest.newBuilder()
                              .setProducerId(-1)
                              .setProducerEpoch(-1)
                              .build());
              HeadwaterException.check(r.getErrorCode(), r.getErrorMessage());
              return r;
            });
    producerId = resp.getProducerId();
    producerEpoch = resp.getProducerEpoch();
    nextSequence.clear();
  }

  private long sendPartition(String topic, int partition, List<ProducerRecord> records) {
    ensureIdentity();
    TopicPartition tp = new TopicPartition(topic, partition);
    int sequence = nextSequence.getOrDefault(tp, 0);
    BrokerOuterClass.ProduceRecordsRequest.Builder req =
        BrokerOuterClass.ProduceRecordsRequest.newBuilder()
            .setTopic(topic)
            .setPartition(partition)
            .setAcks(BrokerOuterClass.Acks.ACKS_ALL)
            .setTimeoutMs((int) options.timeout().toMillis())
            .setClientId(client.options().clientId())
            .setCompression(options.compression())
            .setProducerId(producerId)
            .setProducerEpoch(producerEpoch)
            .setBaseSequence(sequence);
    for (ProducerRecord r : records) {
      BrokerOuterClass.Record.Builder rec =
          BrokerOuterClass.Record.newBuilder().setTimestamp(r.timestampMs());
      if (r.key() != null) {
        rec.setKey(ByteString.copyFrom(r.key()));
      }
      if (r.value() != null) {
        rec.setValue(ByteString.copyFrom(r.value()));
      }
      for (Header h : r.headers()) {
        BrokerOuterClass.RecordHeader.Builder hb =
            BrokerOuterClass.RecordHeader.newBuilder().setKey(h.key());
        if (h.value() != null) {
          hb.setValue(ByteString.copyFrom(h.value()));
        }
        rec.addHeaders(hb);
      }
      req.addRecords(rec);
    }
    BrokerOuterClass.ProduceRecordsRequest request = req.build();
    try {
      long base =
          client.retry(
              () -> {
                BrokerOuterClass.ProduceResponse resp =
                    client.leader(topic, partition).produceRecords(request);
                if (resp.getPartitionsCount() != 1) {
                  throw new IllegalStateException(
                      "ProduceRecords answered " + resp.getPartitionsCount() + " partitions");
                }
                BrokerOuterClass.PartitionProduceResult r = resp.getPartitions(0);
                HeadwaterException.check(r.getErrorCode(), r.getErrorMessage());
                return r.getBaseOffset();
              });
      nextSequence.put(tp, (int) ((sequence + (long) records.size()) % (1L << 31)));
      return base;
    } catch (RuntimeException e) {
      producerId = -1; // unknown outcome: a new identity for the next send
      throw e;
    }
  }
}
