'use strict';
// The lifecycle behind the driver methods (docs/lifecycle.md): turns, the operation
// pipeline with its failpoints, approvals, revalidation, the failure policy, checkpoints,
// projections and recovery. Every effect goes through a port of the harness (`this.port`);
// every state change is a commit of the journal (journal.js) made before the failpoint
// that names it, never while a port request is pending.
//
// Choices of our own where the docs leave them free (GUESSES.md lists every point we had
// to guess): one journal line per commit and fsync only where docs/lifecycle.md "What must
// be on disk before what" asks for it; the calls of one answer are processed in order and
// the loop stops at the first one that waits; recover() folds and projects what a crash
// left without calling any operation failpoint (the turns it resumes call them as usual);
// a call prepared in a cancelled session is recorded as not executed without a decision.

const {
  canonical, executionId, argsDigest, resultDigest, clone, sha256hex,
} = require('./jsonpy');
const { WorldError } = require('./rpc');
const { counterKey } = require('./journal');
const policy = require('./policy');

const DEFAULT_THRESHOLDS = {
  failure_table_capacity: 16,
  consecutive_denials_max: 3,
  cumulative_denials_max: 20,
  legacy_classifier_window_chars: 800,
  classifier_input_chars_max: 20000,
  auto_retries_max: 2,
  failure_repeat_limit: 2,
  classifier_timeout_s: 30.0,
};
const FAILURE_TABLE_CAPACITY = 16;
// The other allowed choice for a standing sandboxed result (GUESSES.md item 53): deliver it
// through the checkpoint and projection failpoints. Off by default; it reproduces a
// harness judgement we believe false (NODE_RUNTIME_DELIVERY_FAILPOINTS=1).
const DELIVERY_FAILPOINTS = process.env.NODE_RUNTIME_DELIVERY_FAILPOINTS === '1';
const CHECKPOINT_FORMAT = 1;

// Denials that spend the repeat guard's budget (docs/contract.md "The repeat guard's budget"):
// by a rule, the default, an owner or the guard itself.
const COUNTED_DENIALS = new Set([
  'hard_constraint', 'capability', 'plan_mode', 'explicit_deny', 'ask_rule', 'default_ask', 'default_deny',
  'approval', 'repeat_guard',
]);
const LAYERS = new Set(['hard_constraint', 'capability', 'plan_mode', 'explicit_deny']);
const COUNTED_FAILURE_KINDS = new Set(['failed', 'param_error', 'unknown']);

const DENY_REASONS = {
  hard_constraint: 'denied by a hard constraint of the session',
  capability: 'denied: the tool is not among the identity\'s capabilities',
  plan_mode: 'denied: plan mode runs only read tools',
  explicit_deny: 'denied by an explicit deny rule',
  ask_rule: 'denied: an ask rule needs an owner who can approve, and this session has none',
  default_deny: 'denied: no rule allows it and nobody can approve it',
  repeat_guard: 'refused without running: the same call already failed up to the repeat limit under these rules',
  revalidation: 'refused at revalidation: the decision no longer holds under the rules in force',
  approval: 'denied: the owner rejected the approval',
  cancellation: 'not executed: the session was cancelled before the call started',
};

function codePointLength(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff) n++;
  }
  return n;
}

class Runtime {
  constructor(journal, port) {
    this.journal = journal;
    this.st = journal.state;
    this.port = port; // { call(method, params) }
    this.closed = false;
  }

  // ---- ports ----------------------------------------------------------------------------

  emit(type, sessionId, { eid = '', rid = '', data = {} } = {}) {
    this.port.call('emit', { event: { type, session_id: sessionId, execution_id: eid, request_id: rid, data } });
  }

  now() {
    const v = this.port.call('now', {});
    return typeof v === 'number' ? v : Number(v);
  }

  // Calls a failpoint; a `raise` fault there (InjectedFault) is a runtime fault of that
  // point: reported, and the caller goes on (returns true). A crash never returns.
  fp(name, context, { reportFault = true } = {}) {
    try {
      this.port.call('failpoint', { name, context });
      this.journal.refresh();
      return false;
    } catch (e) {
      this.journal.refresh();
      if (e instanceof WorldError && e.exception === 'InjectedFault') {
        if (reportFault) {
          this.emit('runtime_fault', context.session_id, {
            eid: context.execution_id || '', rid: context.request_id || '',
            data: { failpoint: name, message: e.message },
          });
        }
        return true;
      }
      throw e;
    }
  }

  opContext(op) {
    return { session_id: op.session_id, tool_call_id: op.tool_call_id, execution_id: op.execution_id };
  }

  // ---- reading the state ----------------------------------------------------------------

  session(sid) {
    const s = this.st.s.get(sid);
    if (!s) throw new Error(`unknown session '${sid}': open_session it first`);
    return s;
  }

  conv(sid) { return this.st.conv.get(sid) || []; }

  spec(sess, tool) { return sess.tools.find((t) => t.name === tool) || null; }

  thresholds(sess) { return sess.thresholds; }

  counter(sid, version) {
    return this.st.k.get(counterKey(sid, version)) || { session_id: sid, permission_version: version, consecutive: 0, cumulative: 0 };
  }

  budgetKey(sid, dedup, version) { return `${sid}\u0000${dedup}\u0000${version}`; }

  budget(sid, dedup, version) { return this.st.b.get(this.budgetKey(sid, dedup, version)) || 0; }

  pendingWaitOf(op) {
    if (!op.wait_id) return null;
    const w = this.st.w.get(op.wait_id);
    return w && w.status === 'pending' ? w : null;
  }

  // The calls of the session's last completed answer that have no tool message yet, in call
  // order (the loop answers them in order, so they are a suffix).
  pendingCalls(sid) {
    const conv = this.conv(sid);
    let i = conv.length - 1;
    while (i >= 0 && conv[i].role === 'tool') i--;
    if (i < 0) return [];
    const last = conv[i];
    if (last.role !== 'assistant' || !last.tool_calls || !last.tool_calls.length) return [];
    const answered = conv.length - 1 - i;
    return last.tool_calls.slice(answered);
  }

  // ---- driver: sessions and rules ---------------------------------------------------------

  openSession(config) {
    const sid = config.session_id;
    if (this.st.s.has(sid)) return null; // idempotent: keep its state
    const rec = {
      session_id: sid,
      interactive: config.interactive !== undefined ? config.interactive : true,
      owner_can_approve: config.owner_can_approve !== undefined ? config.owner_can_approve : true,
      mode: config.mode || 'default',
      capabilities: config.capabilities || [],
      hard_constraints: config.hard_constraints || [],
      rules: config.rules || [],
      permission_version: config.permission_version !== undefined ? config.permission_version : 1,
      tools: config.tools || [],
      trusted_cwd: config.trusted_cwd || '',
      permission_scope: config.permission_scope || '',
      user_requirements: config.user_requirements || '',
      thresholds: Object.assign({}, DEFAULT_THRESHOLDS, config.thresholds || {}, { failure_table_capacity: FAILURE_TABLE_CAPACITY }),
      turn_status: 'idle',
      cancelled: false,
      final_text: '',
      requests: 0,
      pending_user_text: null,
    };
    const tx = this.journal.tx().session(rec);
    tx.counter({ session_id: sid, permission_version: rec.permission_version, consecutive: 0, cumulative: 0 });
    tx.commit(true);
    return null;
  }

