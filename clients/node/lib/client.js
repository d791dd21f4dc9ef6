"use strict";
// Client: the connection to a cluster. One gRPC channel per address, the cluster metadata,
// routing (a partition's leader, the active controller), retries of retriable errors, and the
// admin basics (create, list, describe topics).

const grpc = require("@grpc/grpc-js");
const { api } = require("./api");
const { HeadwaterError, codeError, statusError, isRetriable } = require("./errors");

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A unary call as a promise; failures become HeadwaterErrors (statusError). */
function unary(stub, method, request, timeoutMs = 30000) {
  return new Promise((resolve, reject) => {
    stub[method](request, { deadline: Date.now() + timeoutMs }, (err, response) =>
      err ? reject(statusError(err)) : resolve(response),
    );
  });
}

class Client {
  /**
   * Connect through any of the comma-separated bootstrap addresses ("host:port,host:port")
   * and read the cluster metadata once.
   * @param {string} bootstrap
   * @param {{clientId?: string, credentials?: grpc.ChannelCredentials, retries?: number,
   *          retryBackoffMs?: number}} [options] credentials: insecure by default
   */
  static async connect(bootstrap, options = {}) {
    const client = new Client(bootstrap, options);
    try {
      await client.refreshMetadata();
    } catch (err) {
      client.close();
      throw err;
    }
    return client;
  }

  constructor(bootstrap, options = {}) {
    this.bootstrap = String(bootstrap).split(",").map((a) => a.trim()).filter(Boolean);
    if (this.bootstrap.length === 0) throw new Error("headwater: no bootstrap address");
    this.options = {
      clientId: options.clientId || "",
      credentials: options.credentials || grpc.credentials.createInsecure(),
      retries: options.retries ?? 10,
      retryBackoffMs: options.retryBackoffMs ?? 100,
    };
    this.v1 = api().v1;
    this.stubs = new Map(); // "Service address" -> stub
    this.meta = null;
  }

  /** Close every channel. */
  close() {
    for (const stub of this.stubs.values()) stub.close();
    this.stubs.clear();
  }

  /** A stub of `service` ("Broker", "Controller", "GroupStreamService") at address. */
  stub(service, address) {
    const key = `${service} ${address}`;
    if (!this.stubs.has(key)) this.stubs.set(key, new this.v1[service](address, this.options.credentials));
    return this.stubs.get(key);
  }

  /** Ask the known brokers, then the bootstrap addresses, for the metadata (all topics). */
  async refreshMetadata() {
    const addresses = [...(this.meta ? this.meta.brokers.map(endpoint) : []), ...this.bootstrap];
    let last = null;
    for (const address of addresses) {
      try {
        this.meta = await unary(this.stub("Broker", address), "Metadata", {}, 10000);
        return this.meta;
      } catch (err) {
        last = err;
      }
    }
    throw new Error(`headwater: no broker answered Metadata: ${last && last.message}`);
  }

