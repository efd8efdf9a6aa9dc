#!/usr/bin/env node
'use strict';
// A lifecycle runtime for lifecycle-harness's out-of-process protocol (docs/protocol.md),
// written from docs/ and fixtures/protocol.schema.json alone, in Node.js with the standard
// library only. One process is one runtime instance (or the inspector):
//
//   lifecycle-harness run --impl "process:node examples/node_runtime/server.js"
//
// stdout carries protocol messages only: console output is sent to stderr.

const { Endpoint, RpcError } = require('./rpc');
const { Journal, Reader } = require('./journal');
const { Runtime, observation, resultRecords, PART_SOURCES } = require('./runtime');

for (const name of ['log', 'info', 'warn', 'debug']) {
  console[name] = (...args) => process.stderr.write(args.map(String).join(' ') + '\n');
}

const INFO = {
  name: 'node-journal-runtime',
  version: '0.1.0',
  // the core, plus web_projection (it publishes every projection), sandbox_escalation and
  // multi_instance (several live instances append to one journal)
  features: ['approvals', 'auto_mode', 'model_events', 'plan_mode', 'web_projection', 'sandbox_escalation', 'multi_instance'],
  checkpoint_fixtures: [],
};

let initialized = false;
let runtime = null;
let journal = null;
const readers = new Map(); // data dir -> Reader (inspector)
const lastToken = new Map(); // data dir -> the reading token answered last

function needInit() {
  if (!initialized) throw new RpcError(-32002, 'initialize first');
}

function needRuntime() {
  needInit();
  if (!runtime) throw new RpcError(-32002, 'no runtime open: send open {data_dir} first');
  // another live instance may have written since this one last read: every driver call
  // starts from the store as it is now
  runtime.journal.refresh();
  return runtime;
}

function reader(dataDir) {
  let r = readers.get(dataDir);
  if (!r) { r = new Reader(dataDir); readers.set(dataDir, r); }
  return r;
}

const PARTS = Object.keys(PART_SOURCES);

// Reads the store and answers with the parts that changed since the reading `since` when
// that is the token this process answered last for the data dir (inspect_since and
// inspect_parts), else with all of them.
function read(dataDir, since) {
  const r = reader(dataDir);
  r.refresh();
  const token = r.token();
  const continues = since !== undefined && since !== '' && since === lastToken.get(dataDir);
  lastToken.set(dataDir, token);
  const st = r.state;
  if (!r.parts) r.parts = {};
  const changed = PARTS.filter((name) => !(name in r.parts) || PART_SOURCES[name].some((t) => st.dirty.has(t)));
  for (const name of changed) r.parts[name] = observation(st, [name])[name];
  st.dirty.clear();
  return { token, identical: continues && since === token, changed, continues, parts: r.parts, state: st };
}

function whole(o) {
  const view = {};
  for (const name of PARTS) view[name] = o.parts[name];
  view.failure_events_logged = o.state.x.failures_logged || 0;
  view.result_records = resultRecords(o.state);
  return view;
}

let endpoint = null;

const handlers = {
  initialize(p) {
    if (p.protocol_version !== 1) throw new RpcError(-32001, `protocol version ${p.protocol_version} is not spoken here (only 1)`);
    if (p.contract_version !== undefined && p.contract_version !== 1) throw new RpcError(-32001, `contract version ${p.contract_version} is not implemented here (only 1)`);
    initialized = true;
    return { protocol_version: 1, info: INFO, inspect_since: true, inspect_parts: true };
  },
  open(p) {
    needInit();
    if (runtime) throw new RpcError(-32002, 'a runtime is already open in this process');
    journal = new Journal(p.data_dir);
    runtime = new Runtime(journal, endpoint);
    return null;
  },
  open_session(p) { return needRuntime().openSession(p.config); },
  run_turn(p) { return needRuntime().runTurn(p.session_id, p.user_text); },
  answer_approval(p) { return needRuntime().answerApproval(p.wait_id, p.approve); },
  update_rules(p) { return needRuntime().updateRules(p.session_id, p.rules, p.permission_version); },
  cancel(p) { return needRuntime().cancel(p.session_id); },
  recover() { return needRuntime().recover(); },
  load_checkpoint() {
    needRuntime();
    throw new Error('checkpoint_import is not offered: this runtime never shipped an earlier checkpoint format');
  },
  close() {
    needRuntime().close();
    journal.close();
    return null;
  },
  inspect(p) {
    needInit();
    return whole(read(p.data_dir));
  },
  inspect_since(p) {
    needInit();
    const o = read(p.data_dir, p.since);
    return { reading: o.token, observation: o.identical ? null : whole(o) };
  },
  inspect_parts(p) {
    needInit();
    const o = read(p.data_dir, p.since);
    if (o.identical) return { reading: o.token, observation: null, unchanged: [] };
    if (!o.continues) return { reading: o.token, observation: whole(o), unchanged: [] };
    const view = {};
    for (const name of o.changed) view[name] = o.parts[name];
    view.failure_events_logged = o.state.x.failures_logged || 0;
    view.result_records = resultRecords(o.state);
    return { reading: o.token, observation: view, unchanged: PARTS.filter((name) => !o.changed.includes(name)) };
  },
  shutdown() {
    endpoint.write({ jsonrpc: '2.0', id: handlers.shutdownId, result: null });
    process.exit(0);
  },
};

endpoint = new Endpoint(handlers);
// shutdown answers before exiting: remember its id
const serve = endpoint.serve.bind(endpoint);
endpoint.serve = (msg) => {
  if (msg.method === 'shutdown') handlers.shutdownId = msg.id;
  return serve(msg);
};

endpoint.run();
process.exit(0);
