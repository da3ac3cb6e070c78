// The README's quickstart runs as written: its first ```js block, saved in
// this package's directory (so `import ... from "msgboard"` resolves to this
// package) and run with node against a real board, its address put in
// place of 127.0.0.1:7878. The board is one where a reader ran the main
// README's `msgboard queue create jobs ...` first (its line, run as
// written): the quickstart's queue must have the same properties, or it is
// ALREADY_EXISTS.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { after, before, it } from "node:test";
import { MSGBOARD_BIN, PACKAGE_DIR, REPO_DIR, Server } from "./server.js";

let server: Server;
let address: string;
const script = join(PACKAGE_DIR, `.readme-quickstart-${process.pid}.mjs`);

before(async () => {
  server = new Server();
  address = await server.start();
});

after(async () => {
  rmSync(script, { force: true });
  await server?.stop();
});

it("the README's quickstart runs and prints what its comments say", async () => {
  const readme = readFileSync(join(PACKAGE_DIR, "README.md"), "utf8");
  const block = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(block, "README.md has no ```js block");
  const main = readFileSync(join(REPO_DIR, "README.md"), "utf8");
  const create = /^msgboard (queue create jobs\b.*)$/m.exec(main)?.[1];
  assert.ok(create, "the main README makes no queue jobs");
  await promisify(execFile)(MSGBOARD_BIN, [...create.trim().split(/\s+/), "--server", address], { timeout: 60_000 });
  writeFileSync(script, block.replaceAll("127.0.0.1:7878", address));
  const { stdout } = await promisify(execFile)(process.execPath, [script], { cwd: PACKAGE_DIR, timeout: 60_000 });
  // Each `console.log(...); // output` comment is the line it prints.
  const promised = [...block.matchAll(/console\.log\(.*\); \/\/ (.*)$/gm)].map((m) => m[1]);
  assert.deepEqual(stdout.trimEnd().split("\n"), promised);
});