  updateRules(sid, rules, version) {
    const sess = this.session(sid);
    sess.rules = rules;
    sess.permission_version = version;
    const tx = this.journal.tx().session(sess);
    if (!this.st.k.has(counterKey(sid, version))) tx.counter({ session_id: sid, permission_version: version, consecutive: 0, cumulative: 0 });
    tx.commit(true);
    return null;
  }

  // Marks the session cancelled. A turn in flight (this is then a re-entrant call at one of
  // its failpoints) stops at its next check: a verdict not yet acted on is void and the call
  // is recorded not executed (decided_by cancellation). Pending waits stay pending.
  cancel(sid) {
    const sess = this.session(sid);
    sess.cancelled = true;
    this.journal.tx().session(sess).commit(true);
    return null;
  }

  close() {
    this.closed = true;
    return null;
  }

  // ---- turns ----------------------------------------------------------------------------

  turnResult(sid) {
    const s = this.session(sid);
    return { session_id: sid, status: s.turn_status, final_text: s.final_text || '' };
  }

  endTurn(sid, status, finalText = '') {
    const sess = this.session(sid);
    sess.turn_status = status;
    sess.final_text = finalText;
    sess.pending_user_text = null;
    this.journal.tx().session(sess).commit(true);
    this.emit('turn_ended', sid, { data: { status } });
    return { session_id: sid, status, final_text: finalText };
  }

  runTurn(sid, text) {
    const sess = this.session(sid);
    sess.turn_status = 'running';
    sess.pending_user_text = text;
    this.journal.tx().session(sess).commit(false);
    return this.drive(sid);
  }

  answerApproval(waitId, approve) {
    const wait = this.st.w.get(waitId);
    if (!wait) throw new Error(`unknown wait id '${waitId}': this store never had it`);
    const sid = wait.session_id;
    if (wait.status !== 'pending') return this.turnResult(sid); // a lost wait: changes nothing
    const sess = this.session(sid);
    const op = this.st.o.get(wait.execution_id);
    if (wait.purpose === 'escalation') return this.answerEscalation(wait, op, sess, approve);
    wait.status = approve ? 'approved' : 'rejected';
    wait.applied = true;
    op.permission = approve ? 'allow' : 'deny';
    op.decided_by = 'approval';
    op.decided = true;
    op.stage = 'decided';
    op.wait_id = null;
    sess.cancelled = false; // an answer resumes the session
    sess.turn_status = 'running';
    const tx = this.journal.tx().wait(wait).op(op).session(sess);
    if (approve) {
      const c = clone(this.counter(sid, wait.permission_version));
      c.consecutive = 0;
      if (wait.fallback === 'cumulative') c.cumulative = 0;
      tx.counter(c);
    }
    tx.commit(true);
    this.emit('approval_answered', sid, { eid: op.execution_id, data: { wait_id: waitId, approved: !!approve } });
    this.emit('permission_decided', sid, { eid: op.execution_id, data: { permission: op.permission, decided_by: op.decided_by } });
    return this.drive(sid);
  }

  answerEscalation(wait, op, sess, approve) {
    const sid = sess.session_id;
    wait.status = approve ? 'approved' : 'rejected';
    wait.applied = true;
    sess.cancelled = false;
    sess.turn_status = 'running';
    this.emit('approval_answered', sid, { eid: op.execution_id, data: { wait_id: wait.wait_id, approved: !!approve, purpose: 'escalation' } });
    if (approve) {
      op.stage = 'escalate';
      op.escalation_version = wait.permission_version;
      op.wait_id = null;
      this.journal.tx().wait(wait).op(op).session(sess).commit(true);
    } else {
      this.deliver(op, { wait });
    }
    return this.drive(sid);
  }

  // The agent loop: settle the calls an earlier answer left pending, add the user's message
  // when a turn brought one, then ask the model until it answers without calls.
  drive(sid, { inRecovery = false } = {}) {
    let modelRequests = 0;
    for (;;) {
      const sess = this.session(sid);
      const newMessage = sess.pending_user_text !== null;
      // a new message after a cancel: the cancelled turn's calls are settled first
      if (newMessage && sess.cancelled) this.settleCancelled(sid, { newMessage });
      // the calls still pending, read again after each one: another instance may have
      // answered some while this one waited at a failpoint
      let previous = null;
      for (let pending = this.pendingCalls(sid); pending.length; pending = this.pendingCalls(sid)) {
        const call = pending[0];
        if (previous !== null && previous === call) throw new Error(`call ${call.tool_call_id} of ${sid} stays pending after it was processed`);
        const r = this.processCall(sid, call, { newMessage });
        if (r === 'waiting') return this.endTurn(sid, 'awaiting_approval');
        if (r === 'deferred') return this.endTurn(sid, 'deferred');
        if (r === 'stopped') {
          this.settleCancelled(sid, { newMessage });
          return this.endTurn(sid, 'cancelled');
        }
        previous = call;
      }
      if (sess.pending_user_text !== null) {
        const text = sess.pending_user_text;
        sess.pending_user_text = null;
        sess.cancelled = false; // a new turn resumes a cancelled session
        this.journal.tx().message(sid, { role: 'user', content: text }).session(sess).commit(false);
      } else if (sess.cancelled) {
        this.settleCancelled(sid);
        return this.endTurn(sid, 'cancelled');
      }
      const step = this.modelStep(sid);
      modelRequests++;
      if (inRecovery) this.resumedWithRequest = true;
      if (step.kind === 'cancelled_turn') {
        this.settleCancelled(sid);
        return this.endTurn(sid, 'cancelled');
      }
      if (step.kind === 'final') return this.endTurn(sid, 'completed', step.text);
      if (step.kind === 'again') continue; // settle what another instance left, or ask anew
      if (step.kind === 'incomplete') return this.endTurn(sid, 'incomplete', step.text);
      if (step.kind === 'failed') {
        this.endTurn(sid, step.status === 'cancelled' ? 'cancelled' : 'failed', step.text);
        throw step.error; // M3: the stream's exception leaves run_turn unchanged
      }
      // 'calls': the answer is in the conversation; its calls are pending now
    }
  }

