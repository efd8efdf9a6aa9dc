'use strict';
// The durable store: one append-only journal of JSON lines per data dir
// (`<data_dir>/journal.jsonl`). Each line is one commit: the new values of the records it
// touched (whole records, never deltas) plus the conversation messages it appended. A
// commit is one write(2) of one line, so a SIGKILL keeps it whole or not at all; a
// "durable" commit is followed by fsync (docs/lifecycle.md, "What must be on disk before
// what"), the others ride on the next fsync, and a power cut keeps a prefix of the lines.
//
// The state is the fold of the lines in order. Several live instances may append to one
// journal (`multi_instance`): each line names the instance that wrote it; an instance folds
// the file at `open`, applies its own commits to its memory as it writes them, and folds
// the other instances' lines with `refresh()` (called at the start of every driver call
// and after every failpoint, the only moment another instance can act while this one
// waits). Folding updates records in place,
// so an object the runtime holds stays the store's current record. Starting a run is
// claimed with an exclusive claim file, so one instance wins. The inspector folds
// incrementally: it remembers how far it read and folds only the lines appended since.

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

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
    this.dirty = new Set(); // the tables and lists changed since the reader last answered
  }

  apply(commit) {
    for (const k of Object.keys(commit)) this.dirty.add(k);
    for (const t of TABLES) {
      const part = commit[t];
      if (!part) continue;
      const table = this[t];
      for (const key of Object.keys(part)) {
        const now = table.get(key);
        const next = part[key];
        if (now !== undefined && now !== null && typeof now === 'object' && next !== null && typeof next === 'object') {
          // in place: whoever holds the record sees the store's current value
          if (Array.isArray(now)) { now.length = 0; for (const x of next) now.push(x); continue; }
          for (const k of Object.keys(now)) if (!(k in next)) delete now[k];
          Object.assign(now, next);
        } else {
          table.set(key, next);
        }
      }
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
function foldText(state, text, where, skipInstance = null) {
  let consumed = 0;
  let start = 0;
  for (;;) {
    const nl = text.indexOf('\n', start);
    if (nl < 0) break;
    const line = text.slice(start, nl);
    if (line.trim()) {
      let commit;
      try {
        commit = JSON.parse(line);
      } catch (e) {
        throw new JournalError(`${where}: line at byte ${consumed} is not JSON (${e.message}); the journal is damaged`);
      }
      if (skipInstance === null || commit.i !== skipInstance) state.apply(commit);
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
    this.readFd = fs.openSync(this.file, 'r');
    this.readOffset = consumed;
    if (consumed < Buffer.byteLength(text, 'utf8')) {
      // a torn last line (a power cut mid-write): end it so the next commit starts clean
      fs.writeSync(this.fd, '\n');
      fs.fsyncSync(this.fd);
      this.readOffset = Buffer.byteLength(text, 'utf8') + 1;
    }
    this.instance = crypto.randomBytes(6).toString('hex');
    this.claims = path.join(dataDir, 'claims');
    this.commits = 0;
    this.fsyncs = 0;
  }

  // Fold the lines other instances appended since the last read (our own are applied).
  refresh() {
    const size = fs.fstatSync(this.readFd).size;
    if (size <= this.readOffset) return false;
    const buf = Buffer.allocUnsafe(size - this.readOffset);
    let got = 0;
    while (got < buf.length) {
      const n = fs.readSync(this.readFd, buf, got, buf.length - got, this.readOffset + got);
      if (n === 0) break;
      got += n;
    }
    const last = buf.lastIndexOf(10, got - 1);
    if (last < 0) return false;
    this.readOffset += foldText(this.state, buf.subarray(0, last + 1).toString('utf8'), this.file, this.instance);
    return true;
  }

  // Claim run `run` of an operation: true for exactly one caller, ever.
  claim(executionId, run) {
    fs.mkdirSync(this.claims, { recursive: true });
    try {
      const fd = fs.openSync(path.join(this.claims, `${executionId}.${run}`), 'wx');
      fs.writeSync(fd, this.instance);
      fs.closeSync(fd);
      return true;
    } catch (e) {
      if (e.code === 'EEXIST') return false;
      throw e;
    }
  }

  tx() { return new Tx(this); }

  close() {
    if (this.fd !== null) { fs.closeSync(this.fd); this.fd = null; }
    if (this.readFd !== null) { fs.closeSync(this.readFd); this.readFd = null; }
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
    const out = { i: this.journal.instance };
    for (const [table, key, record] of this.records) (out[table] || (out[table] = {}))[key] = record;
    Object.assign(out, this.parts);
    if (Object.keys(out).length === 1) return;
    const j = this.journal;
    const line = Buffer.from(JSON.stringify(out) + '\n', 'utf8');
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
