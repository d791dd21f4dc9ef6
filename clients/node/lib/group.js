"use strict";
// GroupConsumer: consume topics as one member of a consumer group over
// GroupStreamService.Consume (proto/headwater/v1/group_stream.proto). The server joins the
// group for the member, computes and rebalances the assignment, fetches the assigned
// partitions and sends their records within the credit the client grants; the client grants
// credit back as poll() hands records to the application (flow control as in Pub/Sub's
// StreamingPull), commits on the same stream and leaves the group at once on close().
//
// Liveness: while the application calls poll() at least once per session timeout (or waits
// in poll / waitAssignment), a KeepAlive goes every third of it (at most 3 s apart); an
// application that stops polling stops being assigned after the session timeout.
// Delivery is at least once: a partition moved to another member resumes at its commit.

const { EventEmitter } = require("events");
const { codeError, statusError } = require("./errors");
const { toMessage } = require("./client");

const CLOSED = "headwater: group consumer closed";
const key = (topic, partition) => `${topic}\u0000${partition}`;

class GroupConsumer extends EventEmitter {
  /**
   * Join group as a member consuming topics. Emits "assignment" ({generation, partitions})
   * after every rebalance and "end" (the error) once when the stream ended.
   * @param {{memberId?: string, sessionTimeoutMs?: number, earliest?: boolean,
   *   readCommitted?: boolean, maxOutstandingRecords?: number, maxOutstandingBytes?: number,
   *   maxPollRecords?: number}} [options] memberId "": the server picks one; earliest: start
   *   partitions without a commit at their first record (default: their end); the credit
   *   window defaults to 1000 records / 8 MiB, a poll returns at most 500 records
   */
  constructor(client, group, topics, options = {}) {
    super();
    this.options = {
      maxOutstandingRecords: 1000,
      maxOutstandingBytes: 8 << 20,
      maxPollRecords: 500,
      sessionTimeoutMs: 0,
      ...options,
    };
    this.memberId = options.memberId || "";
    this.assignment = { generation: 0, partitions: [] };
    this.assigned = new Set();
    this.queue = [];
    this.positions = new Map(); // key -> {topic, partition, offset}
    this.commits = new Map(); // commit id -> {resolve, reject}
    this.nextCommit = 0;
    this.error = null;
    this.closed = false;
    this.waiters = new Set();
    this.polling = 0;
    this.lastPoll = Date.now();

    this.call = client.stub("GroupStreamService", client.randomBroker()).Consume();
    this.ended = new Promise((resolve) => this.call.on("status", resolve));
    this.call.on("data", (response) => this.receive(response));
    this.call.on("error", (err) => this.fail(this.closed ? new Error(CLOSED) : statusError(err)));
    this.call.on("end", () => this.fail(new Error(this.closed ? CLOSED : "headwater: the server ended the group stream")));
    this.call.write({
      open: {
        group_id: group,
        topics,
        member_id: this.memberId,
        client_id: client.options.clientId,
        session_timeout_ms: this.options.sessionTimeoutMs,
        offset_reset: this.options.earliest ? "OFFSET_RESET_EARLIEST" : "OFFSET_RESET_LATEST",
        format: "DELIVERY_FORMAT_RECORDS",
        isolation_level: this.options.readCommitted ? "READ_COMMITTED" : "READ_UNCOMMITTED",
        credit_records: this.options.maxOutstandingRecords,
        credit_bytes: String(this.options.maxOutstandingBytes),
      },
    });
    const session = this.options.sessionTimeoutMs || 45000; // the server's default
    this.keepAlive = setInterval(() => {
      if (this.polling > 0 || Date.now() - this.lastPoll < session) this.send({ keep_alive: {} });
    }, Math.min(session / 3, 3000));
    this.keepAlive.unref();
  }

  wakeAll() {
    for (const wake of this.waiters) wake();
    this.waiters.clear();
  }