  // One model request: start record, stream, end record (docs/lifecycle.md step 2-3).
  modelStep(sid) {
    this.fp('before_model_request', { session_id: sid });
    let sess = this.session(sid);
    if (sess.cancelled) return { kind: 'cancelled_turn' };
    if (this.pendingCalls(sid).length) return { kind: 'again' }; // another instance left calls pending
    let n = sess.requests + 1;
    let rid = `${sid}/m${n}`;
    while (this.st.r.has(rid)) { n++; rid = `${sid}/m${n}`; }
    sess.requests = n;
    const mreq = {
      request_id: rid, session_id: sid, start_events: 1, end_events: 0, status: null, partial_text: '', incomplete: false,
    };
    this.journal.tx().mreq(mreq).session(sess).commit(false);
    this.emit('model_request_started', sid, { rid });
    this.fp('after_model_request_started', { session_id: sid, request_id: rid });
    // the conversation as the store has it now (another instance may have moved it on)
    const messages = this.conv(sid).slice();
    const tools = policy.visibleTools(this.session(sid));

    let text = '';
    const calls = [];
    let status = null;
    let error = null;
    try {
      const streamId = this.port.call('open_model_stream', { request: { request_id: rid, session_id: sid, messages, tools } });
      for (;;) {
        const chunk = this.port.call('next_chunk', { stream_id: streamId });
        if (chunk.kind === 'text') text += chunk.text || '';
        else if (chunk.kind === 'tool_call') { if (chunk.tool_call) calls.push(chunk.tool_call); }
        else if (chunk.kind === 'end') { status = 'completed'; break; }
        else if (chunk.kind === 'eof') { status = 'incomplete'; break; }
      }
    } catch (e) {
      if (!(e instanceof WorldError)) throw e;
      if (e.exception === 'ModelStreamCancelled') status = 'cancelled';
      else if (e.exception === 'ModelTransportError') status = 'failed';
      else throw e;
      error = e;
    }
    this.fp('after_model_stream_ended', { session_id: sid, request_id: rid });

    sess = this.session(sid);
    // an answer to a conversation another instance moved on meanwhile is dropped
    const gone = this.conv(sid).length !== messages.length;
    mreq.end_events = 1;
    mreq.status = status;
    mreq.partial_text = status === 'completed' ? '' : text;
    mreq.incomplete = status === 'incomplete';
    const tx = this.journal.tx().mreq(mreq);
    if (gone) {
      // nothing of it joins the conversation
    } else if (status === 'completed') {
      const msg = { role: 'assistant', content: text };
      if (calls.length) msg.tool_calls = calls.map((c) => ({ tool_call_id: c.tool_call_id, tool: c.tool, args: c.args }));
      tx.message(sid, msg);
    } else if (status === 'incomplete' && text) {
      tx.message(sid, { role: 'assistant', content: text, incomplete: true });
    }
    tx.commit(false);
    this.emit('model_request_ended', sid, { rid, data: { status } });

    if (status === 'failed' || status === 'cancelled') return { kind: 'failed', status, error, text };
    if (this.session(sid).cancelled) return { kind: 'cancelled_turn' };
    if (gone) return { kind: 'again' };
    if (status === 'incomplete') return { kind: 'incomplete', text };
    if (!calls.length) return { kind: 'final', text };
    return { kind: 'calls' };
  }

  // ---- the operation pipeline -----------------------------------------------------------

  processCall(sid, call, { newMessage = false } = {}) {
    const eid = executionId(sid, call.tool_call_id);
    let op = this.st.o.get(eid);
    if (!op) {
      if (this.session(sid).cancelled) {
        this.recordCancelled(sid, call);
        return 'stopped';
      }
      op = this.prepare(sid, call);
      if (op.has_result) return 'done'; // another instance carried it to its result meanwhile
      if (op.stage !== 'prepared') return this.advance(op, { newMessage });
      if (this.session(sid).cancelled) {
        this.refuse(op, 'cancellation', { started: false });
        return 'stopped';
      }
    } else if (op.has_result) {
      // delivered again (the model emitted the call again): answered again, never re-run
      this.answerAgain(op);
      return 'done';
    }
    return this.advance(op, { newMessage });
  }

  prepare(sid, call) {
    const sess = this.session(sid);
    const spec = this.spec(sess, call.tool);
    const eid = executionId(sid, call.tool_call_id);
    const tx = this.journal.tx();
    const op = {
      execution_id: eid,
      session_id: sid,
      tool_call_id: call.tool_call_id,
      tool: call.tool,
      args: call.args,
      args_digest: argsDigest(call.tool, call.args),
      permission_version: sess.permission_version,
      dedup_key: policy.dedupKey(spec, call.tool, call.args),
      permission: 'ask',
      decided_by: 'default_ask',
      decided: false,
      outcome: 'not_started',
      delivery: 'pending',
      execution_started: false,
      failure_kind: null,
      reason: '',
      reconciliation_required: false,
      classifier_outcome: null,
      result_digest: null,
      attempts: 0,
      stage: 'prepared',
      has_result: false,
      checkpointed: false,
      projected: false,
      prep_seq: 0,
      start_seq: null,
      risk_counted: false,
      wait_id: null,
    };
    op.prep_seq = tx.bump('seq');
    tx.op(op).commit(false);
    this.emit('operation_prepared', sid, { eid, data: { tool: call.tool, tool_call_id: call.tool_call_id } });
    this.fp('after_prepare', this.opContext(op));
    return op;
  }

  advance(op, { newMessage = false } = {}) {
    for (;;) {
      switch (op.stage) {
        case 'prepared': {
          const r = this.decide(op, { newMessage });
          if (r) return r;
          break;
        }
        case 'decided':
          if (op.permission === 'deny') { this.saveDenial(op); return 'done'; }
          if (op.permission === 'ask') return this.askOwner(op, { newMessage });
          return this.execute(op);
        case 'waiting': {
          const wait = this.pendingWaitOf(op);
          if (!wait) { op.stage = 'prepared'; break; } // withdrawn and not re-decided before a crash
          if (newMessage) { this.rejectByNewMessage(op, wait); return 'done'; }
          if (!wait.prompted) return this.showWait(op, wait);
          return 'waiting';
        }
        case 'escalate':
          return this.runEscalated(op);
        case 'started':
          // another instance recorded its start and has not saved its result: it holds the
          // call (L4.10); this turn comes back later
          return 'deferred';
        default:
          return 'done';
      }
    }
  }

  // The permission precedence of docs/lifecycle.md, with the repeat guard after the layers
  // that forbid a tool outright and before the explicit deny rules (GUESSES.md).
  decide(op, { newMessage = false, withdrawn = false } = {}) {
    const sess = this.session(op.session_id);
    const spec = this.spec(sess, op.tool);
    const th = this.thresholds(sess);
    const canAsk = sess.interactive && sess.owner_can_approve;
    const version = sess.permission_version;
    let permission = null;
    let by = null;
    let classifierOutcome = null;
    let classifierReason = '';
    let fallback = null;
    let reviewed = false;

    let layer = null;
    for (const r of sess.hard_constraints) if (policy.ruleMatches(r, op.tool, op.args)) { layer = 'hard_constraint'; break; }
    if (!layer && sess.capabilities.length && !sess.capabilities.includes(op.tool)) layer = 'capability';
    if (!layer && sess.mode === 'plan' && !(spec && spec.kind === 'read')) layer = 'plan_mode';
    if (!layer && this.budget(op.session_id, op.dedup_key, version) >= th.failure_repeat_limit) layer = 'repeat_guard';
    if (!layer && policy.hasRule(sess, 'deny', op.tool, op.args)) layer = 'explicit_deny';
    let boundVersion = version;
    if (layer) {
      permission = 'deny';
      by = layer;
      if (withdrawn && layer !== 'repeat_guard' && layer !== 'hard_constraint') {
        // a wait withdrawn because the rules changed before its prompt, now forbidden:
        // refused with revalidation, bound to the version the wait was asked under
        by = 'revalidation';
        boundVersion = op.permission_version;
      }
    } else if (policy.hasRule(sess, 'ask', op.tool, op.args)) {
      permission = canAsk ? 'ask' : 'deny';
      by = 'ask_rule';
    } else if (policy.hasRule(sess, 'allow', op.tool, op.args)) {
      permission = 'allow';
      by = 'exact_grant';
    } else if (sess.mode === 'auto') {
      const c = this.counter(op.session_id, version);
      if (canAsk && (c.consecutive >= th.consecutive_denials_max || c.cumulative >= th.cumulative_denials_max)) {
        permission = 'ask';
        by = 'default_ask';
        fallback = c.cumulative >= th.cumulative_denials_max ? 'cumulative' : 'consecutive';
      } else {
        reviewed = true;
        const verdict = this.review(op, sess);
        if (op.stage !== 'prepared') return null; // another instance decided it meanwhile
        classifierOutcome = verdict.outcome;
        classifierReason = verdict.reason || '';
        const now = this.session(op.session_id);
        if (now.cancelled) {
          permission = 'deny'; by = 'cancellation'; classifierOutcome = 'cancelled';
        } else if (now.permission_version !== version) {
          permission = 'deny'; by = 'revalidation'; // the verdict is void: rules changed during the review
        } else {
          permission = classifierOutcome === 'allow' ? 'allow' : 'deny';
          by = 'classifier';
        }
      }
    } else {
      permission = canAsk ? 'ask' : 'deny';
      by = canAsk ? 'default_ask' : 'default_deny';
    }

    op.permission = permission;
    op.decided_by = by;
    op.decided = true;
    op.classifier_outcome = classifierOutcome;
    op.fallback = fallback;
    op.stage = 'decided';
    op.permission_version = boundVersion; // the version the decision was taken under, void or not
    if (permission === 'deny') op.reason = this.denyReason(by, classifierOutcome, classifierReason);
    const tx = this.journal.tx().op(op);
    if (classifierOutcome === 'risk_deny' && by === 'classifier' && !op.risk_counted) {
      const c = clone(this.counter(op.session_id, version));
      c.consecutive += 1;
      c.cumulative += 1;
      tx.counter(c);
      op.risk_counted = true;
    } else if (permission === 'allow') {
      const c = clone(this.counter(op.session_id, version));
      if (c.consecutive !== 0) { c.consecutive = 0; tx.counter(c); }
    }
    tx.commit(false);
    if (reviewed) this.emit('classifier_reviewed', op.session_id, { eid: op.execution_id, data: { outcome: classifierOutcome } });
    this.emit('permission_decided', op.session_id, { eid: op.execution_id, data: { permission, decided_by: by } });
    this.fp('after_permission_decision', this.opContext(op));
    if (op.stage !== 'decided') return null; // another instance carried it on meanwhile

    if (this.session(op.session_id).cancelled && permission !== 'deny') {
      // a verdict the session was cancelled after is void; an ask is not put to anyone
      this.refuse(op, 'cancellation', { started: false });
      return 'stopped';
    }
    return null;
  }

