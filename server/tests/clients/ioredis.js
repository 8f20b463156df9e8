// ioredis (the npm version pinned in package.json) as a Node application uses it: database 2
// chosen at connect, a pipeline, multi() transactions (one discarded by a WATCH conflict) and
// scanStream. Usage: node ioredis.js HOST PORT; prints OK at the end.
"use strict";

const assert = require("node:assert/strict");
const Redis = require("ioredis");

const [host, port] = [process.argv[2], Number(process.argv[3])];
// A bounded run: a server that stops answering fails the test, not hangs it.
setTimeout(() => {
  console.log("FAIL: not done within 60 s");
  process.exit(2);
}, 60_000).unref();

function connect(db) {
  return new Redis({
    host,
    port,
    db,
    connectTimeout: 10_000,
    commandTimeout: 10_000,
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
  });
}

async function main() {
  assert.equal(require("ioredis/package.json").version, "6.1.0");
  const db2 = connect(2);
  const db0 = connect(0);
  const other = connect(2);
  assert.equal(await db2.flushall(), "OK");

  // Database 2: its keys are not database 0's.
  assert.equal(await db2.set("greeting", "hello from db2"), "OK");
  assert.equal(await db2.get("greeting"), "hello from db2");
  assert.equal(await db0.get("greeting"), null);
  assert.equal(await db0.set("greeting", "db0"), "OK");
  assert.equal(await db2.get("greeting"), "hello from db2");

  // A pipeline: one write, replies as [error, result] in order.
  const pipeline = db2.pipeline();
  for (let i = 0; i < 200; i++) {
    pipeline.set(`p:${i}`, String(i)).incr("p:n").get(`p:${i}`);
  }
  pipeline.incr("greeting");
  const replies = await pipeline.exec();
  assert.equal(replies.length, 601);
  for (let i = 0; i < 200; i++) {
    assert.deepEqual(replies.slice(3 * i, 3 * i + 3), [
      [null, "OK"],
      [null, i + 1],
      [null, String(i)],
    ]);
  }
  assert.match(String(replies[600][0]), /value is not an integer or out of range/);

  // multi(): MULTI ... EXEC, the results in order.
  const results = await db2.multi().set("tx", "1").incrby("tx", 41).get("tx").exec();
  assert.deepEqual(results, [
    [null, "OK"],
    [null, 42],
    [null, "42"],
  ]);
  // A command with the wrong arity is refused while queued: EXEC aborts, nothing runs.
  await assert.rejects(
    db2.multi().set("tx:never", "1").call("GET", "a", "b").exec(),
    /EXECABORT/,
  );
  assert.equal(await db2.exists("tx:never"), 0);
  // WATCH: another client's write between WATCH and EXEC makes EXEC answer null.
  await db2.watch("tx");
  const seen = Number(await db2.get("tx"));
  await other.set("tx", "100");
  assert.equal(await db2.multi().set("tx", String(seen + 1)).exec(), null);
  assert.equal(await db2.get("tx"), "100");
  // Unchanged since WATCH: EXEC runs.
  await db2.watch("tx");
  assert.deepEqual(await db2.multi().incr("tx").exec(), [[null, 101]]);

  // scanStream: every matching key of database 2 at least once (SCAN may repeat a key).
  const keys = {};
  for (let i = 0; i < 300; i++) keys[`scan:${i}`] = String(i);
  assert.equal(await db2.mset(keys), "OK");
  const found = [];
  await new Promise((resolve, reject) => {
    db2
      .scanStream({ match: "scan:*", count: 25 })
      .on("data", (batch) => found.push(...batch))
      .on("end", resolve)
      .on("error", reject);
  });
  assert.deepEqual(new Set(found), new Set(Object.keys(keys)));
  if (found.length !== 300) {
    console.log(`note: scanStream returned ${found.length} keys for 300`);
  }
  const inDb0 = [];
  for await (const batch of db0.scanStream({ match: "scan:*" })) inDb0.push(...batch);
  assert.deepEqual(inDb0, []);

  for (const client of [db2, db0, other]) await client.quit();
  console.log("OK");
}

main().catch((error) => {
  console.log(`FAIL: ${error.stack || error}`);
  process.exit(1);
});
