// Copies the repository's proto/msgboard/v1/board.proto into this package
// (proto/msgboard/v1/board.proto, not in git), so a packed package carries
// its contract; inside the repository the client reads the repository's
// file itself (src/proto.ts). Run by `npm pack` / `npm publish` (prepack).
import { copyFileSync, mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";

const from = fileURLToPath(new URL("../../../proto/msgboard/v1/board.proto", import.meta.url));
const to = fileURLToPath(new URL("../proto/msgboard/v1/board.proto", import.meta.url));
mkdirSync(fileURLToPath(new URL("../proto/msgboard/v1/", import.meta.url)), { recursive: true });
copyFileSync(from, to);
console.log(`copied ${from} -> ${to}`);