  review(op, sess) {
    const th = this.thresholds(sess);
    const operation = canonical(op.args);
    if (codePointLength(operation) > th.classifier_input_chars_max) {
      return { outcome: 'no_verdict_oversize', reason: 'the operation is larger than the classifier accepts' };
    }
    const spec = this.spec(sess, op.tool);
    const request = {
      session_id: op.session_id,
      tool: op.tool,
      operation,
      trusted_cwd: sess.trusted_cwd,
      permission_scope: sess.permission_scope,
      user_requirements: sess.user_requirements,
    };
    if (policy.isBash(spec, op.tool) && typeof op.args.description === 'string') request.untrusted_description = op.args.description;
    const t0 = this.now();
    let verdict;
    try {
      verdict = this.port.call('review', { request });
    } catch (e) {
      if (!(e instanceof WorldError)) throw e;
      verdict = { outcome: 'service_error', reason: `the classifier failed: ${e.message}` };
    }
    const t1 = this.now();
    if (t1 - t0 > th.classifier_timeout_s) verdict = { outcome: 'timeout', reason: `the classifier answered after ${t1 - t0}s, past ${th.classifier_timeout_s}s` };
    this.fp('during_classifier_review', this.opContext(op));
    return verdict;
  }

  denyReason(by, classifierOutcome, classifierReason) {
    if (by === 'classifier') {
      const what = {
        risk_deny: 'the classifier judged the operation too risky',
        timeout: 'the classifier did not answer in time',
        service_error: 'the classifier failed',
        cancelled: 'the classifier review was cancelled',
        no_verdict_oversize: 'the operation is too large for the classifier',
      }[classifierOutcome] || `the classifier said ${classifierOutcome}`;
      return `denied: ${what}${classifierReason ? ` (${classifierReason})` : ''}`;
    }
    if (by === 'default_ask') return 'denied: the owner moved on with a new message instead of approving';
    return DENY_REASONS[by] || `denied (${by})`;
  }

  // ---- approvals -------------------------------------------------------------------------

  askOwner(op, { newMessage = false } = {}) {
    if (newMessage) {
      // a later call of the answer that asks while a new message settles the session: the
      // owner's "no" covers it too (docs/contract.md, "A new message answers no")
      op.permission = 'deny';
      op.decided_by = 'approval';
      op.reason = 'denied: the owner moved on with a new message instead of approving';
      this.saveDenial(op);
      return 'done';
    }
    const sess = this.session(op.session_id);
    if (sess.cancelled) { this.refuse(op, 'cancellation', { started: false }); return 'stopped'; }
    if (sess.permission_version !== op.permission_version) {
      // the rules changed between the decision and its wait: a wait is judged by the rules
      // in force when it is created (docs/lifecycle.md, L3.4), so the decision is void and
      // taken again; no wait is created for it
      op.stage = 'prepared';
      this.journal.tx().op(op).commit(false);
      return this.advance(op);
    }
    const n = Array.from(this.st.w.values()).filter((w) => w.execution_id === op.execution_id).length + 1;
    const wait = {
      wait_id: `w:${op.execution_id}:${n}`,
      session_id: op.session_id,
      execution_id: op.execution_id,
      tool_call_id: op.tool_call_id,
      reason: op.fallback
        ? `the classifier denied ${op.fallback === 'cumulative' ? 'too many operations' : 'several operations in a row'}: the owner decides this one`
        : (op.decided_by === 'ask_rule' ? 'an ask rule requires the owner\'s approval' : 'no rule covers this call: the owner decides'),
      status: 'pending',
      applied: false,
      prompted: false,
      permission_version: op.permission_version,
      fallback: op.fallback || null,
    };
    op.stage = 'waiting';
    op.wait_id = wait.wait_id;
    sess.turn_status = 'awaiting_approval';
    this.journal.tx().wait(wait).op(op).session(sess).commit(true);
    this.emit('approval_wait_created', op.session_id, { eid: op.execution_id, data: { wait_id: wait.wait_id } });
    this.fp('after_wait_persisted', this.opContext(op));
    return this.showWait(op, wait);
  }

  showWait(op, wait) {
    if (wait.status !== 'pending') return this.advance(op); // another instance answered it
    const sess = this.session(op.session_id);
    if (wait.purpose === 'escalation' && sess.permission_version !== wait.permission_version) {
      // rules changed before the escalation's prompt: withdrawn, the attempt's result stands
      wait.status = 'rejected';
      this.deliver(op, { wait });
      return 'done';
    }
    if (sess.permission_version !== wait.permission_version) {
      // the rules changed between the wait's commit and its prompt: withdraw it in the
      // transaction that puts the turn back to running, and decide the call again
      wait.status = 'rejected';
      op.stage = 'prepared';
      op.wait_id = null;
      sess.turn_status = 'running';
      this.journal.tx().wait(wait).op(op).session(sess).commit(true);
      const r = this.decide(op, { withdrawn: true });
      if (r) return r;
      return this.advance(op);
    }
    this.port.call('prompt_approval', {
      prompt: {
        wait_id: wait.wait_id,
        session_id: op.session_id,
        execution_id: op.execution_id,
        tool_call_id: op.tool_call_id,
        tool: op.tool,
        args: op.args,
        reason: wait.reason,
      },
    });
    wait.prompted = true;
    this.journal.tx().wait(wait).commit(false);
    this.fp('after_prompt', this.opContext(op));
    if (wait.status !== 'pending') return this.advance(op); // answered meanwhile
    return 'waiting';
  }

