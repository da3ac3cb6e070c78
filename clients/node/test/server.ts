/**
 * A real `msgboard serve` for the tests, on a free loopback port, over a
 * fresh data directory. The command is $MSGBOARD_BIN (default: the repo's
 * .venv/bin/msgboard, ../../.venv/bin/msgboard from this package).
 */

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** This package's directory. */
export const PACKAGE_DIR = fileURLToPath(new URL("../../", import.meta.url));
/** The repository's root (conformance/, proto/). */
export const REPO_DIR = join(PACKAGE_DIR, "..", "..");

export const MSGBOARD_BIN = process.env.MSGBOARD_BIN || join(REPO_DIR, ".venv", "bin", "msgboard");

export class Server {
  address = "";
  readonly dir: string;
  private proc: ChildProcess | undefined;
  private log = "";

  constructor(
    private readonly args: string[] = [],
    dir?: string,
  ) {
    this.dir = dir ?? mkdtempSync(join(tmpdir(), "msgboard-node-"));
  }

  /** Starts the server; resolves with its address once it serves. */
  start(): Promise<string> {
    const proc = spawn(MSGBOARD_BIN, ["serve", "--data", join(this.dir, "data"), "--listen", "127.0.0.1:0", ...this.args], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    this.proc = proc;
    return new Promise((resolve, reject) => {
      proc.on("error", (e) => reject(new Error(`cannot run ${MSGBOARD_BIN} (set MSGBOARD_BIN): ${e.message}`)));
      proc.on("exit", (code) => reject(new Error(`msgboard serve exited (${code}): ${this.log}`)));
      proc.stderr!.on("data", (chunk: Buffer) => {
        this.log += chunk.toString();
        const m = /serving on (\S+:\d+)/.exec(this.log);
        if (m && !this.address) {
          this.address = m[1]!;
          resolve(this.address);
        }
      });
    });
  }

  /** Ends the server with `signal` and waits, leaving its directory (to start another on it). */
  async halt(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const proc = this.proc;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const gone = new Promise((resolve) => proc.once("exit", resolve));
      proc.kill(signal);
      await gone;
    }
  }

  /** Stops the server (SIGTERM, then waits) and removes its directory. */
  async stop(): Promise<void> {
    const proc = this.proc;
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const gone = new Promise((resolve) => proc.once("exit", resolve));
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 20_000);
      await gone;
      clearTimeout(timer);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A loopback address free now (for a board restarted on it). */
export async function freeAddress(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return `127.0.0.1:${port}`;
}
