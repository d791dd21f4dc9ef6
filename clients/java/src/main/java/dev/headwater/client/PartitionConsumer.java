package dev.headwater.client;

import headwater.v1.BrokerGrpc;
import headwater.v1.BrokerOuterClass;
import io.grpc.Context;
import io.grpc.StatusRuntimeException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

/**
 * Reads one partition in offset order through a Broker.FetchRecords stream to the partition's
 * leader, reopened at its position after a leader change or a lost connection. Not safe for
 * concurrent use; close it when done.
 */
public final class PartitionConsumer implements AutoCloseable {
  /** Start offset: the partition's end (only records produced from now on). */
  public static final long LATEST = -1;

  /** Start offset: the partition's first retained record. */
  public static final long EARLIEST = -2;

  private final HeadwaterClient client;
  private final String topic;
  private final int partition;
  private final Duration maxWait;
  private long position;
  private long highWatermark = -1;
  private Iterator<BrokerOuterClass.FetchRecordsResponse> stream;
  private Context.CancellableContext streamContext;

  PartitionConsumer(
      HeadwaterClient client, String topic, int partition, long offset, Duration maxWait) {
    this.client = client;
    this.topic = topic;
    this.partition = partition;
    this.maxWait = maxWait;
    this.position = offset < 0 ? listOffset(offset) : offset;
  }

  /** The offset of topic/partition at timestamp ts, or with LATEST / EARLIEST its end or start. */
  private long listOffset(long ts) {
    return client.retry(
        () -> {
          BrokerOuterClass.ListOffsetsResponse resp =
              client
                  .leader(topic, partition)
                  .listOffsets(
                      BrokerOuterClass.ListOffsetsRequest.newBuilder()
                          .addPartitions(
                              BrokerOuterClass.ListOffsetsPartition.newBuilder()
                                  .setTopic(topic)
                                  .setPartition(partition)
                                  .setTimestamp(ts))
                          .build());
          BrokerOuterClass.ListOffsetsResult r = resp.getPartitions(0);
          HeadwaterException.check(r.getErrorCode(), r.getErrorMessage());
          return r.getOffset();
        });
  }

  /** The offset of the next record {@link #poll} returns. */
  public long position() {
    return position;
  }

  /** The partition's high watermark as of the last poll (-1 before the first). */
  public long highWatermark() {
    return highWatermark;
  }

  private void open() {
    BrokerGrpc.BrokerBlockingStub stub =
        BrokerGrpc.newBlockingStub(client.channel(client.leaderAddress(topic, partition)));
    BrokerOuterClass.FetchRequest request =
        BrokerOuterClass.FetchRequest.newBuilder()
            .setTopic(topic)
            .setPartition(partition)
            .setOffset(position)
            .setMaxWaitMs((int) maxWait.toMillis())
            .setCurrentLeaderEpoch(-1)
            .setClientId(client.options().clientId())
            .build();
    Context.CancellableContext ctx = Context.current().withCancellation();
    Context previous = ctx.attach();
    try {
      stream = stub.fetchRecords(request);
    } finally {
      ctx.detach(previous);
    }
    streamContext = ctx;
  }

  private void closeStream() {
    if (streamContext != null) {
      streamContext.cancel(null);
    }
    stream = null;
    streamContext = null;
  }

  /**
   * The next records of the partition: waits at most about the long-poll bound (500 ms) and
   * returns none when nothing arrived. Retriable errors are retried on a new stream from the
   * position; others throw a HeadwaterException.
   */
  public List<ConsumerRecord> poll() {
    return client.retry(
        () -> {
          if (stream == null) {
            open();
          }
          BrokerOuterClass.FetchRecordsResponse resp;
          try {
            if (!stream.hasNext()) {
              closeStream();
              return List.of();
            }
            resp = stream.next();
          } catch (StatusRuntimeException e) {
            closeStream();
            throw HeadwaterException.fromStatus(e);
          }
          HeadwaterException error =
              HeadwaterException.of(resp.getErrorCode(), resp.getErrorMessage());
          if (error != null) {
            closeStream(); // the broker ends the stream after an error
            throw error;
          }
          highWatermark = resp.getHighWatermark();
          List<ConsumerRecord> out = new ArrayList<>();
          for (BrokerOuterClass.Record r : resp.getRecordsList()) {
            if (r.getOffset() >= position) {
              out.add(ConsumerRecord.of(topic, partition, r));
            }
          }
          if (resp.getNextOffset() > position) {
            position = resp.getNextOffset();
          }
          if (!out.isEmpty() && out.get(out.size() - 1).offset() >= position) {
            position = out.get(out.size() - 1).offset() + 1;
          }
          return out;
        });
  }

  /** Ends the fetch stream. */
  @Override
  public void close() {
    closeStream();
  }
}
