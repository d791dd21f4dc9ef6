package dev.headwater.client;

import headwater.v1.Errors.ErrorCode;
import headwater.v1.GroupStream;
import headwater.v1.GroupStreamServiceGrpc;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.StreamObserver;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A member of a consumer group over one GroupStreamService.Consume stream
 * (proto/headwater/v1/group_stream.proto): the broker holding the stream joins the group for
 * it, takes part in rebalances and fetches the assigned partitions; this class only reads
 * records, grants credit and commits. Members on the stream share one group and one assignment
 * with Python consumers using the classic protocol.
 *
 * <p>Use it from one thread: {@link #poll} returns the next records of the assigned partitions
 * (after handing them out it grants the same number of records and bytes back to the server,
 * so at most the configured credit is ever outstanding); {@link #commitSync()} commits the
 * position after the records handed out so far, for the partitions still assigned. Offsets are
 * never committed implicitly. A member that does not poll or commit for the session timeout is
 * taken as dead by the server. {@link #close} leaves the group at once.
 *
 * <p>Failures of the stream (a refused Open, a session timeout, a lost broker) are thrown by
 * the next poll or commit as a {@link HeadwaterException}; the consumer is then closed, and a
 * new one with the same member id takes the member's place back within the session timeout.
 */
public final class GroupConsumer implements AutoCloseable {

  /** Where a partition without a committed offset starts. */
  public enum OffsetReset {
    LATEST,
    EARLIEST
  }

  /**
   * What the member asks for when it opens the stream.
   *
   * @param groupId the consumer group
   * @param topics the topics to consume (at least one)
   * @param memberId a stable identity ("" lets the server pick one)
   * @param sessionTimeout zero: the server's default
   * @param offsetReset where partitions without a committed offset start
   * @param creditRecords how many records may be outstanding (sent, not yet handed out)
   * @param creditBytes how many bytes of keys and values may be outstanding
   */
  public record Config(
      String groupId,
      List<String> topics,
      String memberId,
      Duration sessionTimeout,
      OffsetReset offsetReset,
      int creditRecords,
      long creditBytes) {
    public Config {
      topics = List.copyOf(topics);
    }

    /** Group, topics; a server-chosen member id, earliest reset, 500 records / 4 MiB credit. */
    public static Config of(String groupId, String... topics) {
      return new Config(
          groupId, List.of(topics), "", Duration.ZERO, OffsetReset.EARLIEST, 500, 4L << 20);
    }

    public Config withMemberId(String id) {
      return new Config(groupId, topics, id, sessionTimeout, offsetReset, creditRecords, creditBytes);
    }

    public Config withSessionTimeout(Duration timeout) {
      return new Config(groupId, topics, memberId, timeout, offsetReset, creditRecords, creditBytes);
    }

    public Config withOffsetReset(OffsetReset reset) {
      return new Config(groupId, topics, memberId, sessionTimeout, reset, creditRecords, creditBytes);
    }

    public Config withCredit(int records, long bytes) {
      return new Config(groupId, topics, memberId, sessionTimeout, offsetReset, records, bytes);
    }
  }

  /** The stream ended: the error that ended it, or null when the server closed it cleanly. */
  private record End(HeadwaterException error) {}

  private static final Duration DEFAULT_KEEP_ALIVE = Duration.ofSeconds(3);
  private static final Duration COMMIT_TIMEOUT = Duration.ofSeconds(30);

  private final Config config;
  private final LinkedBlockingQueue<Object> inbox = new LinkedBlockingQueue<>();
  private final Map<Long, CompletableFuture<GroupStream.ConsumeCommitResult>> pendingCommits =
      new ConcurrentHashMap<>();
  private final AtomicLong commitIds = new AtomicLong();
  private final ClientCallStreamObserver<GroupStream.ConsumeRequest> requests;
  private final Duration keepAlive;
  private final Object sendLock = new Object();
  private long lastSendNanos;

  private String memberId;
  private int generation = -1;
  private Set<TopicPartition> assignment = Set.of();
  private final Map<TopicPartition, Long> positions = new HashMap<>();
  private final Map<TopicPartition, Long> committed = new HashMap<>();
  private volatile HeadwaterException failure;
  private volatile boolean ended;
  private boolean closed;

  GroupConsumer(GroupStreamServiceGrpc.GroupStreamServiceStub stub, Config config, String clientId) {
    if (config.groupId() == null || config.groupId().isEmpty() || config.topics().isEmpty()) {
      throw new IllegalArgumentException("a group id and at least one topic are required");
    }
    this.config = config;
    this.memberId = config.memberId();
    Duration session = config.sessionTimeout();
    this.keepAlive =
        session.isZero() || session.dividedBy(3).compareTo(DEFAULT_KEEP_ALIVE) > 0
            ? DEFAULT_KEEP_ALIVE
            : session.dividedBy(3);
    this.requests =
        (ClientCallStreamObserver<GroupStream.ConsumeRequest>) stub.consume(new Responses());
    GroupStream.ConsumeOpen.Builder open =
        GroupStream.ConsumeOpen.newBuilder()
            .setGroupId(config.groupId())
            .addAllTopics(config.topics())
            .setMemberId(config.memberId())
            .setClientId(clientId)
            .setSessionTimeoutMs((int) session.toMillis())
            .setOffsetReset(
                config.offsetReset() == OffsetReset.EARLIEST
                    ? GroupStream.OffsetReset.OFFSET_RESET_EARLIEST
                    : GroupStream.OffsetReset.OFFSET_RESET_LATEST)
            .setFormat(GroupStream.DeliveryFormat.DELIVERY_FORMAT_RECORDS)
            .setCreditRecords(config.creditRecords())
            .setCreditBytes(config.creditBytes());
    send(GroupStream.ConsumeRequest.newBuilder().setOpen(open).build());
  }

  /** Receives the server's messages on a gRPC thread and queues them for poll. */
  private final class Responses implements StreamObserver<GroupStream.ConsumeResponse> {
    @Override
    public void onNext(GroupStream.ConsumeResponse response) {
      if (response.hasCommitResult()) {
        CompletableFuture<GroupStream.ConsumeCommitResult> f =
            pendingCommits.remove(response.getCommitResult().getCommitId());
        if (f != null) {
          f.complete(response.getCommitResult());
        }
      } else {
        inbox.add(response);
      }
    }

    @Override
    public void onError(Throwable t) {
      end(HeadwaterException.fromStatus(t));
    }

    @Override
    public void onCompleted() {
      end(null);
    }

    private void end(HeadwaterException error) {
      ended = true;
      HeadwaterException e =
          error != null
              ? error
              : new HeadwaterException(ErrorCode.NETWORK_EXCEPTION, "the server ended the stream");
      pendingCommits.values().forEach(f -> f.completeExceptionally(e));
      pendingCommits.clear();
      inbox.add(new End(error));
    }
  }

  private void send(GroupStream.ConsumeRequest request) {
    synchronized (sendLock) {
      requests.onNext(request);
      lastSendNanos = System.nanoTime();
    }
  }

  private void keepAliveIfDue() {
    if (ended) {
      return;
    }
    synchronized (sendLock) {
      if (System.nanoTime() - lastSendNanos >= keepAlive.toNanos()) {
        send(
            GroupStream.ConsumeRequest.newBuilder()
                .setKeepAlive(GroupStream.ConsumeKeepAlive.getDefaultInstance())
                .build());
      }
    }
  }

  private void checkOpen() {
    if (failure != null) {
      throw failure;
    }
    if (closed) {
      throw new IllegalStateException("the group consumer is closed");
    }
  }

  /** The member id (the server's choice once the first assignment arrived, if none was given). */
  public String memberId() {
    return memberId;
  }

  /** The generation of the current assignment (-1 before the first). */
  public int generation() {
    return generation;
  }

  /** The partitions currently assigned to this member. */
  public Set<TopicPartition> assignment() {
    return assignment;
  }

  /**
   * The next records of the assigned partitions, waiting at most timeout for some (none when
   * nothing arrived). Assignments that arrive meanwhile replace {@link #assignment()}; the
   * positions of revoked partitions are forgotten. Keeps the member alive while it waits.
   */
  public List<ConsumerRecord> poll(Duration timeout) {
    checkOpen();
    long deadline = System.nanoTime() + timeout.toNanos();
    List<ConsumerRecord> out = new ArrayList<>();
    long bytes = 0;
    int dropped = 0;
    while (true) {
      keepAliveIfDue();
      long left = deadline - System.nanoTime();
      Object item;
      try {
        item =
            out.isEmpty() && left > 0
                ? inbox.poll(Math.min(left, keepAlive.toNanos()), TimeUnit.NANOSECONDS)
                : inbox.poll();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
      if (item == null) {
        if (!out.isEmpty() || System.nanoTime() >= deadline) {
          break;
        }
        continue;
      }
      if (item instanceof End end) {
        failure =
            end.error() != null
                ? end.error()
                : new HeadwaterException(ErrorCode.NETWORK_EXCEPTION, "the server ended the stream");
        if (out.isEmpty()) {
          throw failure;
        }
        break;
      }
      GroupStream.ConsumeResponse response = (GroupStream.ConsumeResponse) item;
      if (response.hasAssignment()) {
        applyAssignment(response.getAssignment());
      } else if (response.hasRecords()) {
        GroupStream.ConsumeRecords recs = response.getRecords();
        TopicPartition tp = new TopicPartition(recs.getTopic(), recs.getPartition());
        if (!assignment.contains(tp)) {
          // sent before a revocation this member has already seen: dropped, its credit returned
          for (headwater.v1.BrokerOuterClass.Record r : recs.getRecordsList()) {
            dropped++;
            bytes += r.getKey().size() + r.getValue().size();
          }
          continue;
        }
        for (headwater.v1.BrokerOuterClass.Record r : recs.getRecordsList()) {
          out.add(ConsumerRecord.of(recs.getTopic(), recs.getPartition(), r));
          bytes += r.getKey().size() + r.getValue().size();
        }
        long next = recs.getNextOffset();
        if (recs.getRecordsCount() > 0) {
          next = Math.max(next, recs.getRecords(recs.getRecordsCount() - 1).getOffset() + 1);
        }
        positions.merge(tp, next, Math::max);
      }
    }
    if (out.size() + dropped > 0 && !ended) {
      GroupStream.ConsumeCredit credit =
          GroupStream.ConsumeCredit.newBuilder()
              .setRecords(out.size() + dropped)
              .setBytes(bytes)
              .build();
      send(GroupStream.ConsumeRequest.newBuilder().setCredit(credit).build());
    }
    return out;
  }

  private void applyAssignment(GroupStream.ConsumeAssignment a) {
    memberId = a.getMemberId();
    generation = a.getGenerationId();
    Set<TopicPartition> next = new LinkedHashSet<>();
    for (GroupStream.ConsumeAssignedPartition p : a.getPartitionsList()) {
      TopicPartition tp = new TopicPartition(p.getTopic(), p.getPartition());
      next.add(tp);
      if (p.getCommittedOffset() >= 0) {
        committed.put(tp, p.getCommittedOffset());
      }
    }
    positions.keySet().retainAll(next);
    committed.keySet().retainAll(next);
    assignment = Set.copyOf(next);
  }

  /**
   * Commits, for each partition still assigned, the position after the last record poll handed
   * out; waits for the server's answer. A partition whose commit was refused (revoked
   * meanwhile: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, ...) throws the HeadwaterException of
   * the first refused one, after the others were committed.
   */
  public void commitSync() {
    Map<TopicPartition, Long> offsets = new HashMap<>();
    for (Map.Entry<TopicPartition, Long> e : positions.entrySet()) {
      if (!e.getValue().equals(committed.get(e.getKey()))) {
        offsets.put(e.getKey(), e.getValue());
      }
    }
    commitSync(offsets);
  }

  /** Commits the given next offsets (see {@link #commitSync()}). */
  public void commitSync(Map<TopicPartition, Long> offsets) {
    checkOpen();
    if (offsets.isEmpty()) {
      return;
    }
    long id = commitIds.incrementAndGet();
    GroupStream.ConsumeCommit.Builder commit = GroupStream.ConsumeCommit.newBuilder().setCommitId(id);
    offsets.forEach(
        (tp, offset) ->
            commit.addOffsets(
                GroupStream.ConsumeCommitOffset.newBuilder()
                    .setTopic(tp.topic())
                    .setPartition(tp.partition())
                    .setOffset(offset)));
    CompletableFuture<GroupStream.ConsumeCommitResult> future = new CompletableFuture<>();
    pendingCommits.put(id, future);
    if (ended) {
      pendingCommits.remove(id);
      throw new HeadwaterException(ErrorCode.NETWORK_EXCEPTION, "the stream has ended");
    }
    send(GroupStream.ConsumeRequest.newBuilder().setCommit(commit).build());
    GroupStream.ConsumeCommitResult result;
    try {
      result = future.get(COMMIT_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new HeadwaterException(ErrorCode.REQUEST_TIMED_OUT, "interrupted waiting for a commit", e);
    } catch (TimeoutException e) {
      pendingCommits.remove(id);
      throw new HeadwaterException(ErrorCode.REQUEST_TIMED_OUT, "no answer to commit " + id, e);
    } catch (ExecutionException e) {
      throw e.getCause() instanceof HeadwaterException he
          ? he
          : new HeadwaterException(ErrorCode.UNKNOWN_SERVER_ERROR, String.valueOf(e.getCause()), e);
    }
    HeadwaterException.check(result.getErrorCode(), result.getErrorMessage());
    HeadwaterException first = null;
    for (GroupStream.ConsumeCommitPartitionResult p : result.getPartitionsList()) {
      TopicPartition tp = new TopicPartition(p.getTopic(), p.getPartition());
      HeadwaterException e = HeadwaterException.of(p.getErrorCode(), tp + ": " + p.getErrorMessage());
      if (e == null) {
        if (offsets.containsKey(tp) && assignment.contains(tp)) {
          committed.put(tp, offsets.get(tp));
        }
      } else if (first == null) {
        first = e;
      }
    }
    if (first != null) {
      throw first;
    }
  }

  /** Leaves the group (closes this side of the stream) and ends the stream. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    if (!ended) {
      synchronized (sendLock) {
        requests.onCompleted();
      }
      // the server answers the half-close by leaving the group and ending the stream
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
      while (!ended && System.nanoTime() < deadline) {
        try {
          Object item = inbox.poll(100, TimeUnit.MILLISECONDS);
          if (item instanceof End) {
            break;
          }
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          break;
        }
      }
      if (!ended) {
        requests.cancel("closed by the client", null);
      }
    }
  }
}
