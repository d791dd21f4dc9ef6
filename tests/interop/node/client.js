#!/usr/bin/env node
// A Headwater client in a second language, built with stock gRPC tooling only:
// @grpc/proto-loader reads proto/headwater/v1/*.proto at run time (no generated code, no
// knowledge of the batch format) and @grpc/grpc-js makes the calls.
//
//   node client.js --bootstrap HOST:PORT --topic T [--partition 0] [--count N]
//                  [--produce-count P] [--timeout-ms MS]
//
// 1. Metadata on the bootstrap broker -> the leader of the partition.
// 2. ProduceRecords with N records (key "node-key-i" except the last, which has a null key;
//    value "node-value-i"; header source=node and a header with a null value), acks=all,
//    retrying while the partition reports a retriable error (e.g. leader not yet known).
//    With --produce-count P (default N) it produces P records instead; P = 0 skips producing.
// 3. FetchRecords from offset 0 until N records have arrived, then cancel the stream.
// Prints one JSON object on stdout: {"leader", "produce", "records": [...]}; keys, values and
// header values are UTF-8 strings or null. Exits non-zero (message on stderr) on failure.
"use strict";

const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const PROTO_ROOT = path.resolve(__dirname, "..", "..", "..", "proto");
const RETRIABLE = new Set([
  "LEADER_NOT_AVAILABLE",
  "NOT_LEADER_OR_FOLLOWER",
  "UNKNOWN_TOPIC_OR_PARTITION",
  "REQUEST_TIMED_OUT",
  "NOT_ENOUGH_REPLICAS",
]);

function parseArgs(argv) {
  const args = { partition: 0, count: 10, timeoutMs: 30000 };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`missing value for ${flag}`);
    if (flag === "--bootstrap") args.bootstrap = value;
    else if (flag === "--topic") args.topic = value;
    else if (flag === "--partition") args.partition = Number(value);
    else if (flag === "--count") args.count = Number(value);
    else if (flag === "--produce-count") args.produceCount = Number(value);
    else if (flag === "--timeout-ms") args.timeoutMs = Number(value);
    else throw new Error(`unknown flag ${flag}`);
  }
  if (!args.bootstrap || !args.topic) throw new Error("--bootstrap and --topic are required");
  if (args.produceCount === undefined) args.produceCount = args.count;
  return args;
}

function loadApi() {
  const definition = protoLoader.loadSync(
    ["headwater/v1/broker.proto", "headwater/v1/controller.proto"],
    { includeDirs: [PROTO_ROOT], keepCase: true, longs: String, enums: String, defaults: true },
  );
  return grpc.loadPackageDefinition(definition).headwater.v1;
}

function unary(client, method, request, deadlineMs) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + deadlineMs }, (err, response) =>
      err ? reject(err) : resolve(response),
    );
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function findLeader(api, args, deadline) {
  const bootstrap = new api.Broker(args.bootstrap, grpc.credentials.createInsecure());
  try {
    for (;;) {
      const md = await unary(bootstrap, "Metadata", { topics: [args.topic] }, 5000);
      const topic = md.topics.find((t) => t.name === args.topic);
      const state = topic && topic.partitions.find((p) => p.partition === args.partition);
      const broker = state && md.brokers.find((b) => b.broker_id === state.leader);
      if (broker) return { broker_id: broker.broker_id, address: `${broker.host}:${broker.port}` };
      if (Date.now() > deadline) throw new Error(`no leader for ${args.topic}/${args.partition}`);
      await sleep(100);
    }
  } finally {
    bootstrap.close();
  }
}

function makeRecords(count) {
  const records = [];
  for (let i = 0; i < count; i++) {
    const record = {
      value: Buffer.from(`node-value-${i}`),
      headers: [{ key: "source", value: Buffer.from("node") }, { key: "empty" }],
    };
    if (i < count - 1) record.key = Buffer.from(`node-key-${i}`);
    records.push(record);
  }
  return records;
}

async function produce(broker, args, deadline) {
  const request = {
    topic: args.topic,
    partition: args.partition,
    acks: "ACKS_ALL",
    timeout_ms: 10000,
    records: makeRecords(args.produceCount),
    client_id: "headwater-interop-node",
  };
  for (;;) {
    const response = await unary(broker, "ProduceRecords", request, 15000);
    const result = response.partitions[0];
    if (result.error_code === "NONE") return result;
    if (!RETRIABLE.has(result.error_code) || Date.now() > deadline) {
      throw new Error(`produce failed: ${result.error_code} ${result.error_message}`);
    }
    await sleep(100);
  }
}

function fetchAll(broker, args, deadline) {
  return new Promise((resolve, reject) => {
    const records = [];
    let done = false;
    const call = broker.FetchRecords(
      {
        topic: args.topic,
        partition: args.partition,
        offset: "0",
        max_wait_ms: 200,
        min_bytes: 1,
        max_bytes: 1 << 20,
        replica_id: -1,
        current_leader_epoch: -1,
        client_id: "headwater-interop-node",
      },
      { deadline },
    );
    const finish = (err) => {
      if (done) return;
      done = true;
      call.cancel();
      if (err) reject(err);
      else resolve(records);
    };
    call.on("data", (response) => {
      if (response.error_code !== "NONE") {
        finish(new Error(`fetch failed: ${response.error_code} ${response.error_message}`));
        return;
      }
      for (const r of response.records) records.push(r);
      if (records.length >= args.count) finish(null);
    });
    call.on("error", (err) => finish(err));
    call.on("end", () => finish(new Error(`stream ended after ${records.length} records`)));
  });
}

const text = (b) => (b === null || b === undefined ? null : Buffer.from(b).toString("utf8"));

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const deadline = Date.now() + args.timeoutMs;
  const api = loadApi();
  const leader = await findLeader(api, args, deadline);
  const broker = new api.Broker(leader.address, grpc.credentials.createInsecure());
  try {
    const result = args.produceCount > 0 ? await produce(broker, args, deadline) : null;
    const fetched = await fetchAll(broker, args, deadline);
    const out = {
      leader,
      produce: result && {
        base_offset: Number(result.base_offset),
        error_code: result.error_code,
      },
      records: fetched.map((r) => ({
        offset: Number(r.offset),
        timestamp: Number(r.timestamp),
        key: r.key === undefined ? null : text(r.key),
        value: r.value === undefined ? null : text(r.value),
        headers: r.headers.map((h) => [h.key, h.value === undefined ? null : text(h.value)]),
      })),
    };
    process.stdout.write(JSON.stringify(out) + "\n");
  } finally {
    broker.close();
  }
}

main().catch((err) => {
  process.stderr.write(`headwater-interop-node: ${err.stack || err}\n`);
  process.exit(1);
});