  rejectByNewMessage(op, wait) {
    wait.status = 'rejected';
    wait.applied = true;
    if (wait.purpose === 'escalation') {
      this.emit('approval_answered', op.session_id, { eid: op.execution_id, data: { wait_id: wait.wait_id, approved: false, by: 'new_message', purpose: 'escalation' } });
      this.deliver(op, { wait });
      return;
    }
    op.permission = 'deny';
    op.decided_by = 'approval';
    op.decided = true;
    op.stage = 'decided';
    op.wait_id = null;
    op.reason = 'denied: the owner moved on with a new message instead of approving';
    this.journal.tx().wait(wait).op(op).commit(true);
    this.emit('approval_answered', op.session_id, { eid: op.execution_id, data: { wait_id: wait.wait_id, approved: false, by: 'new_message' } });
    this.emit('permission_decided', op.session_id, { eid: op.execution_id, data: { permission: 'deny', decided_by: 'approval' } });
    this.saveDenial(op);
  }

  // ---- revalidation and execution -------------------------------------------------------

  // null when the allowed operation may start now; else the decision source refusing it.
  gate(op) {
    const sess = this.session(op.session_id);
    if (sess.cancelled) return 'cancellation';
    if (op.permission_version !== sess.permission_version) {
      const spec = this.spec(sess, op.tool);
      const layer = policy.denyLayer(sess, spec, op.tool, op.args);
      if (layer) return op.decided_by === 'approval' ? 'revalidation' : layer;
      if (!policy.hasRule(sess, 'ask', op.tool, op.args) && policy.hasRule(sess, 'allow', op.tool, op.args)) {
        op.permission_version = sess.permission_version; // an exact grant still allows, under the rules in force
        op.decided_by = 'exact_grant';
        this.journal.tx().op(op).commit(false);
        return null;
      }
      return 'revalidation';
    }
    if (argsDigest(op.tool, op.args) !== op.args_digest) return 'revalidation';
    const spec = this.spec(sess, op.tool);
    if (spec && spec.kind === 'file_edit' && Object.prototype.hasOwnProperty.call(op.args, 'expect_sha')) {
      const p = op.args.path;
      for (const other of this.st.o.values()) {
        if (other.execution_id === op.execution_id || other.start_seq === null || other.start_seq === undefined) continue;
        if (other.start_seq < op.prep_seq) continue;
        if (!other.args || other.args.path !== p) continue;
        const os = this.st.s.get(other.session_id);
        const ospec = os ? this.spec(os, other.tool) : null;
        if (ospec && ospec.kind === 'read') continue;
        return 'revalidation';
      }
    }
    return null;
  }

  // A refusal before the tool ran: decision and "not executed" result in one commit.
  refuse(op, by, { started }) {
    // The identity carries the version of the rules that decided_by names: a deny layer
    // refusing under the rules in force binds it to that version; a `revalidation` or
    // `cancellation` refusal voids the earlier decision and keeps its version (GUESSES.md).
    if (LAYERS.has(by)) op.permission_version = this.session(op.session_id).permission_version;
    op.permission = 'deny';
    op.decided_by = by;
    op.decided = true;
    op.reason = DENY_REASONS[by] || `denied (${by})`;
    this.emit('permission_decided', op.session_id, { eid: op.execution_id, data: { permission: 'deny', decided_by: by } });
    this.saveDenial(op, { started });
  }

  execute(op) {
    let by = this.gate(op);
    if (by) { this.refuse(op, by, { started: false }); return by === 'cancellation' ? 'stopped' : 'done'; }
    this.emit('revalidated', op.session_id, { eid: op.execution_id, data: { permission_version: op.permission_version } });
    this.fp('after_revalidation', this.opContext(op));
    if (op.stage !== 'decided') return this.advance(op); // another instance took it on
    by = this.gate(op);
    if (by) { this.refuse(op, by, { started: false }); return by === 'cancellation' ? 'stopped' : 'done'; }

    if (!this.journal.claim(op.execution_id, 1)) {
      this.journal.refresh();
      return op.has_result ? 'done' : 'deferred'; // another instance won the start
    }
    const tx = this.journal.tx();
    op.execution_started = true;
    op.stage = 'started';
    op.start_seq = tx.bump('seq');
    tx.op(op).commit(true);
    this.emit('execution_started', op.session_id, { eid: op.execution_id });
    this.fp('after_start_recorded', this.opContext(op));
    by = this.gate(op);
    if (by) { this.refuse(op, by, { started: true }); return by === 'cancellation' ? 'stopped' : 'done'; }

    const result = this.runTool(op, { sandboxed: true });
    this.fp('after_tool_returned', this.opContext(op));
    const asker = this.session(op.session_id);
    // an escalation asked while a new message settles the session is answered "no" by that
    // message (docs/contract.md, "A new message answers no"): the sandboxed result stands
    const ownerMovedOn = asker.pending_user_text !== null;
    if (result.escalation && asker.interactive && asker.owner_can_approve && !ownerMovedOn) return this.escalate(op, result);
    this.saveResult(op, result);
    this.fp('after_result_saved', this.opContext(op));
    this.afterResult(op, { failpoints: true });
    return 'done';
  }

  // ---- sandbox escalation -------------------------------------------------------------

  // The sandboxed attempt asked to run outside the sandbox. Its result is saved as the
  // operation's record (it ran: failed, permission_denied, execution_started true) in the
  // commit that persists an escalation wait of its own; the result stands unless the owner
  // approves that wait. Its tool message, result_saved event, checkpoint and projection
  // wait for the answer (the record is not final until then).
  escalate(op, result) {
    const sess = this.session(op.session_id);
    op.outcome = result.outcome;
    op.failure_kind = result.failure_kind;
    op.execution_started = true;
    op.result_digest = result.result_digest;
    op.reason = result.reason;
    op.reconciliation_required = false;
    op.delivery = 'recorded';
    op.output = result.output || '';
    op.provisional = true;
    op.sandboxed_result = {
      outcome: result.outcome, failure_kind: result.failure_kind, result_digest: result.result_digest,
      reason: result.reason, output: op.output, permission_version: op.permission_version,
      permission: op.permission, decided_by: op.decided_by,
    };
    op.stage = 'waiting';
    const n = Array.from(this.st.w.values()).filter((w) => w.execution_id === op.execution_id).length + 1;
    const wait = {
      wait_id: `w:${op.execution_id}:${n}`,
      session_id: op.session_id,
      execution_id: op.execution_id,
      tool_call_id: op.tool_call_id,
      reason: 'the sandboxed attempt asks to run once more outside the sandbox',
      status: 'pending',
      applied: false,
      prompted: false,
      permission_version: sess.permission_version,
      fallback: null,
      purpose: 'escalation',
    };
    op.wait_id = wait.wait_id;
    sess.turn_status = 'awaiting_approval';
    const tx = this.journal.tx();
    tx.bump('results_saved');
    this.account(op, tx); // the attempt ran and failed: a failure of the history and the table
    tx.wait(wait).op(op).session(sess).commit(true);
    this.emit('approval_wait_created', op.session_id, { eid: op.execution_id, data: { wait_id: wait.wait_id, purpose: 'escalation' } });
    this.fp('after_wait_persisted', this.opContext(op));
    return this.showWait(op, wait);
  }

