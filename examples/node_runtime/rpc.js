'use strict';
// Newline-delimited JSON-RPC 2.0 over stdin/stdout, both directions, strictly nested
// (docs/protocol.md, "Framing" and "Nesting").
//
// Everything here is synchronous: `call(method, params)` writes a request and then reads
// lines, serving every request that arrives meanwhile (re-entrant `update_rules`/`cancel`
// at a failpoint), until the response to *that* request comes. The runtime is therefore
// plain sequential code, and a SIGKILL at a failpoint finds it blocked in a read, having
// committed exactly what it committed before calling the port.

const fs = require('fs');

// A contract exception that crossed the wire (error -32000 with data.exception), or one
// this runtime raises so the harness re-raises it as itself (M3).
class WorldError extends Error {
  constructor(exception, message) {
    super(message);
    this.exception = exception;
  }
}

// A request answered with an error code other than -32000.
class RpcError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

class Endpoint {
  constructor(handlers, { inFd = 0, outFd = 1 } = {}) {
    this.handlers = handlers; // method -> function(params) returning the result
    this.inFd = inFd;
    this.outFd = outFd;
    this.chunks = [];
    this.pending = Buffer.alloc(0);
    this.nextId = 1;
    this.depth = 0; // > 0 while we wait for a port answer
  }

  readLine() {
    for (;;) {
      const nl = this.pending.indexOf(10);
      if (nl >= 0) {
        const line = this.pending.subarray(0, nl).toString('utf8');
        this.pending = this.pending.subarray(nl + 1);
        return line;
      }
      const chunk = Buffer.allocUnsafe(1 << 16);
      let n;
      try {
        n = fs.readSync(this.inFd, chunk, 0, chunk.length, null);
      } catch (e) {
        if (e.code === 'EAGAIN') { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); continue; }
        if (e.code === 'EOF') n = 0; else throw e;
      }
      if (n === 0) {
        if (this.depth > 0) process.exit(70); // the harness is gone while we wait: no cleanup
        return null;
      }
      this.pending = this.pending.length ? Buffer.concat([this.pending, chunk.subarray(0, n)]) : Buffer.from(chunk.subarray(0, n));
    }
  }

  write(obj) {
    const buf = Buffer.from(JSON.stringify(obj) + '\n', 'utf8');
    let off = 0;
    while (off < buf.length) {
      try {
        off += fs.writeSync(this.outFd, buf, off, buf.length - off);
      } catch (e) {
        if (e.code === 'EAGAIN') { Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1); continue; }
        if (e.code === 'EPIPE') process.exit(70);
        throw e;
      }
    }
  }

  // Serve one incoming request object and write its response.
  serve(msg) {
    const id = msg.id;
    const handler = Object.prototype.hasOwnProperty.call(this.handlers, msg.method) ? this.handlers[msg.method] : null;
    if (!handler) {
      this.write({ jsonrpc: '2.0', id, error: { code: -32601, message: `method not found: ${msg.method} (this side serves: ${Object.keys(this.handlers).join(', ')})` } });
      return;
    }
    let result;
    try {
      result = handler(msg.params || {});
    } catch (e) {
      if (e instanceof RpcError) {
        this.write({ jsonrpc: '2.0', id, error: { code: e.code, message: e.message } });
      } else if (e instanceof WorldError) {
        this.write({ jsonrpc: '2.0', id, error: { code: -32000, message: e.message, data: { exception: e.exception } } });
      } else {
        process.stderr.write(`[node_runtime] ${msg.method} raised: ${e && e.stack ? e.stack : e}\n`);
        this.write({ jsonrpc: '2.0', id, error: { code: -32000, message: String(e && e.message ? e.message : e), data: { exception: (e && e.name) || 'Error' } } });
      }
      return;
    }
    this.write({ jsonrpc: '2.0', id, result: result === undefined ? null : result });
  }

  decode(line) {
    try {
      return JSON.parse(line);
    } catch (e) {
      this.write({ jsonrpc: '2.0', id: null, error: { code: -32700, message: `parse error: ${e.message}` } });
      return undefined;
    }
  }

  // Send a port request and return its result; serve nested requests meanwhile.
  call(method, params) {
    const id = this.nextId++;
    this.write({ jsonrpc: '2.0', id, method, params });
    this.depth++;
    try {
      for (;;) {
        const line = this.readLine();
        if (line === null) process.exit(70);
        if (!line.trim()) continue;
        const msg = this.decode(line);
        if (msg === undefined) continue;
        if (msg.method !== undefined) { this.serve(msg); continue; }
        if (msg.id !== id) {
          process.stderr.write(`[node_runtime] unexpected response id ${msg.id} while waiting for ${id}\n`);
          continue;
        }
        if (msg.error) {
          const err = msg.error;
          if (err.code === -32000 && err.data && err.data.exception) throw new WorldError(err.data.exception, err.message);
          throw new RpcError(err.code, err.message);
        }
        return msg.result;
      }
    } finally {
      this.depth--;
    }
  }

  // The top-level loop: serve driver requests until stdin ends.
  run() {
    for (;;) {
      const line = this.readLine();
      if (line === null) return;
      if (!line.trim()) continue;
      const msg = this.decode(line);
      if (msg === undefined) continue;
      if (msg.method === undefined) {
        this.write({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'a response that answers no pending request' } });
        continue;
      }
      this.serve(msg);
    }
  }
}

module.exports = { Endpoint, WorldError, RpcError };
