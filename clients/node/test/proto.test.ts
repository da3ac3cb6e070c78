// The package carries a copy of the repository's board.proto (it loads it
// at run time, and a published package has no repository around it): the
// copy must be the same file. `npm run sync-proto` refreshes it.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { BOARD_PROTO, PROTO_DIR } from "../src/proto.js";
import { REPO_DIR } from "./server.js";

it("proto/msgboard/v1/board.proto is the repository's (run npm run sync-proto)", (t) => {
  const repo = join(REPO_DIR, "proto", BOARD_PROTO);
  if (!existsSync(repo)) return t.skip("not inside the msgboard repository");
  assert.ok(
    readFileSync(join(PROTO_DIR, BOARD_PROTO), "utf8") === readFileSync(repo, "utf8"),
    "clients/node/proto/msgboard/v1/board.proto differs from proto/msgboard/v1/board.proto: npm run sync-proto",
  );
});