  // The sandboxed result stands: it becomes final as it was saved (decision, version and
  // digest unchanged), reaches the model, is checkpointed and projected. No operation
  // failpoint: its record was saved with the escalation wait; this is its delivery only.
  deliver(op, { wait = null, failpoints = DELIVERY_FAILPOINTS } = {}) {
    const sess = this.session(op.session_id);
    const r = op.sandboxed_result;
    op.outcome = r.outcome;
    op.failure_kind = r.failure_kind;
    op.result_digest = r.result_digest;
    op.reason = r.reason;
    op.output = r.output;
    op.permission_version = r.permission_version;
    op.permission = r.permission;
    op.decided_by = r.decided_by;
    op.execution_started = true;
    op.reconciliation_required = false;
    op.delivery = 'recorded';
    op.provisional = false;
    op.has_result = true;
    op.stage = 'result';
    op.wait_id = null;
    if (sess.turn_status === 'awaiting_approval') sess.turn_status = 'running';
    const tx = this.journal.tx();
    if (wait) tx.wait(wait);
    tx.message(op.session_id, this.toolMessage(op, op.output));
    tx.op(op).session(sess).commit(true);
    this.emit('result_saved', op.session_id, { eid: op.execution_id, data: { outcome: op.outcome, failure_kind: op.failure_kind } });
    this.emit('operation_failed', op.session_id, { eid: op.execution_id, data: { failure_kind: op.failure_kind } });
    this.afterResult(op, { failpoints });
  }

  // null when the approved escalation may run now; else why not (the sandboxed result
  // then stands). The approval holds under the version its wait was asked under.
  gateEscalation(op) {
    const sess = this.session(op.session_id);
    if (sess.cancelled) return 'cancellation';
    if (op.escalation_version !== sess.permission_version) {
      const spec = this.spec(sess, op.tool);
      const layer = policy.denyLayer(sess, spec, op.tool, op.args);
      if (layer) return layer;
      if (!policy.hasRule(sess, 'ask', op.tool, op.args) && policy.hasRule(sess, 'allow', op.tool, op.args)) {
        op.escalation_version = sess.permission_version;
        // once the escalated run's start is recorded, the run is bound to it too
        if (op.stage === 'started') op.permission_version = op.escalation_version;
        this.journal.tx().op(op).commit(false);
        return null;
      }
      return 'revalidation';
    }
    return null;
  }

  runEscalated(op) {
    const refused = (by) => {
      this.emit('revalidated', op.session_id, { eid: op.execution_id, data: { passed: false, refused_by: by } });
      this.deliver(op);
      return by === 'cancellation' ? 'stopped' : 'done';
    };
    let by = this.gateEscalation(op);
    if (by) return refused(by);
    this.emit('revalidated', op.session_id, { eid: op.execution_id, data: { permission_version: op.escalation_version, escalation: true } });
    this.fp('after_revalidation', this.opContext(op));
    if (op.stage !== 'escalate') return this.advance(op);
    by = this.gateEscalation(op);
    if (by) return refused(by);
    if (!this.journal.claim(op.execution_id, 2)) {
      this.journal.refresh();
      return op.has_result ? 'done' : 'deferred';
    }
    const tx = this.journal.tx();
    op.stage = 'started';
    op.start_seq = tx.bump('seq');
    op.permission_version = op.escalation_version;
    tx.op(op).commit(true);
    this.emit('execution_started', op.session_id, { eid: op.execution_id, data: { sandboxed: false } });
    this.fp('after_start_recorded', this.opContext(op));
    by = this.gateEscalation(op);
    if (by) return refused(by);
    const result = this.runTool(op, { sandboxed: false });
    this.fp('after_tool_returned', this.opContext(op));
    this.saveResult(op, result);
    this.fp('after_result_saved', this.opContext(op));
    this.afterResult(op, { failpoints: true });
    return 'done';
  }

  runTool(op, { sandboxed }) {
    const sess = this.session(op.session_id);
    const spec = this.spec(sess, op.tool);
    const max = this.thresholds(sess).auto_retries_max;
    const idempotent = !!(spec && spec.idempotent);
    const invocation = {
      identity: { execution_id: op.execution_id, tool_call_id: op.tool_call_id, args_digest: op.args_digest, permission_version: op.permission_version },
      session_id: op.session_id,
      tool: op.tool,
      args: op.args,
      sandboxed,
    };
    let attempts = 0;
    let returned = null;
    for (;;) {
      attempts++;
      op.attempts = (op.attempts || 0) + 1;
      let res;
      try {
        res = this.port.call('execute_tool', { invocation });
      } catch (e) {
        if (!(e instanceof WorldError)) throw e;
        if (e.exception === 'ToolUnavailable') {
          if (attempts <= max) continue;
          if (returned) {
            return {
              outcome: 'failed', failure_kind: 'transient', execution_started: true,
              result_digest: resultDigest(returned.status, returned.output || ''),
              reason: `failed: a transient error (${returned.output || 'no output'}), then the host could not start the retries (${e.message})`,
              output: returned.output || '',
            };
          }
          return {
            outcome: 'not_started', failure_kind: 'transient', execution_started: false, result_digest: null,
            reason: `not executed: the host could not start the tool after ${attempts} attempt(s) (${e.message})`, output: '',
          };
        }
        return {
          outcome: 'unknown', failure_kind: 'unknown', execution_started: true, result_digest: null, reconciliation_required: true,
          reason: `unknown: the tool call raised ${e.exception} (${e.message}); it may have run: reconcile`, output: '',
        };
      }
      returned = res;
      const output = res.output || '';
      const digest = resultDigest(res.status, output);
      if (res.status === 'ok') {
        return { outcome: 'succeeded', failure_kind: null, execution_started: true, result_digest: digest, reason: '', output };
      }
      if (res.escalation_requested) {
        return {
          outcome: 'failed', failure_kind: 'permission_denied', execution_started: true, result_digest: digest, output,
          escalation: sandboxed,
          reason: sandboxed
            ? 'failed: the sandboxed attempt needs more permission than the sandbox gives; it ran partly'
            : 'failed: the attempt outside the sandbox still asked for more permission',
        };
      }
      const kind = res.error_kind || 'failed';
      if (kind === 'unknown') {
        return {
          outcome: 'unknown', failure_kind: 'unknown', execution_started: true, result_digest: digest, reconciliation_required: true, output,
          reason: 'unknown: the tool could not confirm its outcome; reconcile before trying again',
        };
      }
      if (kind === 'transient' && idempotent && attempts <= max) continue;
      return {
        outcome: 'failed', failure_kind: kind, execution_started: true, result_digest: digest, output,
        reason: `failed (${kind})${attempts > 1 ? ` after ${attempts} attempts` : ''}`,
      };
    }
  }

  toolMessage(op, output) {
    let content;
    if (op.outcome === 'succeeded') content = output;
    else if (op.outcome === 'failed') content = output ? `${output}\n${op.reason}` : op.reason;
    else content = op.reason;
    return { role: 'tool', tool_call_id: op.tool_call_id, content, outcome: op.outcome, failure_kind: op.failure_kind };
  }

