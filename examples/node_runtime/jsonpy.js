'use strict';
// JSON that keeps the difference between an integer and a float, and the contract's
// canonical form (docs/contract.md, "Canonical JSON": Python's json.dumps with sorted keys,
// compact separators, ensure_ascii off).
//
// JavaScript's JSON.parse turns `1.0` into the number 1, and JSON.stringify writes it back
// as `1`: the digest of the canonical JSON would then differ from the one the harness
// computes. So every JSON text this runtime reads (the wire, its own journal) goes through
// `parse`, which wraps a number written with a fraction or an exponent in a PyFloat, and
// every JSON text it writes goes through `dumps`, which writes a PyFloat the way Python's
// repr() does (`1.0`, `1e+16`, `1.5e-07`).

const crypto = require('crypto');

class PyFloat {
  constructor(value) { this.value = value; }
  valueOf() { return this.value; }
}

function isFloat(v) { return v instanceof PyFloat; }

// ---- parsing ---------------------------------------------------------------------------

class JsonSyntaxError extends Error {}

function parse(text) {
  let i = 0;
  const n = text.length;
  function ws() {
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 32 || c === 9 || c === 10 || c === 13) i++; else break;
    }
  }
  function fail(what) { throw new JsonSyntaxError(`${what} at character ${i}`); }
  function value(depth) {
    if (depth > 512) fail('nesting too deep');
    ws();
    if (i >= n) fail('unexpected end of JSON');
    const c = text[i];
    if (c === '{') {
      i++;
      const obj = {};
      ws();
      if (text[i] === '}') { i++; return obj; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('expected a string key');
        const key = string();
        ws();
        if (text[i] !== ':') fail("expected ':'");
        i++;
        const v = value(depth + 1);
        Object.defineProperty(obj, key, { value: v, writable: true, enumerable: true, configurable: true });
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === '}') { i++; return obj; }
        fail("expected ',' or '}'");
      }
    }
    if (c === '[') {
      i++;
      const arr = [];
      ws();
      if (text[i] === ']') { i++; return arr; }
      for (;;) {
        arr.push(value(depth + 1));
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ']') { i++; return arr; }
        fail("expected ',' or ']'");
      }
    }
    if (c === '"') return string();
    if (c === 't' && text.startsWith('true', i)) { i += 4; return true; }
    if (c === 'f' && text.startsWith('false', i)) { i += 5; return false; }
    if (c === 'n' && text.startsWith('null', i)) { i += 4; return null; }
    return number();
  }
  function string() {
    // fast path: no escapes
    const start = ++i;
    let j = start;
    while (j < n) {
      const c = text.charCodeAt(j);
      if (c === 34) { i = j + 1; return text.slice(start, j); }
      if (c === 92 || c < 32) break;
      j++;
    }
    let out = text.slice(start, j);
    i = j;
    while (i < n) {
      const c = text[i];
      if (c === '"') { i++; return out; }
      if (c === '\\') {
        const e = text[i + 1];
        i += 2;
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            const hex = text.slice(i, i + 4);
            if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('bad \\u escape');
            out += String.fromCharCode(parseInt(hex, 16));
            i += 4;
            break;
          }
          default: fail('bad escape');
        }
        continue;
      }
      if (text.charCodeAt(i) < 32) fail('control character in string');
      out += c;
      i++;
    }
    fail('unterminated string');
  }
  function number() {
    const m = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
    m.lastIndex = i;
    const r = m.exec(text);
    if (!r || r[0].length === 0 || r[0] === '-') fail('unexpected character');
    i += r[0].length;
    const v = Number(r[0]);
    if (r[1] !== undefined || r[2] !== undefined) return new PyFloat(v);
    return v;
  }
  const v = value(0);
  ws();
  if (i !== n) fail('trailing characters');
  return v;
}

// ---- writing ---------------------------------------------------------------------------

// Python's repr() of a float: the shortest digits that round-trip (JavaScript picks the
// same ones), in fixed notation when the decimal exponent is in [-4, 16), else as d.ddde+XX.
function pyFloatRepr(x) {
  if (Number.isNaN(x)) return 'NaN';
  if (x === Infinity) return 'Infinity';
  if (x === -Infinity) return '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const e = x.toExponential(); // shortest round-trip digits, e.g. "1.5e-7"
  const m = /^(-?)(\d)(?:\.(\d+))?e([-+]\d+)$/.exec(e);
  const sign = m[1];
  const digits = m[2] + (m[3] || '');
  const exp = parseInt(m[4], 10);
  if (exp >= -4 && exp < 16) {
    let s;
    if (exp >= 0) {
      const intLen = exp + 1;
      if (digits.length <= intLen) s = digits + '0'.repeat(intLen - digits.length) + '.0';
      else s = digits.slice(0, intLen) + '.' + digits.slice(intLen);
    } else {
      s = '0.' + '0'.repeat(-exp - 1) + digits;
    }
    return sign + s;
  }
  const mant = digits.length > 1 ? digits[0] + '.' + digits.slice(1) : digits;
  const es = exp < 0 ? '-' : '+';
  const ea = String(Math.abs(exp)).padStart(2, '0');
  return `${sign}${mant}e${es}${ea}`;
}