  /** Wait for the next response, the stream's end or timeoutMs; true unless the time ran out. */
  wait(timeoutMs) {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters.delete(wake);
        resolve(false);
      }, timeoutMs);
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.waiters.add(wake);
    });
  }

  receive(response) {
    if (response.assignment) this.assign(response.assignment);
    else if (response.records) {
      const r = response.records;
      for (const rec of r.records) this.queue.push(toMessage(r.topic, r.partition, rec));
    } else if (response.commit_result) {
      const result = response.commit_result;
      const pending = this.commits.get(result.commit_id);
      this.commits.delete(result.commit_id);
      if (pending) pending.resolve(result);
    }
    this.wakeAll();
  }

  /** A new assignment: buffered records of revoked partitions are dropped (their credit granted back). */
  assign(a) {
    const partitions = a.partitions
      .map((p) => ({ topic: p.topic, partition: p.partition }))
      .sort((x, y) => (x.topic < y.topic ? -1 : x.topic > y.topic ? 1 : x.partition - y.partition));
    this.assigned = new Set(partitions.map((p) => key(p.topic, p.partition)));
    const dropped = this.queue.filter((m) => !this.assigned.has(key(m.topic, m.partition)));
    this.queue = this.queue.filter((m) => this.assigned.has(key(m.topic, m.partition)));
    for (const k of this.positions.keys()) if (!this.assigned.has(k)) this.positions.delete(k);
    if (a.member_id) this.memberId = a.member_id;
    this.assignment = { generation: a.generation_id, partitions };
    if (dropped.length > 0) this.grant(dropped);
    this.emit("assignment", this.assignment);
  }

  fail(err) {
    if (this.error) return;
    this.error = err;
    clearInterval(this.keepAlive);
    for (const pending of this.commits.values()) pending.reject(err);
    this.commits.clear();
    this.wakeAll();
    this.emit("end", err);
  }

  send(request) {
    if (!this.error && !this.closed) this.call.write(request);
  }

  grant(messages) {
    let bytes = 0;
    for (const m of messages) bytes += (m.key ? m.key.length : 0) + (m.value ? m.value.length : 0);
    this.send({ credit: { records: messages.length, bytes: String(bytes) } });
  }

  async busy(during) {
    this.polling++;
    try {
      return await during();
    } finally {
      this.polling--;
      this.lastPoll = Date.now();
    }
  }

  /**
   * Wait until the assignment satisfies ok(assignment) (a generation after a known one, a
   * partition count, ...); resolves it, rejects with the stream's error or after timeoutMs.
   */
  waitAssignment(ok, timeoutMs = 60000) {
    const deadline = Date.now() + timeoutMs;
    return this.busy(async () => {
      for (;;) {
        if (this.assignment.generation > 0 && ok(this.assignment)) return this.assignment;
        if (this.error) throw this.error;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`headwater: no such assignment within ${timeoutMs} ms (last ${JSON.stringify(this.assignment)})`);
        await this.wait(left);
      }
    });
  }

  /**
   * The next messages of the assigned partitions (at most maxPollRecords), waiting up to
   * timeoutMs for some ([] when none came). Their credit is granted back and their offsets
   * become the positions commit() commits. Rejects with the stream's error once it failed
   * (a HeadwaterError with the ErrorCode of its headwater-error-code trailer when it has one).
   */
  poll(timeoutMs = 1000) {
    const deadline = Date.now() + timeoutMs;
    return this.busy(async () => {
      for (;;) {
        if (this.closed) throw new Error(CLOSED);
        if (this.queue.length > 0) {
          const out = this.queue.splice(0, this.options.maxPollRecords);
          for (const m of out) this.positions.set(key(m.topic, m.partition), { topic: m.topic, partition: m.partition, offset: m.offset + 1 });
          this.grant(out);
          return out;
        }
        if (this.error) throw this.error;
        const left = deadline - Date.now();
        if (left <= 0) return [];
        await this.wait(left);
      }
    });
  }

  /** Commit, for every assigned partition, the offset after the last message poll() returned. */
  commit() {
    const offsets = [...this.positions.values()];
    return offsets.length === 0 ? Promise.resolve() : this.commitOffsets(offsets);
  }

  /**
   * Commit [{topic, partition, offset}] (offset: the next one to consume) on the stream and
   * wait for the answer. Partitions no longer assigned are refused (ILLEGAL_GENERATION,
   * UNKNOWN_MEMBER_ID): rejects with an AggregateError of HeadwaterErrors (topic and
   * partition set on each); the others are committed.
   */
  commitOffsets(offsets) {
    if (this.closed) return Promise.reject(new Error(CLOSED));
    if (this.error) return Promise.reject(this.error);
    const id = String(++this.nextCommit);
    const answered = new Promise((resolve, reject) => this.commits.set(id, { resolve, reject }));
    this.send({ commit: { commit_id: id, offsets: offsets.map((o) => ({ ...o, offset: String(o.offset) })) } });
    return answered.then((result) => {
      const whole = codeError(result.error_code, result.error_message);
      if (whole) throw whole;
      const errors = [];
      for (const p of result.partitions) {
        const err = codeError(p.error_code, p.error_message);
        if (err) errors.push(Object.assign(err, { topic: p.topic, partition: p.partition }));
      }
      if (errors.length > 0) {
        throw new AggregateError(errors, errors.map((e) => `${e.topic}-${e.partition}: ${e.message}`).join("; "));
      }
    });
  }

  /**
   * Close the stream: the member leaves the group at once and its partitions go to the other
   * members (from what was committed; call commit() first). Resolves when the server ended
   * the stream (at most timeoutMs, then the call is cancelled).
   */
  async close(timeoutMs = 10000) {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.keepAlive);
    this.call.end();
    let timer;
    const timedOut = new Promise((resolve) => (timer = setTimeout(() => resolve(true), timeoutMs)));
    const late = await Promise.race([this.ended.then(() => false), timedOut]);
    clearTimeout(timer);
    if (late) this.call.cancel();
    this.fail(new Error(CLOSED));
    this.wakeAll();
  }
}

module.exports = { GroupConsumer, CLOSED };