  // The authoritative result record, its tool message and the failure accounting: one
  // durable commit.
  saveResult(op, r, { tx = null, emit = true } = {}) {
    const sess = this.session(op.session_id);
    op.outcome = r.outcome;
    op.failure_kind = r.failure_kind;
    op.execution_started = r.execution_started;
    op.result_digest = r.result_digest;
    op.reason = r.reason;
    op.reconciliation_required = !!r.reconciliation_required || r.outcome === 'unknown';
    op.delivery = 'recorded';
    op.has_result = true;
    op.provisional = false;
    op.stage = 'result';
    op.output = r.output || '';
    tx = tx || this.journal.tx();
    tx.bump('results_saved');
    this.account(op, tx);
    tx.message(op.session_id, this.toolMessage(op, op.output));
    tx.op(op).session(sess).commit(true);
    if (emit) {
      this.emit('result_saved', op.session_id, { eid: op.execution_id, data: { outcome: op.outcome, failure_kind: op.failure_kind } });
      if (op.outcome === 'failed') this.emit('operation_failed', op.session_id, { eid: op.execution_id, data: { failure_kind: op.failure_kind } });
      if (op.reconciliation_required) this.emit('reconciliation_required', op.session_id, { eid: op.execution_id });
    }
  }

  saveDenial(op, { started = false } = {}) {
    const cancelled = op.decided_by === 'cancellation';
    this.saveResult(op, {
      outcome: 'not_started',
      failure_kind: cancelled ? null : 'permission_denied',
      execution_started: false,
      result_digest: null,
      reason: op.reason || DENY_REASONS[op.decided_by] || 'denied',
      output: '',
    });
    void started;
    this.afterResult(op, { failpoints: false });
  }

  // Failure history, the 16-entry table and the repeat guard's budget.
  account(op, tx) {
    const sid = op.session_id;
    const bkey = this.budgetKey(sid, op.dedup_key, op.permission_version);
    if (op.outcome === 'succeeded') {
      if (this.st.b.get(bkey)) tx.budget(bkey, 0);
      return;
    }
    if (!op.failure_kind) return; // a cancellation is no failure
    tx.bump('failures_logged');
    const entries = (this.st.f.get(sid) || []).slice();
    const at = entries.findIndex((e) => e.dedup_key === op.dedup_key);
    let entry;
    if (at >= 0) {
      entry = Object.assign({}, entries[at]);
      entries.splice(at, 1);
      entry.count += 1;
    } else {
      entry = { session_id: sid, dedup_key: op.dedup_key, tool: op.tool, failure_kind: op.failure_kind, count: 1, last_execution_id: op.execution_id };
    }
    entry.failure_kind = op.failure_kind;
    entry.tool = op.tool;
    entry.last_execution_id = op.execution_id;
    entries.push(entry);
    while (entries.length > FAILURE_TABLE_CAPACITY) entries.shift();
    tx.failures(sid, entries);
    let counted = false;
    if (op.outcome === 'not_started') counted = op.failure_kind === 'permission_denied' && COUNTED_DENIALS.has(op.decided_by);
    else counted = COUNTED_FAILURE_KINDS.has(op.failure_kind);
    if (counted) tx.budget(bkey, (this.st.b.get(bkey) || 0) + 1);
  }

  answerAgain(op) {
    // the same call in a later answer: it gets its own tool message with the stored result
    this.journal.tx().message(op.session_id, this.toolMessage(op, op.output || '')).commit(false);
    this.afterResult(op, { failpoints: false });
  }

  // Checkpoint and projection after a saved result (docs/lifecycle.md's last three rows).
  afterResult(op, { failpoints }) {
    const ctx = this.opContext(op);
    if (failpoints) this.fp('during_diagnostics_write', ctx);
    if (!op.checkpointed) {
      let built = true;
      if (failpoints && this.fp('during_checkpoint_build', ctx, { reportFault: false })) {
        built = false;
        this.emit('checkpoint_failed', op.session_id, { eid: op.execution_id, data: { message: 'the checkpoint build failed; the result stays saved' } });
      }
      if (built) {
        this.saveCheckpoint(op.session_id, op.execution_id);
        if (failpoints) this.fp('after_checkpoint_saved', ctx);
      }
    }
    if (!op.projected) {
      this.project(op);
      if (failpoints) this.fp('after_projection', ctx);
    }
  }

  // A checkpoint folds every saved result of the session so far.
  saveCheckpoint(sid, lastEid) {
    const folded = [];
    for (const o of this.st.o.values()) if (o.session_id === sid && o.has_result && !o.checkpointed) folded.push(o);
    const failures = this.st.f.get(sid) || [];
    const content = canonical({ format_version: CHECKPOINT_FORMAT, messages: this.conv(sid), failure_table: failures });
    const seq = this.st.checkpoints.filter((c) => c.session_id === sid).length + 1;
    const cp = {
      session_id: sid,
      format_version: CHECKPOINT_FORMAT,
      sequence: seq,
      failure_entries: failures.length,
      size_bytes: Buffer.byteLength(content, 'utf8'),
      last_execution_id: lastEid,
      digest: 'sha256:' + sha256hex(content),
    };
    const tx = this.journal.tx().checkpoint(cp);
    for (const o of folded) { o.checkpointed = true; tx.op(o); }
    tx.commit(false);
    this.emit('checkpoint_saved', sid, { eid: lastEid, data: { sequence: seq } });
    return folded.map((o) => o.execution_id);
  }

  project(op) {
    const [status, actions] = policy.expectedProjection(op, false);
    const projection = {
      session_id: op.session_id,
      execution_id: op.execution_id,
      tool_call_id: op.tool_call_id,
      permission: op.permission,
      outcome: op.outcome,
      status,
      reason: op.reason || '',
      recovery_actions: actions,
    };
    this.port.call('publish', { projection });
    op.projected = true;
    op.delivery = 'projected';
    this.journal.tx().projection(projection).op(op).commit(false);
    this.emit('projected', op.session_id, { eid: op.execution_id, data: { status } });
  }

  // ---- cancellation ---------------------------------------------------------------------

  // A call of a cancelled session that was never prepared: recorded not executed at once.
  recordCancelled(sid, call) {
    const sess = this.session(sid);
    const spec = this.spec(sess, call.tool);
    const eid = executionId(sid, call.tool_call_id);
    const tx = this.journal.tx();
    const op = {
      execution_id: eid, session_id: sid, tool_call_id: call.tool_call_id, tool: call.tool, args: call.args,
      args_digest: argsDigest(call.tool, call.args), permission_version: sess.permission_version,
      dedup_key: policy.dedupKey(spec, call.tool, call.args), permission: 'deny', decided_by: 'cancellation', decided: true,
      outcome: 'not_started', delivery: 'pending', execution_started: false, failure_kind: null, reason: DENY_REASONS.cancellation,
      reconciliation_required: false, classifier_outcome: null, result_digest: null, attempts: 0, stage: 'decided',
      has_result: false, checkpointed: false, projected: false, prep_seq: 0, start_seq: null, risk_counted: false, wait_id: null,
    };
    op.prep_seq = tx.bump('seq');
    tx.op(op).commit(false);
    this.emit('operation_prepared', sid, { eid, data: { tool: call.tool, tool_call_id: call.tool_call_id } });
    this.emit('permission_decided', sid, { eid, data: { permission: 'deny', decided_by: 'cancellation' } });
    this.saveDenial(op);
  }

  // Every call still pending in a cancelled session's conversation is recorded not
  // executed, except one whose approval wait is pending (it stays answerable).
  settleCancelled(sid, { newMessage = false } = {}) {
    for (const call of this.pendingCalls(sid)) {
      const eid = executionId(sid, call.tool_call_id);
      const op = this.st.o.get(eid);
      if (!op) { this.recordCancelled(sid, call); continue; }
      if (op.has_result) { this.answerAgain(op); continue; }
      const wait = op.stage === 'waiting' ? this.pendingWaitOf(op) : null;
      if (wait && newMessage) { this.rejectByNewMessage(op, wait); continue; }
      if (wait) return; // later calls stay behind it
      if (op.stage === 'started') return;
      if (op.provisional) { this.deliver(op); continue; }
      this.refuse(op, 'cancellation', { started: false });
    }
  }

