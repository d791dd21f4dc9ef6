"use strict";
// The shared partitioner against clients/partitioner-vectors.json (the vectors the Python and
// Go tests read too). Needs no cluster.

const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("fs");
const path = require("path");
const { crc32c, partition } = require("..");

const vectors = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "partitioner-vectors.json"), "utf8"));

test("crc32c matches the shared vectors", () => {
  assert.ok(vectors.crc32c.length > 10);
  assert.equal(crc32c(Buffer.from("123456789")), 0xe3069283);
  for (const v of vectors.crc32c) assert.equal(crc32c(Buffer.from(v.key_hex, "hex")), v.crc32c, v.key_hex);
});

test("partition matches the shared vectors", () => {
  assert.ok(vectors.partition.length > 10);
  for (const v of vectors.partition) {
    assert.equal(partition(Buffer.from(v.key_hex, "hex"), v.partitions), v.partition, `${v.key_hex} mod ${v.partitions}`);
  }
  assert.equal(partition("user-1", 7), crc32c(Buffer.from("user-1")) % 7); // strings are UTF-8 bytes
});
