"use strict";
// PartitionConsumer: one partition in offset order through a Broker.FetchRecords stream to
// the partition's leader, reopened at its position after a leader change.

const { HeadwaterError, codeError, statusError } = require("./errors");
const { unary, toMessage } = require("./client");

const OFFSET_LATEST = -1; // the partition's end: only records produced from now on
const OFFSET_EARLIEST = -2; // the partition's first retained record

/** The offset of topic/partition at timestamp ts (ms), or with OFFSET_LATEST / OFFSET_EARLIEST its end / start. */
function listOffset(client, topic, partition, ts) {
  return client.retry(async () => {
    const response = await unary(client.leader(topic, partition), "ListOffsets", {
      partitions: [{ topic, partition, timestamp: String(ts) }],
    });
    const r = response.partitions[0];
    const err = codeError(r.error_code, r.error_message);
    if (err) throw err;
    return Number(r.offset);
  });
}

class PartitionConsumer {
  /**
   * Start reading topic/partition at offset (or OFFSET_EARLIEST, OFFSET_LATEST).
   * @param {{maxWaitMs?: number, maxBytes?: number, readCommitted?: boolean}} [options]
   *   maxWaitMs bounds each long poll (0: the broker's 500 ms); maxBytes per response (0: 1 MiB)
   */
  static async open(client, topic, partition, offset, options = {}) {
    const position = offset < 0 ? await listOffset(client, topic, partition, offset) : offset;
    return new PartitionConsumer(client, topic, partition, position, options);
  }

  constructor(client, topic, partition, position, options) {
    Object.assign(this, { client, topic, partition, position, options, highWatermark: -1 });
    this.call = null;
    this.events = []; // {response} | {error}, in arrival order
    this.wake = null;
  }

  openStream() {
    const call = this.client.leader(this.topic, this.partition).FetchRecords({
      topic: this.topic,
      partition: this.partition,
      offset: String(this.position),
      max_wait_ms: this.options.maxWaitMs || 0,
      max_bytes: this.options.maxBytes || 0,
      isolation_level: this.options.readCommitted ? "READ_COMMITTED" : "READ_UNCOMMITTED",
      current_leader_epoch: -1,
      client_id: this.client.options.clientId,
    });
    const push = (event) => {
      if (this.call !== call) return;
      this.events.push(event);
      if (this.wake) this.wake();
    };
    call.on("data", (response) => push({ response }));
    call.on("error", (error) => push({ error: statusError(error) }));
    call.on("end", () => push({ error: new HeadwaterError("NETWORK_EXCEPTION", "the fetch stream ended") }));
    this.call = call;
    this.events = [];
  }

  closeStream() {
    if (this.call) this.call.cancel();
    this.call = null;
    this.events = [];
  }

  /** End the fetch stream. */
  close() {
    this.closeStream();
  }

  /**
   * The next records of the partition (none when the long poll ended without new ones).
   * Retriable errors (a leader change, ...) are retried on a new stream from the position.
   */
  poll() {
    return this.client.retry(async () => {
      if (!this.call) this.openStream();
      while (this.events.length === 0) await new Promise((resolve) => (this.wake = resolve));
      this.wake = null;
      const event = this.events.shift();
      if (event.error) {
        this.closeStream();
        throw event.error;
      }
      const r = event.response;
      const err = codeError(r.error_code, r.error_message);
      if (err) {
        this.closeStream(); // the broker ends the stream after an error
        throw err;
      }
      this.highWatermark = Number(r.high_watermark);
      const out = r.records
        .filter((rec) => Number(rec.offset) >= this.position)
        .map((rec) => toMessage(this.topic, this.partition, rec));
      this.position = Math.max(this.position, Number(r.next_offset));
      if (out.length > 0) this.position = Math.max(this.position, out[out.length - 1].offset + 1);
      return out;
    });
  }
}

module.exports = { PartitionConsumer, listOffset, OFFSET_LATEST, OFFSET_EARLIEST };
