"use strict";
// Headwater's Node.js client: a small library on the gRPC API (proto/, loaded at run time by
// @grpc/proto-loader): Client.connect, Producer (keys placed by the shared partitioner,
// idempotent), PartitionConsumer, GroupConsumer (the group stream) and admin basics.

const { Client } = require("./lib/client");
const { Producer } = require("./lib/producer");
const { PartitionConsumer, listOffset, OFFSET_LATEST, OFFSET_EARLIEST } = require("./lib/consumer");
const { GroupConsumer } = require("./lib/group");
const { HeadwaterError, isRetriable } = require("./lib/errors");
const { crc32c, partition } = require("./lib/partitioner");

/** A Producer sending through this client (see lib/producer.js). */
Client.prototype.producer = function producer(options) {
  return new Producer(this, options);
};

/** A PartitionConsumer of topic/partition from offset (or OFFSET_EARLIEST / OFFSET_LATEST). */
Client.prototype.consumePartition = function consumePartition(topic, partition, offset, options) {
  return PartitionConsumer.open(this, topic, partition, offset, options);
};

/** A GroupConsumer: this process as a member of group, consuming topics (lib/group.js). */
Client.prototype.consumeGroup = function consumeGroup(group, topics, options) {
  return new GroupConsumer(this, group, topics, options);
};

/** The offset of topic/partition at ts (ms), or with OFFSET_LATEST / OFFSET_EARLIEST its end / start. */
Client.prototype.listOffset = function (topic, partition, ts) {
  return listOffset(this, topic, partition, ts);
};

module.exports = {
  Client,
  Producer,
  PartitionConsumer,
  GroupConsumer,
  HeadwaterError,
  isRetriable,
  crc32c,
  partition,
  OFFSET_LATEST,
  OFFSET_EARLIEST,
  connect: (bootstrap, options) => Client.connect(bootstrap, options),
};