  // ---- recovery -------------------------------------------------------------------------

  recover() {
    const lists = new Map();
    const of = (sid) => {
      let l = lists.get(sid);
      if (!l) { l = { results_completed: [], projections_replayed: [], reconciliation_required: [], turns_resumed: [] }; lists.set(sid, l); }
      return l;
    };
    for (const sid of this.st.s.keys()) of(sid);

    // model requests a crash left without an end
    for (const r of this.st.r.values()) {
      if (r.end_events > 0) continue;
      r.end_events = 1;
      r.status = 'incomplete';
      r.incomplete = true;
      this.journal.tx().mreq(r).commit(true);
      this.emit('model_request_ended', r.session_id, { rid: r.request_id, data: { status: 'incomplete', by: 'recovery' } });
    }

    // started, no result: unknown, never re-executed
    for (const op of Array.from(this.st.o.values())) {
      if (op.stage !== 'started' || op.has_result) continue;
      this.saveResult(op, {
        outcome: 'unknown', failure_kind: 'unknown', execution_started: true, result_digest: null, reconciliation_required: true,
        reason: 'unknown: the runtime stopped after the start was recorded and before the result was saved; reconcile, it is never run again',
        output: '',
      });
      of(op.session_id).reconciliation_required.push(op.execution_id);
    }

    // results saved and not folded: a new checkpoint; checkpointed and not projected: replay
    for (const sid of this.st.s.keys()) {
      const unfolded = Array.from(this.st.o.values()).filter((o) => o.session_id === sid && o.has_result && !o.checkpointed);
      const replay = Array.from(this.st.o.values()).filter((o) => o.session_id === sid && o.has_result && o.checkpointed && !o.projected);
      if (unfolded.length) {
        this.saveCheckpoint(sid, unfolded[unfolded.length - 1].execution_id);
        for (const o of unfolded) {
          if (!of(sid).reconciliation_required.includes(o.execution_id)) of(sid).results_completed.push(o.execution_id);
        }
      }
      for (const o of unfolded) if (!o.projected) this.project(o);
      for (const o of replay) { this.project(o); of(sid).projections_replayed.push(o.execution_id); }
    }

    // cancelled sessions, running turns, waits committed and never shown
    for (const sid of Array.from(this.st.s.keys())) {
      const sess = this.session(sid);
      const unshown = Array.from(this.st.w.values()).some((w) => w.session_id === sid && w.status === 'pending' && !w.prompted);
      const running = sess.turn_status === 'running' || sess.turn_status === 'deferred';
      if (!running && !unshown && !sess.cancelled) continue;
      if (!running && !unshown && sess.cancelled) {
        if (this.pendingCalls(sid).length) this.settleCancelled(sid);
        continue;
      }
      this.resumedWithRequest = false;
      try {
        this.drive(sid, { inRecovery: true });
      } catch (e) {
        if (!(e instanceof WorldError)) throw e;
        process.stderr.write(`[node_runtime] recovery of ${sid}: the resumed turn ended with ${e.exception}: ${e.message}\n`);
      }
      if (running || this.resumedWithRequest) of(sid).turns_resumed.push(sid);
    }

    const report = { results_completed: [], projections_replayed: [], reconciliation_required: [], turns_resumed: [] };
    for (const [sid, l] of lists) {
      for (const k of Object.keys(report)) report[k].push(...l[k]);
      this.emit('recovered', sid, { data: Object.assign({ reconciliation_required: l.reconciliation_required }, l) });
    }
    return report;
  }
}

// ---- inspect: the durable store as the harness reads it ---------------------------------

// Each row part of the Observation and the journal tables it is built from (a part whose
// tables did not change since the last reading is unchanged: `inspect_parts`).
const PART_SOURCES = {
  sessions: ['s'],
  operations: ['o', 'w'],
  approval_waits: ['w'],
  denial_counters: ['k'],
  failure_table: ['f'],
  checkpoints: ['c'],
  projections: ['p'],
  model_requests: ['r'],
};

const PART_BUILDERS = {
  sessions(state) {
    const sessions = [];
    for (const s of state.s.values()) {
      sessions.push({ session_id: s.session_id, turn_status: s.turn_status, permission_version: s.permission_version, mode: s.mode, interactive: s.interactive });
    }
    return sessions;
  },
  operations(state) {
    const operations = [];
    for (const o of state.o.values()) {
      const w = o.wait_id ? state.w.get(o.wait_id) : null;
      const waitPending = !!(w && w.status === 'pending');
      const [, actions] = waitPending ? ['awaiting_approval', ['approve', 'reject']] : policy.expectedProjection(o, false);
      operations.push({
        session_id: o.session_id,
        identity: { execution_id: o.execution_id, tool_call_id: o.tool_call_id, args_digest: o.args_digest, permission_version: o.permission_version },
        tool: o.tool,
        args: o.args,
        dedup_key: o.dedup_key,
        permission: o.permission,
        decided_by: o.decided_by,
        outcome: o.outcome,
        delivery: o.delivery,
        execution_started: o.execution_started,
        failure_kind: o.failure_kind,
        reason: o.reason || '',
        recovery_actions: actions,
        reconciliation_required: !!o.reconciliation_required,
        classifier_outcome: o.classifier_outcome,
        result_digest: o.result_digest,
        attempts: o.attempts || 0,
      });
    }
    return operations;
  },
  approval_waits(state) {
    const waits = [];
    for (const w of state.w.values()) {
      waits.push({ wait_id: w.wait_id, session_id: w.session_id, execution_id: w.execution_id, tool_call_id: w.tool_call_id, reason: w.reason, status: w.status, applied: w.applied });
    }
    return waits;
  },
  denial_counters(state) {
    return Array.from(state.k.values()).map((c) => ({ session_id: c.session_id, permission_version: c.permission_version, consecutive: c.consecutive, cumulative: c.cumulative }));
  },
  failure_table(state) {
    const table = [];
    for (const entries of state.f.values()) for (const e of entries) table.push(e);
    return table;
  },
  checkpoints(state) {
    return state.checkpoints.map((c) => ({
      session_id: c.session_id, format_version: c.format_version, sequence: c.sequence, failure_entries: c.failure_entries, size_bytes: c.size_bytes, last_execution_id: c.last_execution_id,
    }));
  },
  projections(state) { return Array.from(state.p.values()); },
  model_requests(state) {
    return Array.from(state.r.values()).map((r) => ({
      request_id: r.request_id, session_id: r.session_id, start_events: r.start_events, end_events: r.end_events, status: r.status, partial_text: r.partial_text, incomplete: r.incomplete,
    }));
  },
};

// The parts named (all by default) and the store's two counts.
function observation(state, parts = Object.keys(PART_BUILDERS)) {
  const out = {};
  for (const name of parts) out[name] = PART_BUILDERS[name](state);
  out.failure_events_logged = state.x.failures_logged || 0;
  out.result_records = resultRecords(state);
  return out;
}

// Operations whose result record is saved (one record each, superseded in place by an
// escalated run's).
function resultRecords(state) {
  let n = 0;
  for (const o of state.o.values()) if (o.has_result || o.provisional) n++;
  return n;
}

module.exports = { Runtime, observation, resultRecords, PART_SOURCES, DEFAULT_THRESHOLDS };
