"use strict";
// Producer: records through Broker.ProduceRecords, acks=all, idempotent (a producer id from
// Broker.InitProducerId and a sequence per partition, so a retried request is stored once).

const { HeadwaterError, codeError } = require("./errors");
const { unary } = require("./client");
const { partition: keyPartition } = require("./partitioner");

const bytes = (v) => (v === null || v === undefined ? undefined : Buffer.from(v));

class Producer {
  /**
   * @param {import("./client").Client} client
   * @param {{compression?: string, timeoutMs?: number}} [options] compression: "", "none",
   *   "gzip", "lz4", "zstd"; timeoutMs: the broker's wait for the in-sync replicas (0: 30 s)
   */
  constructor(client, options = {}) {
    this.client = client;
    this.options = options;
    this.identity = null; // a promise of {id, epoch}
    this.partitions = new Map(); // "topic/partition" -> {tail: promise, identity, next}
    this.roundRobin = new Map();
  }

  /**
   * Send records ({key, value, headers: [{key, value}], timestamp}; key/value null: null,
   * strings and Buffers as bytes) to topic: a keyed record goes to partition(key, n), the
   * partitioner every Headwater client shares; null keys round-robin. Resolves one
   * {topic, partition, offset} per record, in order.
   */
  async send(topic, ...records) {
    const n = await this.client.partitionCount(topic);
    const targets = records.map((r) => {
      if (r.key !== null && r.key !== undefined) return keyPartition(r.key, n);
      const next = this.roundRobin.get(topic) || 0;
      this.roundRobin.set(topic, next + 1);
      return next % n;
    });
    return this.sendGrouped(topic, records, targets);
  }

  /** Send records to one partition of topic, in order. */
  sendTo(topic, partition, ...records) {
    return this.sendGrouped(topic, records, records.map(() => partition));
  }

  async sendGrouped(topic, records, targets) {
    const groups = new Map();
    targets.forEach((p, i) => groups.set(p, [...(groups.get(p) || []), i]));
    const out = new Array(records.length);
    const results = await Promise.allSettled(
      [...groups].map(async ([partition, idx]) => {
        const base = await this.sendPartition(topic, partition, idx.map((i) => records[i]));
        idx.forEach((i, j) => (out[i] = { topic, partition, offset: base + j }));
      }),
    );
    const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason);
    if (failed.length === 1) throw failed[0];
    if (failed.length > 1) throw new AggregateError(failed, failed.map((e) => e.message).join("; "));
    return out;
  }

  getIdentity() {
    if (!this.identity) {
      this.identity = this.client
        .retry(async () => {
          const broker = this.client.stub("Broker", this.client.randomBroker());
          const r = await unary(broker, "InitProducerId", { producer_id: "-1", producer_epoch: -1 });
          const err = codeError(r.error_code, r.error_message);
          if (err) throw err;
          return { id: r.producer_id, epoch: r.producer_epoch };
        })
        .catch((err) => {
          this.identity = null;
          throw err;
        });
    }
    return this.identity;
  }

  /** One request per partition at a time, in order: chained on the partition's tail. */
  sendPartition(topic, partition, records) {
    const key = `${topic}/${partition}`;
    if (!this.partitions.has(key)) this.partitions.set(key, { tail: Promise.resolve(), identity: null, next: 0 });
    const state = this.partitions.get(key);
    const result = state.tail.then(async () => {
      const identity = await this.getIdentity();
      if (state.identity !== identity) Object.assign(state, { identity, next: 0 });
      const request = this.request(topic, partition, records, identity, state.next);
      try {
        const base = await this.produce(request);
        state.next = (state.next + records.length) % 2 ** 31;
        return base;
      } catch (err) {
        // unknown outcome: the next send takes a new producer id, so it never meets a sequence gap
        if (this.identity && (await this.identity.catch(() => null)) === identity) this.identity = null;
        throw err;
      }
    });
    state.tail = result.catch(() => {});
    return result;
  }

  request(topic, partition, records, identity, sequence) {
    return {
      topic,
      partition,
      acks: "ACKS_ALL",
      timeout_ms: this.options.timeoutMs || 0,
      client_id: this.client.options.clientId,
      compression: this.options.compression || "",
      producer_id: identity.id,
      producer_epoch: identity.epoch,
      base_sequence: sequence,
      records: records.map((r) => ({
        key: bytes(r.key),
        value: bytes(r.value),
        timestamp: String(r.timestamp ? Number(r.timestamp) : 0),
        headers: (r.headers || []).map((h) => ({ key: h.key, value: bytes(h.value) })),
      })),
    };
  }

  /** Send request to the partition's leader until answered without a retriable error; the base offset. */
  produce(request) {
    return this.client.retry(async () => {
      const response = await unary(this.client.leader(request.topic, request.partition), "ProduceRecords", request);
      if (response.partitions.length !== 1) {
        throw new HeadwaterError("UNKNOWN_SERVER_ERROR", `ProduceRecords answered ${response.partitions.length} partitions`);
      }
      const r = response.partitions[0];
      const err = codeError(r.error_code, r.error_message);
      if (err) throw err;
      return Number(r.base_offset);
    });
  }
}

module.exports = { Producer };
