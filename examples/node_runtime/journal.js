'use strict';
// The durable store: one append-only journal of JSON lines per data dir
// (`<data_dir>/journal.jsonl`). Each line is one commit: the new values of the records it
// touched (whole records, never deltas) plus the conversation messages it appended. A
// commit is one write(2) of one line, so a SIGKILL keeps it whole or not at all; a
// "durable" commit is followed by fsync (docs/lifecycle.md, "What must be on disk before
// what"), the others ride on the next fsync, and a power cut keeps a prefix of the lines.
//
// The state is the fold of the lines in order. A runtime instance folds the file once at
// `open` and then keeps its memory in step with what it appends (it is the only writer: a
// second live instance on the same data dir is refused, see lock.js). The inspector folds
// incrementally: it remembers how far it read and folds only the lines appended since.

const fs = require('fs');
const path = require('path');
const { parse, dumps } = require('./jsonpy');

const JOURNAL = 'journal.jsonl';

// Record tables keyed by id: a commit carries { table: { key: record } }.
const TABLES = ['s', 'o', 'w', 'k', 'f', 'b', 'p', 'r'];
// s: sessions, o: operations, w: approval waits, k: denial counters, f: failure tables (per
// session, a list), b: repeat budgets, p: projections (latest per operation), r: model
// requests. Besides: m: appended messages [[session, message]...], c: checkpoints saved,
// x: counters of the whole store.

class State {
  constructor() {
    for (const t of TABLES) this[t] = new Map();
    this.conv = new Map(); // session -> [message]
    this.checkpoints = [];
    this.x = { failures_logged: 0, results_saved: 0, starts: 0, prepares: 0, waits: 0 };
  }

  apply(commit) {
    for (const t of TABLES) {
      const part = commit[t];
      if (!part) continue;
      const table = this[t];
      for (const key of Object.keys(part)) table.set(key, part[key]);
    }
    if (commit.m) {
      for (const [sid, msg] of commit.m) {
        let list = this.conv.get(sid);
        if (!list) { list = []; this.conv.set(sid, list); }
        list.push(msg);
      }
    }
    if (commit.c) for (const cp of commit.c) this.checkpoints.push(cp);
    if (commit.x) Object.assign(this.x, commit.x);
  }
}

class JournalError extends Error {}

// Parse the complete lines of `text` (a torn last line, without its newline, is left for
// later) and apply them; returns how many bytes were consumed.
function foldText(state, text, where) {
  let consumed = 0;
  let start = 0;
  for (;;) {
    const nl = text.indexOf('\n', start);
    if (nl < 0) break;
    const line = text.slice(start, nl);
    if (line.trim()) {
      let commit;
      try {
        commit = parse(line);
      } catch (e) {
        throw new JournalError(`${where}: line at byte ${consumed} is not JSON (${e.message}); the journal is damaged`);
      }
      state.apply(commit);
    }
    consumed += Buffer.byteLength(line, 'utf8') + 1;
    start = nl + 1;
  }
  return consumed;
}

class Journal {
  constructor(dataDir) {
    this.dataDir = dataDir;
    this.file = path.join(dataDir, JOURNAL);
    fs.mkdirSync(dataDir, { recursive: true });
    this.state = new State();
    let text = '';
    try { text = fs.readFileSync(this.file, 'utf8'); } catch (e) { if (e.code !== 'ENOENT') throw e; }
    const consumed = foldText(this.state, text, this.file);
    this.fd = fs.openSync(this.file, 'a');
    if (consumed < Buffer.byteLength(text, 'utf8')) {
      // a torn last line (a power cut mid-write): end it so the next commit starts clean
      fs.writeSync(this.fd, '\n');
      fs.fsyncSync(this.fd);
    }
    this.commits = 0;
    this.fsyncs = 0;
  }

  tx() { return new Tx(this); }

  close() {
    if (this.fd !== null) { fs.closeSync(this.fd); this.fd = null; }
  }
}

class Tx {
  constructor(journal) {
    this.journal = journal;
    this.parts = {};
    this.records = []; // [table, key, record]: serialized at commit time
  }

  put(table, key, record) {
    this.records.push([table, key, record]);
    this.journal.state[table].set(key, record);
    return this;
  }

  session(rec) { return this.put('s', rec.session_id, rec); }
  op(rec) { return this.put('o', rec.execution_id, rec); }
  wait(rec) { return this.put('w', rec.wait_id, rec); }
  counter(rec) { return this.put('k', counterKey(rec.session_id, rec.permission_version), rec); }
  failures(sid, entries) { return this.put('f', sid, entries); }
  budget(key, n) { return this.put('b', key, n); }
  projection(rec) { return this.put('p', rec.execution_id, rec); }
  mreq(rec) { return this.put('r', rec.request_id, rec); }

  message(sid, msg) {
    (this.parts.m || (this.parts.m = [])).push([sid, msg]);
    const st = this.journal.state;
    let list = st.conv.get(sid);
    if (!list) { list = []; st.conv.set(sid, list); }
    list.push(msg);
    return this;
  }

  checkpoint(cp) {
    (this.parts.c || (this.parts.c = [])).push(cp);
    this.journal.state.checkpoints.push(cp);
    return this;
  }

  bump(name, by = 1) {
    const x = this.journal.state.x;
    x[name] = (x[name] || 0) + by;
    (this.parts.x || (this.parts.x = {}))[name] = x[name];
    return x[name];
  }

  commit(durable) {
    const out = {};
    for (const [table, key, record] of this.records) (out[table] || (out[table] = {}))[key] = record;
    Object.assign(out, this.parts);
    if (!Object.keys(out).length) return;
    const j = this.journal;
    const line = Buffer.from(dumps(out, false) + '\n', 'utf8');
    let off = 0;
    while (off < line.length) off += fs.writeSync(j.fd, line, off, line.length - off);
    j.commits++;
    if (durable) { fs.fsyncSync(j.fd); j.fsyncs++; }
  }
}

function counterKey(sid, version) { return `${sid}\u0000${version}`; }

// ---- reading for inspect ---------------------------------------------------------------

// One per data dir in the inspector process: folds what was appended since the last read.
class Reader {
  constructor(dataDir) {
    this.file = path.join(dataDir, JOURNAL);
    this.reset();
  }

  reset() {
    this.state = new State();
    this.offset = 0;
    this.ino = null;
    this.view = null;
  }

  // Returns true when the store changed since the previous refresh.
  refresh() {
    let fd;
    try {
      fd = fs.openSync(this.file, 'r');
    } catch (e) {
      if (e.code !== 'ENOENT') throw e;
      const changed = this.ino !== null || this.view === null;
      this.reset();
      this.ino = null;
      return changed;
    }
    try {
      const st = fs.fstatSync(fd);
      if (this.ino !== st.ino || st.size < this.offset) { this.reset(); this.ino = st.ino; }
      if (st.size === this.offset) return this.view === null;
      const buf = Buffer.allocUnsafe(st.size - this.offset);
      let got = 0;
      while (got < buf.length) {
        const n = fs.readSync(fd, buf, got, buf.length - got, this.offset + got);
        if (n === 0) break;
        got += n;
      }
      const last = buf.lastIndexOf(10, got - 1);
      if (last < 0) return this.view === null;
      const text = buf.subarray(0, last + 1).toString('utf8');
      this.offset += foldText(this.state, text, this.file);
      this.view = null;
      return true;
    } finally {
      fs.closeSync(fd);
    }
  }

  token() { return `${this.ino === null ? 0 : this.ino}:${this.offset}`; }
}

module.exports = { Journal, Reader, State, counterKey, JournalError, JOURNAL };
