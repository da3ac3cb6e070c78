// A board with mutual TLS and a users file: alice is known by her token,
// carol by her client certificate; the client's TLS and token options
// reach the board, and refusals are typed errors.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  Client,
  connect,
  InvalidArgument,
  isLoopback,
  PermissionDenied,
  Unauthenticated,
  Unavailable,
} from "../src/index.js";
import { Server } from "./server.js";

let server: Server;
let address: string;
let dir: string;
const TOKEN = "alice-secret-token-0123456789";

function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
}

/** A key and a certificate for `cn` signed by the test CA (`ext`: extensions file). */
function issue(name: string, cn: string, ext?: string): void {
  openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", `/CN=${cn}`,
    "-keyout", `${name}.key`, "-out", `${name}.csr`);
  openssl("x509", "-req", "-in", `${name}.csr`, "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
    "-days", "2", ...(ext ? ["-extfile", ext] : []), "-out", `${name}.crt`);
}

const file = (name: string): string => join(dir, name);

before(async () => {
  const users = `
[[user]]
name = "alice"
token_sha256 = "${createHash("sha256").update(TOKEN).digest("hex")}"
[[user.allow]]
queues = "jobs*"
verbs = ["read", "write", "manage"]

[[user]]
name = "carol"
cert_cn = "carol"
[[user.allow]]
queues = "jobs*"
verbs = ["read"]
`;
  dir = mkdtempSync(join(tmpdir(), "msgboard-pki-"));
  openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
    "-subj", "/CN=test-ca", "-keyout", "ca.key", "-out", "ca.crt");
  writeFileSync(file("server.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
  issue("server", "localhost", "server.ext");
  issue("carol", "carol");
  issue("alice", "alice-laptop");
  writeFileSync(file("users.toml"), users);
  server = new Server([
    "--tls-cert", file("server.crt"), "--tls-key", file("server.key"),
    "--tls-client-ca", file("ca.crt"), "--users", file("users.toml"),
  ]);
  address = await server.start();
});

after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const alice = (token = TOKEN): Promise<Client> =>
  connect(address, { token, tls: { ca: file("ca.crt"), cert: file("alice.crt"), key: file("alice.key") } });

describe("TLS and tokens", () => {
  it("a token over mutual TLS lets alice do what her rules allow, and nothing else", async () => {
    const c = await alice();
    try {
      await c.createQueue("jobs-tls");
      assert.equal(await c.post("jobs-tls", ["job", 1]), 1);
      assert.deepEqual((await c.take("jobs-tls"))[0]!.tuple, ["job", 1n]);
      const err = await c.createQueue("billing").catch((e: unknown) => e);
      assert.ok(err instanceof PermissionDenied, String(err));
      assert.equal(err.code, "PERMISSION_DENIED");
      assert.match(err.message, /alice/);
      assert.deepEqual(err.metadata, { user: "alice", verb: "manage", queue: "billing" });
    } finally {
      c.close();
    }
  });

  it("an unknown token is UNAUTHENTICATED", async () => {
    const c = await alice("not-a-token");
    try {
      await assert.rejects(c.listQueues(), Unauthenticated);
    } finally {
      c.close();
    }
  });

  it("carol is known by her client certificate (PEM text works as well as a path)", async () => {
    const pem = (n: string) => readFileSync(file(n), "utf8");
    const c = await connect(address, { token: "", tls: { ca: pem("ca.crt"), cert: pem("carol.crt"), key: pem("carol.key") } });
    try {
      await assert.rejects(c.createQueue("jobs-carol"), PermissionDenied); // read only
      await assert.rejects(c.post("jobs-tls", ["x"]), PermissionDenied);
      assert.deepEqual(await c.read("jobs-tls"), []);
    } finally {
      c.close();
    }
  });

  it("a client that does not trust the board's CA does not connect", async () => {
    const c = new Client(address, { token: TOKEN, tls: true });
    try {
      await assert.rejects(c.listQueues(), Unavailable);
    } finally {
      c.close();
    }
  });

  it("refuses to send a token in plaintext to anything but loopback", () => {
    assert.throws(() => new Client("board.example.com:7878", { token: TOKEN, tls: false }), InvalidArgument);
    assert.ok(isLoopback("127.0.0.1:1") && isLoopback("localhost:1") && isLoopback("[::1]:1"));
    assert.ok(!isLoopback("10.0.0.1:1"));
    new Client("127.0.0.1:1", { token: TOKEN, tls: false }).close();
  });
});
