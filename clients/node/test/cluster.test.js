"use strict";
// The Node client against a real cluster: HEADWATER_BOOTSTRAP=host:port of a broker.
// tests/interop/test_node_client.py starts one and runs `node --test` with it (`make test`);
// it also sets HEADWATER_PYTHON_TOPIC (a topic the Python client produced) and afterwards
// reads with Python what these tests produced to RECORDS_TOPIC.

const test = require("node:test");
const assert = require("node:assert/strict");
const { once } = require("node:events");
const { connect, partition, HeadwaterError, OFFSET_EARLIEST, OFFSET_LATEST } = require("..");

const RECORDS_TOPIC = "node-client-records"; // 12 keys x 5 rounds on 3 partitions
const BOOTSTRAP = process.env.HEADWATER_BOOTSTRAP;
const unique = (prefix) => `${prefix}-${Date.now()}-${Math.floor(Math.random() * 1e6)}`;

async function client() {
  assert.ok(BOOTSTRAP, "HEADWATER_BOOTSTRAP is not set: run through tests/interop/test_node_client.py");
  return connect(BOOTSTRAP, { clientId: "node-test" });
}

/** Create a topic and wait (bounded) until every partition has a leader. */
async function createTopic(c, name, partitions) {
  const ids = await c.createTopics({ name, partitions });
  assert.ok(ids[name], `no topic id for ${name}`);
  const deadline = Date.now() + 30000;
  for (;;) {
    // a new topic reaches every broker's metadata shortly after: UNKNOWN_TOPIC_OR_PARTITION until then
    const [d] = await c.describeTopics(name).catch((err) => (err.code === "UNKNOWN_TOPIC_OR_PARTITION" ? [null] : Promise.reject(err)));
    if (d && d.partitions.length === partitions && d.partitions.every((p) => p.leader >= 0)) return d;
    assert.ok(Date.now() < deadline, `${name}: partitions without a leader: ${JSON.stringify(d)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Read topic/partition from the start until want messages (bounded by the fetch retries). */
async function consumeAll(c, topic, p, want) {
  const pc = await c.consumePartition(topic, p, OFFSET_EARLIEST, { maxWaitMs: 200 });
  const got = [];
  const deadline = Date.now() + 30000;
  try {
    while (got.length < want) {
      assert.ok(Date.now() < deadline, `${topic}-${p}: ${got.length} of ${want} messages`);
      got.push(...(await pc.poll()));
    }
  } finally {
    pc.close();
  }
  return got;
}

test("admin creates, lists and describes topics, with typed errors", async () => {
  const c = await client();
  try {
    const name = unique("node-admin");
    const d = await createTopic(c, name, 3);
    assert.ok(d.topicId);
    assert.deepEqual(d.partitions.map((p) => p.partition), [0, 1, 2]);
    assert.ok(d.partitions.every((p) => p.replicas.length > 0 && p.isr.length > 0));
    assert.ok((await c.listTopics()).includes(name));
    await assert.rejects(c.createTopics({ name }), (err) => err.errors[0].code === "TOPIC_ALREADY_EXISTS");
    await assert.rejects(c.describeTopics(`${name}-missing`), (err) => err instanceof HeadwaterError && err.code === "UNKNOWN_TOPIC_OR_PARTITION");
    await assert.rejects(c.producer().send("node-no-such-topic", { value: "x" }), (err) => err.code === "UNKNOWN_TOPIC_OR_PARTITION");
  } finally {
    c.close();
  }
});

test("keyed records go where the shared partitioner says and are consumed by partition", async () => {
  const c = await client();
  try {
    await createTopic(c, RECORDS_TOPIC, 3);
    const p = c.producer({ compression: "zstd" });
    const sent = [];
    for (let round = 0; round < 5; round++) {
      for (let k = 0; k < 12; k++) {
        sent.push({ key: `key-${k}`, value: `value-${k}-${round}`, headers: [{ key: "round", value: String(round) }, { key: "null", value: null }], timestamp: 1_700_000_000_000 });
      }
    }
    // two sends: the second continues each partition's sequence
    const meta = [...(await p.send(RECORDS_TOPIC, ...sent.slice(0, 30))), ...(await p.send(RECORDS_TOPIC, ...sent.slice(30)))];
    const perPartition = [[], [], []];
    meta.forEach((m, i) => {
      assert.equal(m.partition, partition(sent[i].key, 3), `record ${i}`);
      perPartition[m.partition].push([m.offset, sent[i]]);
    });
    for (let part = 0; part < 3; part++) {
      const got = await consumeAll(c, RECORDS_TOPIC, part, perPartition[part].length);
      assert.equal(got.length, perPartition[part].length);
      got.forEach((m, i) => {
        const [offset, want] = perPartition[part][i];
        assert.equal(m.offset, offset);
        assert.equal(m.offset, i);
        assert.equal(m.key.toString(), want.key);
        assert.equal(m.value.toString(), want.value);
        assert.equal(m.timestamp, 1_700_000_000_000);
        assert.deepEqual(m.headers.map((h) => [h.key, h.value && h.value.toString()]), [["round", want.headers[0].value], ["null", null]]);
      });
    }
  } finally {
    c.close();
  }
});

test("a retried produce is stored once; a sequence gap is refused", async () => {
  const c = await client();
  try {
    const name = unique("node-idem");
    await createTopic(c, name, 1);
    const p = c.producer();
    const first = await p.sendTo(name, 0, { value: "a" }, { value: "b" });
    const identity = await p.getIdentity();
    // the first send's request again, as a retry after a lost answer would send it
    const retry = p.request(name, 0, [{ value: "a" }, { value: "b" }], identity, 0);
    assert.equal(await p.produce(retry), first[0].offset);
    const [next] = await p.sendTo(name, 0, { value: "c" });
    assert.equal(next.offset, 2);
    const gap = p.request(name, 0, [{ value: "x" }], identity, 7);
    await assert.rejects(p.produce(gap), (err) => err.code === "OUT_OF_ORDER_SEQUENCE_NUMBER");
    const got = await consumeAll(c, name, 0, 3);
    assert.deepEqual(got.map((m) => m.value.toString()), ["a", "b", "c"]);
    assert.equal(await c.listOffset(name, 0, OFFSET_LATEST), 3);
  } finally {
    c.close();
  }
});

test("reads what the Python client produced (batch path, zstd)", async () => {
  const topic = process.env.HEADWATER_PYTHON_TOPIC;
  assert.ok(topic, "HEADWATER_PYTHON_TOPIC is not set: run through tests/interop/test_node_client.py");
  const c = await client();
  try {
    const got = await consumeAll(c, topic, 0, 8);
    const text = (b) => (b === null ? null : b.toString());
    assert.deepEqual(got.map((m) => m.offset), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert.deepEqual(got.map((m) => text(m.value)), ["py-0", "py-1", "py-2", "py-3", "py-4", "py-5", "py-6", null]);
    assert.deepEqual(got.map((m) => text(m.key)), [null, "k1", "", "k3", null, "k5", "k6", "tomb"]);
    assert.ok(got.every((m) => m.headers.length === 1 && m.headers[0].key === "lang" && m.headers[0].value.toString() === "python"));
  } finally {
    c.close();
  }
});

/** Poll members until `want` distinct records were seen; partition/offset -> member names. */
async function consumeGroup(members, want, timeoutMs = 60000) {
  const seen = new Map();
  const deadline = Date.now() + timeoutMs;
  while ([...seen.values()].reduce((n, offsets) => n + offsets.size, 0) < want) {
    assert.ok(Date.now() < deadline, `saw ${JSON.stringify([...seen.keys()])} before the deadline`);
    await Promise.all(
      Object.entries(members).map(async ([name, gc]) => {
        const msgs = await gc.poll(200);
        for (const m of msgs) {
          const k = `${m.topic}/${m.partition}`;
          if (!seen.has(k)) seen.set(k, new Map());
          seen.get(k).set(m.offset, [...(seen.get(k).get(m.offset) || []), name]);
        }
        await gc.commit();
      }),
    );
  }
  return seen;
}

/** Wait until a and b hold disjoint assignments of one generation covering n partitions. */
async function split(a, b, n) {
  const deadline = Date.now() + 60000;
  for (;;) {
    const [x, y] = [a.assignment, b.assignment];
    const union = new Set([...x.partitions, ...y.partitions].map((p) => `${p.topic}/${p.partition}`));
    if (x.generation > 0 && x.generation === y.generation && union.size === n && x.partitions.length + y.partitions.length === n) return [x, y];
    if (a.error || b.error) throw a.error || b.error;
    assert.ok(Date.now() < deadline, `no split: ${JSON.stringify([x, y])}`);
    // the next assignment of either member (bounded by the deadline)
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), deadline - Date.now());
    const next = [a, b].flatMap((m) => ["assignment", "end"].map((event) => once(m, event, { signal: stop.signal })));
    await Promise.race(next).catch(() => {});
    clearTimeout(timer);
    stop.abort();
  }
}

test("two group members split the partitions; the survivor resumes from commits", async () => {
  const c = await client();
  const topic = unique("node-group");
  const members = {};
  try {
    await createTopic(c, topic, 4);
    const options = { earliest: true, sessionTimeoutMs: 6000, maxOutstandingRecords: 50 };
    members.a = c.consumeGroup(`${topic}-g`, [topic], { ...options, memberId: "node-a" });
    members.b = c.consumeGroup(`${topic}-g`, [topic], { ...options, memberId: "node-b" });
    const [aa, ab] = await split(members.a, members.b, 4);
    assert.equal(aa.partitions.length, 2);
    assert.equal(members.a.memberId, "node-a");
    const owner = new Map([...aa.partitions.map((p) => [`${p.topic}/${p.partition}`, "a"]), ...ab.partitions.map((p) => [`${p.topic}/${p.partition}`, "b"])]);

    const p = c.producer();
    const batch = Array.from({ length: 200 }, (_, i) => ({ key: `k${i}`, value: `v${i}` }));
    const meta = await p.send(topic, ...batch);
    const ends = new Map();
    for (const m of meta) ends.set(`${m.topic}/${m.partition}`, Math.max(ends.get(`${m.topic}/${m.partition}`) || 0, m.offset + 1));

    const seen = await consumeGroup(members, 200);
    for (const [tp, offsets] of seen) {
      assert.equal(offsets.size, ends.get(tp), tp);
      for (const [offset, names] of offsets) assert.deepEqual(names, [owner.get(tp)], `${tp}@${offset}`);
    }

    // a commits one of its partitions 3 records back and leaves; b takes its partitions and
    // resumes each at a's commit
    const rewound = aa.partitions[0];
    const rk = `${rewound.topic}/${rewound.partition}`;
    await members.a.commitOffsets([{ ...rewound, offset: ends.get(rk) - 3 }]);
    await members.a.close();
    await assert.rejects(members.a.poll(10), /closed/);
    await members.b.waitAssignment((x) => x.partitions.length === 4);
    await p.send(topic, ...Array.from({ length: 40 }, (_, i) => ({ key: `k${i}`, value: `w${i}` })));
    const after = await consumeGroup({ b: members.b }, 43);
    for (const [tp, offsets] of after) {
      for (const offset of offsets.keys()) {
        const again = offset < ends.get(tp);
        assert.ok(!again || (tp === rk && offset >= ends.get(tp) - 3), `${tp}@${offset} delivered again though committed`);
      }
    }
    for (let o = ends.get(rk) - 3; o < ends.get(rk); o++) assert.deepEqual(after.get(rk).get(o), ["b"]);
  } finally {
    await Promise.all(Object.values(members).map((m) => m.close()));
    c.close();
  }
});

test("the group stream refuses a bad open with a typed error", async () => {
  const c = await client();
  const gc = c.consumeGroup("node-group-no-topics", []);
  try {
    await assert.rejects(gc.poll(30000), (err) => err instanceof HeadwaterError && err.code === "INVALID_REQUEST");
  } finally {
    await gc.close();
    c.close();
  }
});

test("a member that stops polling loses its partitions after the session timeout", async () => {
  const c = await client();
  const topic = unique("node-group-idle");
  const members = {};
  try {
    await createTopic(c, topic, 2);
    members.idle = c.consumeGroup(topic, [topic], { memberId: "idle", sessionTimeoutMs: 3000 });
    members.busy = c.consumeGroup(topic, [topic], { memberId: "busy", sessionTimeoutMs: 3000 });
    await members.idle.waitAssignment((x) => x.partitions.length > 0); // waiting counts as polling
    // idle never polls again: its keep-alives stop after a session timeout, then the server
    // drops it and busy gets both partitions
    await members.busy.waitAssignment((x) => x.partitions.length === 2);
    await assert.rejects(members.idle.poll(30000), (err) => err.code === "REQUEST_TIMED_OUT");
  } finally {
    await Promise.all(Object.values(members).map((m) => m.close()));
    c.close();
  }
});
