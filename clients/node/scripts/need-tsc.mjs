// Says what to run when the TypeScript compiler is missing, before the build
// (npm run build, npm test, npm pack) fails with a bare "tsc: not found":
// TypeScript is a devDependency, installed by `npm ci` in this directory
// (scripts/setup --dev at the repository's root runs it).
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const tsc = fileURLToPath(new URL("../node_modules/typescript/bin/tsc", import.meta.url));
if (!existsSync(tsc)) {
  console.error(
    "msgboard (clients/node): TypeScript is not installed here, and the build needs it: " +
      "run `npm ci` in this directory first (then `npm pack` or `npm test` again)",
  );
  process.exit(1);
}
