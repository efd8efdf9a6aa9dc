'use strict';
// One live instance per data dir. This runtime does not offer `multi_instance`: an `open`
// of a data dir that another live instance holds raises at once (docs/lifecycle.md,
// "Conformance levels": the documented way out), which the harness records as a refusal.
//
// The lock is a file naming its holder by pid and by the process's start time (from
// /proc), so a crashed holder (SIGKILLed, then reaped by the harness) or a reused pid is
// recognised as gone and the lock is taken over.

const fs = require('fs');
const path = require('path');

const LOCK = 'instance.lock';

function startTime(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // rest[0] is the state (field 3); the start time is field 22
    return { state: rest[0], start: rest[19] };
  } catch (e) {
    return null;
  }
}

function alive(holder) {
  if (!holder || typeof holder.pid !== 'number') return false;
  if (holder.pid === process.pid) return false;
  const st = startTime(holder.pid);
  if (!st) return false;
  if (st.state === 'Z' || st.state === 'X') return false;
  return st.start === holder.start;
}

class InstanceRefused extends Error {
  constructor(message) { super(message); this.name = 'InstanceRefused'; }
}

function acquire(dataDir) {
  fs.mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, LOCK);
  const me = { pid: process.pid, start: (startTime(process.pid) || {}).start || null };
  for (let tries = 0; tries < 3; tries++) {
    try {
      const fd = fs.openSync(file, 'wx');
      fs.writeSync(fd, JSON.stringify(me));
      fs.closeSync(fd);
      return file;
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    }
    let holder = null;
    try { holder = JSON.parse(fs.readFileSync(file, 'utf8')); } catch (e) { holder = null; }
    if (alive(holder)) {
      throw new InstanceRefused(
        `data dir ${dataDir} is held by a live instance (pid ${holder.pid}); this runtime does not offer multi_instance, so a second instance is refused`,
      );
    }
    try { fs.unlinkSync(file); } catch (e) { if (e.code !== 'ENOENT') throw e; }
  }
  throw new InstanceRefused(`could not take the lock of ${dataDir}`);
}

function release(file) {
  if (!file) return;
  try {
    const holder = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (holder.pid === process.pid) fs.unlinkSync(file);
  } catch (e) { /* gone already */ }
}

module.exports = { acquire, release, InstanceRefused };
