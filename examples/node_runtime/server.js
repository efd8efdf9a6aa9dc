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
const { Runtime, observation } = require('./runtime');

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

function readObservation(dataDir) {
  const r = reader(dataDir);
  const changed = r.refresh();
  if (!r.view) r.view = observation(r.state);
  return { changed, view: r.view, token: r.token() };
}

let endpoint = null;

const handlers = {
  initialize(p) {
    if (p.protocol_version !== 1) throw new RpcError(-32001, `protocol version ${p.protocol_version} is not spoken here (only 1)`);
    if (p.contract_version !== undefined && p.contract_version !== 1) throw new RpcError(-32001, `contract version ${p.contract_version} is not implemented here (only 1)`);
    initialized = true;
    return { protocol_version: 1, info: INFO, inspect_since: true };
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
    const o = readObservation(p.data_dir);
    lastToken.set(p.data_dir, o.token);
    return o.view;
  },
  inspect_since(p) {
    needInit();
    const o = readObservation(p.data_dir);
    const unchanged = p.since !== '' && p.since === lastToken.get(p.data_dir) && p.since === o.token && !o.changed;
    lastToken.set(p.data_dir, o.token);
    return { reading: o.token, observation: unchanged ? null : o.view };
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
