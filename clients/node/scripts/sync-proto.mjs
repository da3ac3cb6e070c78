// Copies the repository's proto/msgboard/v1/board.proto into this package
// (proto/msgboard/v1/board.proto), so the package carries its contract when
// published; test/proto.test.ts fails while the copy differs.
// Usage: npm run sync-proto
import { copyFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const from = fileURLToPath(new URL("../../../proto/msgboard/v1/board.proto", import.meta.url));
const to = fileURLToPath(new URL("../proto/msgboard/v1/board.proto", import.meta.url));
copyFileSync(from, to);
console.log(`copied ${from} -> ${to}`);
