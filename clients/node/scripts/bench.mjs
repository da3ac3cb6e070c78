// A quick throughput figure for the Node client against a fresh local board
// (default fsync sync mode): PostStream batches, unary posts one at a time,
// and a subscription acking every delivery. Usage: npm run build && node scripts/bench.mjs
import { connect, int } from "../dist/src/index.js";
import { Server } from "../dist/test/server.js";
const s = new Server(); const addr = await s.start();
const b = await connect(addr);
await b.createQueue("bench");
const N = 50000;
let t = performance.now();
const seqs = await b.postMany("bench", (function* () { for (let i = 0; i < N; i++) yield ["job", int(i), "x".repeat(20)]; })(), { batch: 500 });
const dt = (performance.now() - t) / 1000;
console.log(`postMany: ${seqs.length} messages in ${dt.toFixed(2)} s = ${Math.round(N / dt)} msg/s`);
t = performance.now();
for (let i = 0; i < 500; i++) await b.post("bench", ["one", i]);
console.log(`post (unary, sequential): 500 in ${((performance.now() - t) / 1000).toFixed(2)} s = ${Math.round(500000 / (performance.now() - t))} msg/s`);
t = performance.now();
const sub = b.subscribe("bench", { credit: 1000 });
let n = 0;
for await (const d of sub) { d.ack(); if (++n === 20000) break; }
const dt2 = (performance.now() - t) / 1000;
await sub.close();
console.log(`subscribe+ack: ${n} deliveries in ${dt2.toFixed(2)} s = ${Math.round(n / dt2)} msg/s (acked ${sub.acked.size})`);
b.close(); await s.stop();
