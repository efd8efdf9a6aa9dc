'use strict';
// A self-check of this runtime's canonical JSON, run by the test suite
// (tests/conformance/test_node_impl.py): reads one JSON text per line on stdin the way the
// runtime reads the wire and its journal (JSON.parse) and writes, per line, the JSON array
// `[canonical(value), argsDigest("t", {v: value})]`. The test compares both with an
// RFC 8785 implementation of another language.

const { readFileSync } = require('fs');
const { canonical, argsDigest } = require('./jcs');

const out = [];
for (const line of readFileSync(0, 'utf8').split('\n')) {
  if (!line) continue;
  const value = JSON.parse(line);
  out.push(JSON.stringify([canonical(value), argsDigest('t', { v: value })]));
}
process.stdout.write(out.join('\n') + '\n');
