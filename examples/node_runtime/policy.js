'use strict';
// Pure functions of the permission model and the UI vocabulary: rule matching, the
// precedence of docs/lifecycle.md "Permission precedence (L2.1)", tool visibility (L5.1),
// the repeat key (docs/lifecycle.md "Failure policy"), and the projection table
// (docs/lifecycle.md "What the UI shows"). No I/O, no store.

const { canonical, sha256hex } = require('./jcs');

// ---- fnmatch -------------------------------------------------------------------------

const patternCache = new Map();

function escapeRegex(c) { return /[\\^$.*+?()[\]{}|/]/.test(c) ? '\\' + c : c; }

// Python's fnmatch.translate, case-sensitive (fnmatch on POSIX normalises no case): `*`
// any run, `?` one character, `[seq]` / `[!seq]` a set, an unclosed `[` a literal.
function translate(pat) {
  const chars = Array.from(pat); // code points, as Python iterates a str
  let i = 0;
  const n = chars.length;
  let res = '';
  while (i < n) {
    const c = chars[i++];
    if (c === '*') {
      while (chars[i] === '*') i++;
      res += '[^]*';
    } else if (c === '?') {
      res += '[^]';
    } else if (c === '[') {
      let j = i;
      if (j < n && chars[j] === '!') j++;
      if (j < n && chars[j] === ']') j++;
      while (j < n && chars[j] !== ']') j++;
      if (j >= n) {
        res += '\\[';
      } else {
        let stuff = chars.slice(i, j);
        i = j + 1;
        let neg = false;
        if (stuff[0] === '!') { neg = true; stuff = stuff.slice(1); }
        let set = '';
        for (const ch of stuff) set += (ch === '\\' || ch === ']' || ch === '[' || ch === '^') ? '\\' + ch : ch;
        if (!stuff.length) res += neg ? '[^]' : '(?!)';
        else res += (neg ? '[^' : '[') + set + ']';
      }
    } else {
      res += escapeRegex(c);
    }
  }
  return '^(?:' + res + ')$';
}

function fnmatch(name, pat) {
  let re = patternCache.get(pat);
  if (re === undefined) {
    try { re = new RegExp(translate(pat), 'u'); } catch (e) { re = null; } // e.g. a reversed range [z-a]
    patternCache.set(pat, re);
  }
  return re !== null && re.test(name);
}

// ---- rules ---------------------------------------------------------------------------

// The text a rule's pattern is matched against: the named field of the args, or the
// canonical args when `field` is empty. A missing field is matched as "" (so `*` still
// matches it, an outright deny stays outright, and a pattern needing a character does not;
// docs/lifecycle.md "Rule matching" leaves `""` and `**` on an absent field free); a field
// that is not a string is matched as its canonical JSON (GUESSES.md item 34).
function ruleSubject(rule, args) {
  const field = rule.field || '';
  if (!field) return canonical(args);
  if (!Object.prototype.hasOwnProperty.call(args, field)) return '';
  const v = args[field];
  return typeof v === 'string' ? v : canonical(v);
}

function ruleMatches(rule, tool, args) {
  if (!fnmatch(tool, rule.tool)) return false;
  const pattern = rule.pattern === undefined ? '*' : rule.pattern;
  return fnmatch(ruleSubject(rule, args), pattern);
}

function isOutright(rule, tool) { return fnmatch(tool, rule.tool) && (rule.pattern === undefined || rule.pattern === '*'); }

function isBash(spec, tool) { return tool === 'Bash' || (spec && spec.kind === 'bash'); }

// The layers that need nobody: hard constraints, capabilities, plan mode, explicit deny.
// Returns the deny source or null.
function denyLayer(sess, spec, tool, args) {
  for (const r of sess.hard_constraints) if (ruleMatches(r, tool, args)) return 'hard_constraint';
  if (sess.capabilities.length && !sess.capabilities.includes(tool)) return 'capability';
  if (sess.mode === 'plan' && !(spec && spec.kind === 'read')) return 'plan_mode';
  for (const r of sess.rules) if ((r.effect || 'allow') === 'deny' && ruleMatches(r, tool, args)) return 'explicit_deny';
  return null;
}

function hasRule(sess, effect, tool, args) {
  for (const r of sess.rules) if ((r.effect || 'allow') === effect && ruleMatches(r, tool, args)) return true;
  return false;
}

// L5.1/L5.3: a tool denied outright is not offered to the model.
function visibleTools(sess) {
  const out = [];
  for (const spec of sess.tools) {
    const t = spec.name;
    if (sess.hard_constraints.some((r) => isOutright(r, t))) continue;
    if (sess.capabilities.length && !sess.capabilities.includes(t)) continue;
    if (sess.mode === 'plan' && spec.kind !== 'read') continue;
    if (sess.rules.some((r) => (r.effect || 'allow') === 'deny' && isOutright(r, t))) continue;
    out.push(t);
  }
  return out;
}

// docs/contract.md "Dedup key": Bash drops `description` and nothing else; other tools
// keep every arg. The spelling is ours: "<tool>#<sha256 of the canonical args kept>".
function dedupKey(spec, tool, args) {
  let kept = args;
  if (isBash(spec, tool)) {
    kept = {};
    for (const k of Object.keys(args)) if (k !== 'description') kept[k] = args[k];
  }
  return `${tool}#${sha256hex(canonical(kept)).slice(0, 32)}`;
}

// ---- the UI's vocabulary ---------------------------------------------------------------

function expectedProjection(op, waitPending) {
  if (op.outcome === 'unknown' || op.reconciliation_required) return ['reconciliation_required', ['reconcile']];
  if (op.outcome === 'succeeded') return ['succeeded', []];
  if (op.outcome === 'failed') return ['failed', ['edit_args']];
  if (waitPending) return ['awaiting_approval', ['approve', 'reject']];
  if (op.decided_by === 'cancellation' && op.decided) return ['cancelled', []];
  if (op.permission === 'deny' && op.decided) {
    return op.decided_by === 'hard_constraint' ? ['denied', []] : ['denied', ['change_rules']];
  }
  if (op.failure_kind === 'param_error') return ['invalid_arguments', ['edit_args']];
  if (op.failure_kind === 'transient') return ['not_executed', ['retry']];
  if (op.failure_kind) return ['not_executed', []];
  return ['pending', []];
}

module.exports = {
  fnmatch, translate, ruleMatches, denyLayer, hasRule, visibleTools, dedupKey, expectedProjection, isBash,
};
