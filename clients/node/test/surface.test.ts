// Template strings in the CLI's notation, the words of errors, and the
// package installed from `npm pack` outside the repository.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { actual, connect, Int, InvalidArgument, tpl, type Client } from "../src/index.js";
import { PACKAGE_DIR, Server } from "./server.js";

let server: Server;
let board: Client;
let n = 0;
const fresh = (): string => `surface-${process.pid}-${++n}`;

before(async () => {
  server = new Server();
  board = await connect(await server.start());
});

after(async () => {
  board?.close();
  await server?.stop();
});

describe("templates", () => {
  it("refuse a string written as the CLI writes a formal, naming the formal to use", async () => {
    const q = fresh();
    await board.createQueue(q);
    await board.post(q, ["?int", 1]);
    for (const [text, formal] of [["?int", "Int"], ["?", "Any"], ["?str", "Str"]] as const) {
      await assert.rejects(board.take(q, tpl(text, Int)), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument);
        assert.equal(e.field, "pattern.templates[0].fields[0]");
        assert.ok(e.message.includes(`write ${formal}`) && e.message.includes(`actual("${text}")`), e.message);
        return true;
      });
    }
    // actual() matches the string itself.
    const [m] = await board.take(q, tpl(actual("?int"), Int));
    assert.deepEqual(m?.tuple, ["?int", 1n]);
  });
});

describe("error texts", () => {
  it("say what a tuple field may be and what was given", async () => {
    const q = fresh();
    await board.createQueue(q);
    for (const [bad, given] of [[{}, "an object"], [[1], "an array"], [undefined, "undefined"], [new Date(0), "a Date"]] as const) {
      await assert.rejects(board.post(q, ["x", bad as never]), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument);
        assert.ok(e.message.includes("tuple[1]: expected a tuple field ("), e.message);
        assert.ok(e.message.endsWith(`got ${given}`), e.message);
        assert.ok(!e.message.includes("a Object"), e.message);
        return true;
      });
    }
  });
});

describe("the packed package", () => {
  it("installs offline in a directory outside the repository and runs against a real board", async () => {
    const work = mkdtempSync(join(tmpdir(), "msgboard-node-app-"));
    try {
      // What prepack does, without its rebuild (dist/ is in use by these tests).
      execFileSync("node", ["scripts/sync-proto.mjs"], { cwd: PACKAGE_DIR, stdio: "pipe" });
      execFileSync("npm", ["pack", "--ignore-scripts", "--pack-destination", work], { cwd: PACKAGE_DIR, stdio: "pipe" });
      const [tgz] = readdirSync(work).filter((f) => f.endsWith(".tgz"));
      assert.ok(tgz, "npm pack wrote no .tgz");
      const app = join(work, "app");
      execFileSync("mkdir", [app]);
      writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
      execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", join(work, tgz)], { cwd: app, stdio: "pipe" });
      const q = fresh();
      writeFileSync(
        join(app, "main.mjs"),
        `import { connect, Int, tpl } from "msgboard";
const board = await connect(process.argv[2]);
await board.createQueue(process.argv[3]);
await board.post(process.argv[3], ["hello", 42]);
const [m] = await board.take(process.argv[3], tpl("hello", Int), { timeout: 5000 });
console.log(JSON.stringify(m.tuple, (k, v) => (typeof v === "bigint" ? String(v) : v)));
board.close();
`,
      );
      const out = execFileSync("node", ["main.mjs", server.address, q], { cwd: app, encoding: "utf8" });
      assert.equal(out, '["hello","42"]\n');
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});
