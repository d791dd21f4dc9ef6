// Produce ten keyed greetings, then read them as a member of the consumer group "greeters",
// committing as it goes (copies run at once share the partitions):  node main.js 127.0.0.1:9092
// (`npm ci` in clients/node first; in your project: require("@headwater/client")).
"use strict";

const headwater = require("../../clients/node");

async function main() {
  const client = await headwater.connect(process.argv[2] || "127.0.0.1:9092", { clientId: "example-node" });
  try {
    await client.createTopics({ name: "greetings", partitions: 3 }).catch((err) => {
      if (!err.errors || err.errors.some((e) => e.code !== "TOPIC_ALREADY_EXISTS")) throw err;
    });

    const producer = client.producer();
    for (let i = 0; i < 10; i++) {
      await producer.send("greetings", { key: `user-${i}`, value: `hello ${i}` });
    }

    const group = client.consumeGroup("greeters", ["greetings"], { earliest: true });
    try {
      for (let seen = 0; seen < 10; ) {
        const messages = await group.poll(1000);
        for (const m of messages) {
          console.log(`${m.topic}-${m.partition}@${m.offset} ${m.key}: ${m.value}`);
        }
        seen += messages.length;
        await group.commit();
      }
    } finally {
      await group.close();
    }
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
