// Inside the repository the client reads the repository's board.proto
// itself, so a proto change reaches it with no copy to keep in step.

import assert from "node:assert/strict";
import { join } from "node:path";
import { it } from "node:test";
import { PROTO_DIR } from "../src/proto.js";
import { REPO_DIR } from "./server.js";

it("loads the repository's proto/msgboard/v1/board.proto", () => {
  assert.equal(PROTO_DIR, join(REPO_DIR, "proto") + "/");
});