function quote(s) {
  // Python's json with ensure_ascii=False escapes only '"', '\\' and control characters
  // (\n \r \t \b \f by name, the rest as \u00XX); JSON.stringify does the same for those,
  // but also escapes lone surrogates, which Python would not (and then fail to encode).
  return JSON.stringify(s);
}

function compareCodePoints(a, b) {
  // Python sorts str keys by code point; JavaScript's default sort compares UTF-16 units,
  // which differs only when a character above U+FFFF meets one in U+E000..U+FFFF.
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done) return y.done ? 0 : -1;
    if (y.done) return 1;
    const cx = x.value.codePointAt(0);
    const cy = y.value.codePointAt(0);
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

function fastKeyCompare(a, b) {
  if (a === b) return 0;
  // pure-BMP-below-surrogates strings order the same by units and by code points
  if (/[\ud800-\uffff]/.test(a) || /[\ud800-\uffff]/.test(b)) return compareCodePoints(a, b);
  return a < b ? -1 : 1;
}

function dumps(value, sortKeys) {
  const parts = [];
  function w(v) {
    if (v === null || v === undefined) { parts.push('null'); return; }
    switch (typeof v) {
      case 'string': parts.push(quote(v)); return;
      case 'boolean': parts.push(v ? 'true' : 'false'); return;
      case 'number':
        if (Number.isInteger(v)) { parts.push(String(v)); return; }
        parts.push(pyFloatRepr(v)); return; // a non-integer JS number is a float anyway
      case 'object':
        if (v instanceof PyFloat) { parts.push(pyFloatRepr(v.value)); return; }
        if (Array.isArray(v)) {
          parts.push('[');
          for (let k = 0; k < v.length; k++) { if (k) parts.push(','); w(v[k]); }
          parts.push(']');
          return;
        }
        {
          let keys = Object.keys(v).filter((k) => v[k] !== undefined);
          if (sortKeys) keys = keys.slice().sort(fastKeyCompare);
          parts.push('{');
          let first = true;
          for (const k of keys) {
            if (!first) parts.push(',');
            first = false;
            parts.push(quote(k), ':');
            w(v[k]);
          }
          parts.push('}');
        }
        return;
      default:
        throw new TypeError(`cannot encode a ${typeof v} as JSON`);
    }
  }
  w(value);
  return parts.join('');
}

function canonical(value) { return dumps(value, true); }

// The same text as dumps(value, false), through the engine's own JSON.stringify: a PyFloat
// becomes a marked string that is then replaced by its Python spelling.
const MARK = `\u0000pyfloat-${crypto.randomBytes(4).toString('hex')}:`;
PyFloat.prototype.toJSON = function toJSON() { return MARK + pyFloatRepr(this.value); };
const MARKED = new RegExp(`"${JSON.stringify(MARK).slice(1, -1).replace(/\\/g, '\\\\')}([^"]*)"`, 'g');
function fastDumps(value) {
  const text = JSON.stringify(value);
  return text.indexOf('pyfloat-') >= 0 ? text.replace(MARKED, '$1') : text;
}

// JSON.parse unless a number is written with a fraction or an exponent (the only case
// where its result would differ from parse's).
const TOKENS = /"(?:[^"\\]|\\.)*"|-?\d+(\.\d+)?([eE][-+]?\d+)?/g;
function fastParse(text) {
  if (/[0-9][.eE]/.test(text)) {
    TOKENS.lastIndex = 0;
    let m;
    while ((m = TOKENS.exec(text)) !== null) {
      if (m[1] !== undefined || m[2] !== undefined) return parse(text);
    }
  }
  return JSON.parse(text);
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

// A deep copy that keeps PyFloat values (they are immutable, so shared).
function clone(v) {
  if (v === null || typeof v !== 'object' || v instanceof PyFloat) return v;
  if (Array.isArray(v)) return v.map(clone);
  const o = {};
  for (const k of Object.keys(v)) o[k] = clone(v[k]);
  return o;
}

module.exports = {
  PyFloat, isFloat, parse, dumps, canonical, fastDumps, fastParse, sha256hex, executionId, argsDigest, resultDigest,
  pyFloatRepr, clone, JsonSyntaxError,
};
