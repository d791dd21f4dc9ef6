package dev.headwater.client;

import headwater.v1.BrokerGrpc;
import headwater.v1.ControllerGrpc;
import headwater.v1.ControllerOuterClass;
import headwater.v1.Errors.ErrorCode;
import headwater.v1.GroupStreamServiceGrpc;
import headwater.v1.Metadata.BrokerInfo;
import headwater.v1.Metadata.MetadataRequest;
import headwater.v1.Metadata.MetadataResponse;
import headwater.v1.Metadata.PartitionState;
import headwater.v1.Metadata.TopicMetadata;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * A connection to a Headwater cluster, built on its gRPC API (proto/, docs/api.md): one gRPC
 * channel per cluster address and the cluster metadata. Produce and fetch go to each
 * partition's leader, admin calls to the active controller, both found in a broker's Metadata
 * answer and refreshed when a call is answered with a retriable error (NOT_LEADER_OR_FOLLOWER,
 * NOT_CONTROLLER, ...). Safe for concurrent use; close it when done.
 *
 * <p>Admin basics are here: {@link #createTopics}, {@link #listTopics}, {@link #describeTopics}.
 * {@link #newProducer}, {@link #consumePartition} and {@link #newGroupConsumer} make the
 * producer and the two consumers.
 */
public final class HeadwaterClient implements AutoCloseable {

  /**
   * Options of {@link #connect(String, Options)}.
   *
   * @param clientId sent as client_id with produce and fetch requests (quotas, logs)
   * @param credentials the channels' transport (plaintext by default)
   * @param retries how many times a retriable error is retried
   * @param retryBackoff the pause between retries
   * @param callTimeout the deadline of each unary call
   */
  public record Options(
      String clientId,
      ChannelCredentials credentials,
      int retries,
      Duration retryBackoff,
      Duration callTimeout) {
    /** Plaintext, client id "headwater-java", 10 retries 100 ms apart, 30 s per call. */
    public static Options defaults() {
      return new Options(
          "headwater-java",
          InsecureChannelCredentials.create(),
          10,
          Duration.ofMillis(100),
          Duration.ofSeconds(30));
    }

    /** These options with another client id. */
    public Options withClientId(String id) {
      return new Options(id, credentials, retries, retryBackoff, callTimeout);
    }
  }

  private final List<String> bootstrap;
  private final Options options;
  private final Map<String, ManagedChannel> channels = new HashMap<>();
  private MetadataResponse metadata;

  private HeadwaterClient(List<String> bootstrap, Options options) {
    this.bootstrap = bootstrap;
    this.options = options;
  }

  /** Connects through any of the comma-separated addresses ("host:port,host:port"). */
  public static HeadwaterClient connect(String bootstrap) {
    return connect(bootstrap, Options.defaults());
  }

  /** Connects with options, and reads the cluster metadata once. */
  public static HeadwaterClient connect(String bootstrap, Options options) {
    List<String> addrs =
        Arrays.stream(Objects.requireNonNull(bootstrap, "bootstrap").split(","))
            .map(String::trim)
            .filter(s -> !s.isEmpty())
            .toList();
    if (addrs.isEmpty()) {
      throw new IllegalArgumentException("no bootstrap address in '" + bootstrap + "'");
    }
    HeadwaterClient client = new HeadwaterClient(addrs, options);
    try {
      client.refreshMetadata();
    } catch (RuntimeException e) {
      client.close();
      throw e;
    }
    return client;
  }

  Options options() {
    return options;
  }

  /** Closes every channel. */
  @Override
  public synchronized void close() {
    for (ManagedChannel ch : channels.values()) {
      ch.shutdownNow();
    }
    for (ManagedChannel ch : channels.values()) {
      try {
        ch.awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    channels.clear();
  }

  synchronized ManagedChannel channel(String address) {
    return channels.computeIfAbsent(
        address, a -> Grpc.newChannelBuilder(a, options.credentials()).build());
  }

  static String endpoint(BrokerInfo b) {
    return b.getHost() + ":" + b.getPort();
  }

  BrokerGrpc.BrokerBlockingStub brokerStub(String address) {
    return BrokerGrpc.newBlockingStub(channel(address))
        .withDeadlineAfter(options.callTimeout().toMillis(), TimeUnit.MILLISECONDS);
  }

  /**
   * Asks the known brokers, then the bootstrap addresses, for the cluster metadata (all
   * topics) and keeps the first answer.
   */
  public MetadataResponse refreshMetadata() {
    List<String> addrs = new ArrayList<>();
    MetadataResponse known = metadata();
    if (known != null) {
      known.getBrokersList().forEach(b -> addrs.add(endpoint(b)));
    }
    addrs.addAll(bootstrap);
    RuntimeException last = null;
    for (String addr : addrs) {
      try {
        MetadataResponse resp = brokerStub(addr).metadata(MetadataRequest.getDefaultInstance());
        synchronized (this) {
          metadata = resp;
        }
        return resp;
      } catch (RuntimeException e) {
        last = HeadwaterException.fromStatus(e);
      }
    }
    throw new HeadwaterException(
        ErrorCode.NETWORK_EXCEPTION, "no broker answered Metadata: " + last, last);
  }

  synchronized MetadataResponse metadata() {
    return metadata;
  }

  static TopicMetadata topicOf(MetadataResponse meta, String topic) {
    for (TopicMetadata t : meta.getTopicsList()) {
      if (t.getName().equals(topic)) {
        return t;
      }
    }
    return null;
  }

  /** The number of partitions of topic (retried: a new topic reaches the brokers shortly after). */
  int partitionCount(String topic) {
    return retry(
        () -> {
          TopicMetadata t = topicOf(metadata(), topic);
          if (t == null || t.getPartitionsCount() == 0) {
            throw new HeadwaterException(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic '" + topic + "' does not exist");
          }
          return t.getPartitionsCount();
        });
  }

  /** A Broker stub for the leader of topic/partition as the last metadata has it. */
  BrokerGrpc.BrokerBlockingStub leader(String topic, int partition) {
    return brokerStub(leaderAddress(topic, partition));
  }

  String leaderAddress(String topic, int partition) {
    MetadataResponse meta = metadata();
    TopicMetadata t = topicOf(meta, topic);
    if (t == null) {
      throw new HeadwaterException(
          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic '" + topic + "' is not in the metadata");
    }
    for (PartitionState p : t.getPartitionsList()) {
      if (p.getPartition() != partition) {
        continue;
      }
      for (BrokerInfo b : meta.getBrokersList()) {
        if (b.getBrokerId() == p.getLeader()) {
          return endpoint(b);
        }
      }
      throw new HeadwaterException(
          ErrorCode.LEADER_NOT_AVAILABLE, topic + "-" + partition + " has no live leader");
    }
    throw new HeadwaterException(
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, topic + " has no partition " + partition);
  }

  /** The address of some broker of the cluster. */
  String anyBroker() {
    MetadataResponse meta = metadata();
    return meta.getBrokersCount() > 0 ? endpoint(meta.getBrokers(0)) : bootstrap.get(0);
  }

  /**
   * Runs call until it succeeds, fails with an error that is not retriable, or has failed
   * retries + 1 times; before each retry it waits retryBackoff and refreshes the metadata. gRPC
   * failures are turned into HeadwaterExceptions.
   */
  <T> T retry(Supplier<T> call) {
    for (int attempt = 0; ; attempt++) {
      HeadwaterException error;
      try {
        return call.get();
      } catch (HeadwaterException e) {
        error = e;
      } catch (io.grpc.StatusRuntimeException e) {
        error = HeadwaterException.fromStatus(e);
      }
      if (!error.retriable() || attempt >= options.retries()) {
        throw error;
      }
      try {
        Thread.sleep(options.retryBackoff().toMillis());
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        throw error;
      }
      try {
        refreshMetadata();
      } catch (HeadwaterException ignored) {
        // the next attempt reports what is still wrong
      }
    }
  }

  // ----- admin -----

  /** A topic to create: 0 partitions means 1, replication factor 0 the cluster's default. */
  public record NewTopic(String name, int partitions, int replicationFactor, Map<String, String> configs) {
    public NewTopic {
      configs = configs == null ? Map.of() : Map.copyOf(configs);
    }

    public static NewTopic of(String name, int partitions) {
      return new NewTopic(name, partitions, 0, Map.of());
    }
  }

  /** A partition's leadership state; leader is -1 when it has none. */
  public record PartitionDescription(
      int partition, int leader, int leaderEpoch, List<Integer> replicas, List<Integer> isr) {}

  /** A topic as the cluster metadata describes it (configs: topic-level overrides only). */
  public record TopicDescription(
      String name, String topicId, List<PartitionDescription> partitions, Map<String, String> configs) {}

  private ControllerGrpc.ControllerBlockingStub controller() {
    BrokerInfo ctl = metadata().hasController() ? metadata().getController() : null;
    if (ctl == null || ctl.getPort() == 0) {
      throw new HeadwaterException(ErrorCode.NOT_CONTROLLER, "no active controller is known");
    }
    return ControllerGrpc.newBlockingStub(channel(endpoint(ctl)))
        .withDeadlineAfter(options.callTimeout().toMillis(), TimeUnit.MILLISECONDS);
  }

  /**
   * Creates topics on the active controller; returns name to topic id. A refused topic
   * (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, ...) throws the HeadwaterException of the first
   * refused one after the others were created. Partitions get leaders shortly after; the
   * producer and consumers retry until then.
   */
  public Map<String, String> createTopics(List<NewTopic> topics) {
    ControllerOuterClass.CreateTopicsRequest.Builder req =
        ControllerOuterClass.CreateTopicsRequest.newBuilder();
    for (NewTopic t : topics) {
      req.addTopics(
          ControllerOuterClass.NewTopic.newBuilder()
              .setName(t.name())
              .setPartitions(t.partitions())
              .setReplicationFactor(t.replicationFactor())
              .putAllConfigs(t.configs()));
    }
    ControllerOuterClass.CreateTopicsResponse resp =
        retry(() -> controller().createTopics(req.build()));
    Map<String, String> ids = new HashMap<>();
    HeadwaterException first = null;
    for (ControllerOuterClass.TopicResult r : resp.getTopicsList()) {
      HeadwaterException e =
          HeadwaterException.of(r.getErrorCode(), "topic '" + r.getName() + "': " + r.getErrorMessage());
      if (e == null) {
        ids.put(r.getName(), r.getTopicId());
      } else if (first == null) {
        first = e;
      }
    }
    refreshMetadata();
    if (first != null) {
      throw first;
    }
    return ids;
  }

  /** The sorted names of the cluster's topics (fresh metadata). */
  public List<String> listTopics() {
    return refreshMetadata().getTopicsList().stream().map(TopicMetadata::getName).sorted().toList();
  }

  /**
   * Describes the named topics, or every topic (sorted by name) when none is named, from fresh
   * metadata; an unknown name is UNKNOWN_TOPIC_OR_PARTITION.
   */
  public List<TopicDescription> describeTopics(String... names) {
    MetadataResponse meta = refreshMetadata();
    List<String> wanted =
        names.length > 0
            ? List.of(names)
            : meta.getTopicsList().stream().map(TopicMetadata::getName).sorted().toList();
    List<TopicDescription> out = new ArrayList<>();
    for (String name : wanted) {
      TopicMetadata t = topicOf(meta, name);
      if (t == null) {
        throw new HeadwaterException(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "topic '" + name + "' does not exist");
      }
      List<PartitionDescription> parts =
          t.getPartitionsList().stream()
              .map(
                  p ->
                      new PartitionDescription(
                          p.getPartition(),
                          p.getLeader(),
                          p.getLeaderEpoch(),
                          List.copyOf(p.getReplicasList()),
                          List.copyOf(p.getIsrList())))
              .sorted((a, b) -> Integer.compare(a.partition(), b.partition()))
              .toList();
      out.add(new TopicDescription(name, t.getTopicId(), parts, Map.copyOf(t.getConfigsMap())));
    }
    return out;
  }

  // ----- producers and consumers -----

  /** An idempotent producer sending through this client. */
  public Producer newProducer(Producer.Options producerOptions) {
    return new Producer(this, producerOptions);
  }

  /**
   * A consumer of one partition from offset (or {@link PartitionConsumer#EARLIEST}, {@link
   * PartitionConsumer#LATEST}).
   */
  public PartitionConsumer consumePartition(String topic, int partition, long offset) {
    return new PartitionConsumer(this, topic, partition, offset, Duration.ofMillis(500));
  }

  /**
   * A member of a consumer group over GroupStreamService.Consume (proto/headwater/v1/
   * group_stream.proto), opened on a broker of the cluster.
   */
  public GroupConsumer newGroupConsumer(GroupConsumer.Config config) {
    return new GroupConsumer(
        GroupStreamServiceGrpc.newStub(channel(anyBroker())), config, options.clientId());
  }
}
