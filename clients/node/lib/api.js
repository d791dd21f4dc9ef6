"use strict";
// The gRPC API, loaded at run time from proto/ by @grpc/proto-loader (no generated code).
// int64 fields arrive as decimal strings (longs: String) and enums as their names.

const fs = require("fs");
const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

/** proto/ of the repository; HEADWATER_PROTO_ROOT names another copy (an installed package). */
const PROTO_ROOT = process.env.HEADWATER_PROTO_ROOT || path.resolve(__dirname, "..", "..", "..", "proto");

let loaded = null;

/** The headwater.v1 package ({Broker, Controller, GroupStreamService, ...}) and the ErrorCode names by number. */
function api() {
  if (loaded) return loaded;
  const dir = path.join(PROTO_ROOT, "headwater", "v1");
  const files = fs.readdirSync(dir).filter((f) => f.endsWith(".proto")).map((f) => `headwater/v1/${f}`);
  const definition = protoLoader.loadSync(files, {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const codes = new Map();
  for (const v of definition["headwater.v1.ErrorCode"].type.value) codes.set(v.number, v.name);
  loaded = { v1: grpc.loadPackageDefinition(definition).headwater.v1, errorNames: codes };
  return loaded;
}

module.exports = { api, PROTO_ROOT };
