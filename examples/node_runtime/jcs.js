'use strict';
// The contract's canonical JSON (docs/contract.md, "Canonical JSON": RFC 8785, the JSON
// Canonicalization Scheme), the digests over it, and execution ids.
//
// JavaScript is where RFC 8785 comes from: JSON.stringify writes a string with exactly the
// escapes the RFC asks for (3.2.2.2) and a number as Number.prototype.toString does
// (3.2.2.3: `1.0` is `1`, `-0` is `0`, `1e21` is `1e+21`), and the default sort of strings
// compares UTF-16 code units (3.2.3). So the wire and the journal are plain JSON.parse and
// JSON.stringify, `1.0` and `1` are one number as the contract says, and `canonical` only
// sorts the members and refuses what the RFC has no text for (NaN, infinities, lone
// surrogates), instead of writing a text another implementation would not.

const crypto = require('crypto');

class CanonicalJsonError extends Error {}
CanonicalJsonError.prototype.name = 'CanonicalJsonError';

// A lone surrogate (a UTF-16 unit of a pair without its other half): in a `u` regex a
// well-formed pair is one code point, so only a lone half matches.
const LONE_SURROGATE = /[\ud800-\udfff]/u;

function quote(s, where) {
  if (LONE_SURROGATE.test(s)) {
    throw new CanonicalJsonError(`${where}: a string with a lone surrogate has no UTF-8 form (RFC 8785 refuses it)`);
  }
  return JSON.stringify(s);
}

function canonical(value) {
  const parts = [];
  function w(v, where) {
    if (v === null) { parts.push('null'); return; }
    switch (typeof v) {
      case 'string': parts.push(quote(v, where)); return;
      case 'boolean': parts.push(v ? 'true' : 'false'); return;
      case 'number':
        if (!Number.isFinite(v)) throw new CanonicalJsonError(`${where}: ${v} has no JSON text (RFC 8785 refuses it)`);
        parts.push(JSON.stringify(v)); // Number.prototype.toString, and -0 as 0
        return;
      case 'object':
        if (Array.isArray(v)) {
          parts.push('[');
          for (let k = 0; k < v.length; k++) {
            if (k) parts.push(',');
            w(v[k] === undefined ? null : v[k], `${where}[${k}]`);
          }
          parts.push(']');
          return;
        }
        {
          // Array.prototype.sort without a comparator orders strings by UTF-16 code units
          const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort();
          parts.push('{');
          for (let k = 0; k < keys.length; k++) {
            if (k) parts.push(',');
            parts.push(quote(keys[k], where), ':');
            w(v[keys[k]], `${where}.${keys[k]}`);
          }
          parts.push('}');
        }
        return;
      default:
        throw new CanonicalJsonError(`${where}: a ${typeof v} is not JSON data`);
    }
  }
  w(value, '$');
  return parts.join('');
}

function sha256hex(text) { return crypto.createHash('sha256').update(Buffer.from(text, 'utf8')).digest('hex'); }

// docs/contract.md, "Execution id"
function executionId(sessionId, toolCallId) {
  const h = crypto.createHash('sha256');
  h.update(Buffer.from(sessionId, 'utf8'));
  h.update(Buffer.from([0]));
  h.update(Buffer.from(toolCallId, 'utf8'));
  return 'ex-' + h.digest('hex').slice(0, 16);
}

// docs/contract.md, "Args digest" and "Result digest"
function argsDigest(tool, args) { return 'sha256:' + sha256hex(canonical({ tool, args })); }
function resultDigest(status, output) { return 'sha256:' + sha256hex(canonical({ status, output })); }

// A deep copy of JSON data.
function clone(v) {
  if (v === null || typeof v !== 'object') return v;
  if (Array.isArray(v)) return v.map(clone);
  const o = {};
  for (const k of Object.keys(v)) o[k] = clone(v[k]);
  return o;
}

module.exports = {
  canonical, sha256hex, executionId, argsDigest, resultDigest, clone, CanonicalJsonError,
};