  /** Run call until it succeeds, fails with a non-retriable error or has failed retries + 1 times. */
  async retry(call) {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!isRetriable(err) || attempt >= this.options.retries) throw err;
      }
      await sleep(this.options.retryBackoffMs);
      await this.refreshMetadata().catch(() => {});
    }
  }

  topic(name) {
    return this.meta.topics.find((t) => t.name === name);
  }

  /** The number of partitions of topic (retried: a new topic reaches the metadata shortly after). */
  partitionCount(topic) {
    return this.retry(async () => {
      const t = this.topic(topic);
      if (!t || t.partitions.length === 0) {
        throw new HeadwaterError("UNKNOWN_TOPIC_OR_PARTITION", `topic "${topic}" does not exist`);
      }
      return t.partitions.length;
    });
  }

  /** A Broker stub for the leader of topic/partition as the last metadata has it. */
  leader(topic, partition) {
    const t = this.topic(topic);
    const p = t && t.partitions.find((x) => x.partition === partition);
    if (!p) throw new HeadwaterError("UNKNOWN_TOPIC_OR_PARTITION", `${topic}-${partition} is not in the metadata`);
    const broker = this.meta.brokers.find((b) => b.broker_id === p.leader);
    if (!broker) throw new HeadwaterError("LEADER_NOT_AVAILABLE", `${topic}-${partition} has no live leader`);
    return this.stub("Broker", endpoint(broker));
  }

  /** The address of a broker picked at random (a bootstrap address if none is known). */
  randomBroker() {
    const brokers = this.meta ? this.meta.brokers : [];
    if (brokers.length === 0) return this.bootstrap[0];
    return endpoint(brokers[Math.floor(Math.random() * brokers.length)]);
  }

  controller() {
    const ctl = this.meta.controller;
    if (!ctl || !ctl.port) throw new HeadwaterError("NOT_CONTROLLER", "no active controller is known");
    return this.stub("Controller", endpoint(ctl));
  }

  /**
   * Create topics ({name, partitions = 1, replicationFactor = min(3, live brokers), configs})
   * on the active controller; resolves name -> topic id. A refused topic rejects with an
   * AggregateError of HeadwaterErrors (TOPIC_ALREADY_EXISTS, ...), `created` on it.
   */
  async createTopics(...topics) {
    const request = {
      topics: topics.map((t) => ({
        name: t.name,
        partitions: t.partitions || 0,
        replication_factor: t.replicationFactor || 0,
        configs: t.configs || {},
      })),
    };
    const response = await this.retry(async () => unary(this.controller(), "CreateTopics", request));
    const created = {};
    const errors = [];
    for (const r of response.topics) {
      const err = codeError(r.error_code, r.error_message);
      if (err) errors.push(Object.assign(err, { topic: r.name }));
      else created[r.name] = r.topic_id;
    }
    await this.refreshMetadata();
    if (errors.length > 0) {
      throw Object.assign(new AggregateError(errors, errors.map((e) => `${e.topic}: ${e.message}`).join("; ")), {
        created,
      });
    }
    return created;
  }

  /** The sorted names of the cluster's topics (fresh metadata). */
  async listTopics() {
    const meta = await this.refreshMetadata();
    return meta.topics.map((t) => t.name).sort();
  }

  /**
   * Describe the named topics (every topic when none is named): {name, topicId, configs,
   * partitions: [{partition, leader, leaderEpoch, replicas, isr}]}, partitions in order. An
   * unknown name rejects with UNKNOWN_TOPIC_OR_PARTITION.
   */
  async describeTopics(...names) {
    const meta = await this.refreshMetadata();
    if (names.length === 0) names = meta.topics.map((t) => t.name).sort();
    return names.map((name) => {
      const t = this.topic(name);
      if (!t) throw new HeadwaterError("UNKNOWN_TOPIC_OR_PARTITION", `topic "${name}" does not exist`);
      return {
        name,
        topicId: t.topic_id,
        configs: t.configs,
        partitions: t.partitions
          .map((p) => ({
            partition: p.partition,
            leader: p.leader,
            leaderEpoch: p.leader_epoch,
            replicas: p.replicas,
            isr: p.isr,
          }))
          .sort((a, b) => a.partition - b.partition),
      };
    });
  }
}

function endpoint(broker) {
  return `${broker.host}:${broker.port}`;
}

/** A fetched Record as a message: offsets and timestamps as Numbers, null keys and values as null. */
function toMessage(topic, partition, r) {
  return {
    topic,
    partition,
    offset: Number(r.offset),
    timestamp: Number(r.timestamp),
    key: r.key === undefined || r.key === null ? null : Buffer.from(r.key),
    value: r.value === undefined || r.value === null ? null : Buffer.from(r.value),
    headers: r.headers.map((h) => ({ key: h.key, value: h.value === undefined || h.value === null ? null : Buffer.from(h.value) })),
  };
}

module.exports = { Client, unary, sleep, toMessage };
