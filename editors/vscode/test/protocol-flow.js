#!/usr/bin/env node
// @ts-check
//
// Drive `frognano serve` the way the VS Code extension does, at the protocol level (VS Code
// itself cannot run here): initialize with the `frognano` settings, open and save the buggy
// file, wait for the failing test's Error diagnostic, ask for code actions on it, run
// "Fix with FrogNano" (frognano.fix) when no verified fix is offered yet, wait for the
// verified-fix action (data.frognano === "verifiedFix"), apply its versioned WorkspaceEdit to the files on disk the way
// VS Code would (didOpen/didChange/didSave), and wait for the Error diagnostics to clear.
//
// With --slow-fix (a project whose fix takes minutes): after the Error diagnostic, run "Fix with
// FrogNano" and time its answer (the started job), wait for the job's $/progress begin and a
// report with a percentage (on the token the server created with window/workDoneProgress/create),
// run it again (it joins the job), cancel the progress as VS Code's Cancel button does
// (window/workDoneProgress/cancel), wait for the job's frognano/result and progress end, and
// shut down.
//
//   node test/protocol-flow.js PROJECT [--file REL] [--server EXE] [--timeout-diagnostics S]
//        [--timeout-fix S] [--timeout-clear S] [--setting key=json]... [--log FILE] [--slow-fix]
//
// Exit 0 with a JSON summary on stdout; exit 1 with one clear "protocol-flow: ..." line (and the
// summary so far, and the tail of the server's stderr) on any failure or timeout.

'use strict';

const cp = require('child_process');
const fs = require('fs');
const path = require('path');
const { pathToFileURL, fileURLToPath } = require('url');
const {
  createProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
} = require('vscode-languageserver-protocol/node');

// ---------------------------------------------------------------- arguments

function usage(message) {
  process.stderr.write(`protocol-flow: ${message}\n`);
  process.stderr.write(
    'usage: node test/protocol-flow.js PROJECT [--file REL] [--server EXE] [--timeout-diagnostics S] ' +
      '[--timeout-fix S] [--timeout-clear S] [--setting key=json]... [--log FILE] [--slow-fix]\n',
  );
  process.exit(2);
}

function parseArgs(argv) {
  /** @type {{project?: string, file?: string, server?: string, log?: string, slowFix: boolean, timeouts: Record<string, number>, settings: Record<string, unknown>}} */
  const opts = { timeouts: { diagnostics: 120, fix: 300, clear: 120 }, settings: {}, slowFix: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) usage(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--file') opts.file = value();
    else if (arg === '--server') opts.server = value();
    else if (arg === '--log') opts.log = value();
    else if (arg === '--slow-fix') opts.slowFix = true;
    else if (arg.startsWith('--timeout-')) {
      const name = arg.slice('--timeout-'.length);
      if (!(name in opts.timeouts)) usage(`unknown option ${arg}`);
      const seconds = Number(value());
      if (!(seconds > 0)) usage(`${arg} must be a positive number of seconds`);
      opts.timeouts[name] = seconds;
    } else if (arg === '--setting') {
      const text = value();
      const eq = text.indexOf('=');
      if (eq < 1) usage(`--setting wants key=json, got ${text}`);
      const raw = text.slice(eq + 1);
      let parsed;
      try {
        parsed = JSON.parse(raw);
      } catch {
        parsed = raw;
      }
      opts.settings[text.slice(0, eq)] = parsed;
    } else if (arg === '-h' || arg === '--help') usage('help');
    else if (arg.startsWith('-')) usage(`unknown option ${arg}`);
    else if (!opts.project) opts.project = arg;
    else usage(`unexpected argument ${arg}`);
  }
  if (!opts.project) usage('PROJECT is required');
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
const root = path.resolve(/** @type {string} */ (opts.project));
if (!fs.statSync(root, { throwIfNoEntry: false })?.isDirectory()) usage(`${root} is not a directory`);

/** `frognano` from --server, $FROGNANO_SERVER, the project's .venv, else PATH. */
function serverCommand() {
  if (opts.server) return opts.server;
  if (process.env.FROGNANO_SERVER) return process.env.FROGNANO_SERVER;
  const venv = path.join(root, '.venv', 'bin', 'frognano');
  return fs.existsSync(venv) ? venv : 'frognano';
}

/** The buggy file: --file, else the first .py file outside tests (what a user would have open). */
function buggyFile() {
  if (opts.file) return path.resolve(root, opts.file);
  const skip = new Set(['.venv', 'venv', '.git', 'node_modules', '__pycache__', 'tests', 'test', '.frognano']);
  /** @param {string} dir @returns {string | undefined} */
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      if (entry.isDirectory() && !skip.has(entry.name) && !entry.name.startsWith('.')) {
        const found = walk(path.join(dir, entry.name));
        if (found) return found;
      } else if (entry.isFile() && entry.name.endsWith('.py') && !entry.name.startsWith('test_') && entry.name !== 'conftest.py' && entry.name !== '__init__.py') {
        return path.join(dir, entry.name);
      }
    }
    return undefined;
  };
  const found = walk(root);
  if (!found) usage(`no Python file outside tests under ${root}; pass --file`);
  return /** @type {string} */ (found);
}

// ---------------------------------------------------------------- state and summary

const started = Date.now();
const elapsed = () => Math.round((Date.now() - started) / 100) / 10;
const uriOf = (/** @type {string} */ file) => pathToFileURL(file).href;
const rel = (/** @type {string} */ uri) => {
  try {
    return path.relative(root, fileURLToPath(uri)) || '.';
  } catch {
    return uri;
  }
};

const summary = {
  ok: false,
  project: root,
  server: serverCommand(),
  phase: 'spawn',
  timings: /** @type {Record<string, number>} */ ({}),
  serverInfo: /** @type {unknown} */ (null),
  initialDiagnostics: /** @type {unknown[]} */ ([]),
  actionsOffered: /** @type {string[]} */ ([]),
  fixCommand: /** @type {any} */ (null),
  slowFix: /** @type {any} */ (null),
  fix: /** @type {any} */ (null),
  finalDiagnostics: /** @type {unknown[]} */ ([]),
  statuses: /** @type {unknown[]} */ ([]),
  progress: /** @type {any[]} */ ([]),
  /** Tokens the server created (window/workDoneProgress/create), in order. */
  progressCreated: /** @type {unknown[]} */ ([]),
  /** frognano/result notifications: a started command's outcome. */
  results: /** @type {any[]} */ ([]),
  messages: /** @type {string[]} */ ([]),
  configurationRequests: 0,
};

const settings = { autoFix: 'off', debounceMs: 50, ...opts.settings };

/** @type {Map<string, any[]>} uri -> diagnostics last published */
const diagnostics = new Map();
/** @type {Map<string, {version: number, text: string}>} open documents */
const open = new Map();
/** Waiters re-checked on every server message that may change the picture. */
/** @type {Set<() => void>} */
const waiters = new Set();
const poke = () => waiters.forEach((w) => w());

let stderrTail = '';
const logStream = opts.log ? fs.createWriteStream(opts.log) : undefined;

let serverExit = /** @type {null | {code: number | null, signal: string | null}} */ (null);

/** Exit 1 with one clear line; the summary so far and the server's stderr go to stderr. */
function fail(message) {
  summary.ok = false;
  process.stderr.write(`protocol-flow: FAILED in phase "${summary.phase}" after ${elapsed()}s: ${message}\n`);
  process.stderr.write(`protocol-flow: summary so far: ${JSON.stringify(summary, null, 2)}\n`);
  if (stderrTail) process.stderr.write(`protocol-flow: server stderr (tail):\n${stderrTail.slice(-6000)}\n`);
  try {
    child.kill('SIGKILL');
  } catch {
    // already gone
  }
  process.exit(1);
}

/**
 * Resolve when `check()` returns something truthy (checked now and on every server message),
 * fail with `what` after `seconds`.
 * @template T
 * @param {string} what
 * @param {number} seconds
 * @param {() => T | undefined | null | false} check
 * @returns {Promise<T>}
 */
function waitFor(what, seconds, check) {
  return new Promise((resolve) => {
    const tick = () => {
      if (serverExit) fail(`the server exited (code ${serverExit.code}, signal ${serverExit.signal}) while waiting for ${what}`);
      const value = check();
      if (value) {
        waiters.delete(tick);
        clearTimeout(timer);
        resolve(value);
      }
    };
    const timer = setTimeout(() => {
      waiters.delete(tick);
      const last = summary.statuses[summary.statuses.length - 1];
      fail(`timed out after ${seconds}s waiting for ${what} (last frognano/status: ${JSON.stringify(last ?? null)}; diagnostics: ${JSON.stringify(diagnosticCounts())})`);
    }, seconds * 1000);
    waiters.add(tick);
    tick();
  });
}

/** A request that fails the run on error or after `seconds`. */
async function request(method, params, seconds = 60) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer to ${method} within ${seconds}s`)), seconds * 1000);
  });
  try {
    return await Promise.race([connection.sendRequest(method, params), timeout]);
  } catch (error) {
    fail(`${method} failed: ${error instanceof Error ? error.message : JSON.stringify(error)}`);
  } finally {
    clearTimeout(timer);
  }
}

/** frognano's diagnostics with this severity (0: all) in every file, as {uri, diagnostic}. */
const frognanoDiagnostics = (severity = 0) =>
  [...diagnostics.entries()].flatMap(([uri, list]) =>
    list.filter((d) => d.source === 'frognano' && (!severity || d.severity === severity)).map((d) => ({ uri, diagnostic: d })),
  );

function diagnosticCounts() {
  /** @type {Record<string, Record<string, number>>} */
  const counts = {};
  for (const [uri, list] of diagnostics) {
    for (const d of list) {
      const name = ['?', 'error', 'warning', 'information', 'hint'][d.severity ?? 0] ?? String(d.severity);
      counts[rel(uri)] ??= {};
      counts[rel(uri)][name] = (counts[rel(uri)][name] ?? 0) + 1;
    }
  }
  return counts;
}

const describe = (/** @type {{uri: string, diagnostic: any}} */ { uri, diagnostic: d }) => ({
  file: rel(uri),
  line: d.range.start.line + 1,
  severity: d.severity,
  code: d.code ?? null,
  message: String(d.message).split('\n')[0].slice(0, 200),
});

// ---------------------------------------------------------------- the server process

const child = cp.spawn(summary.server, ['serve', '-v'], {
  cwd: root,
  env: process.env,
  stdio: ['pipe', 'pipe', 'pipe'],
});
child.on('error', (error) => fail(`cannot start ${summary.server}: ${error.message}`));
child.on('exit', (code, signal) => {
  serverExit = { code, signal };
  if (summary.phase !== 'exit') {
    fail(`the server exited unexpectedly (code ${code}, signal ${signal})`);
  }
});
child.stderr.on('data', (chunk) => {
  stderrTail = (stderrTail + chunk.toString()).slice(-20000);
  logStream?.write(chunk);
});

const connection = createProtocolConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
connection.onError(([error]) => fail(`protocol error: ${error.message}`));

// ---------------------------------------------------------------- server -> client

connection.onNotification('textDocument/publishDiagnostics', (params) => {
  diagnostics.set(params.uri, params.diagnostics);
  poke();
});
connection.onNotification('frognano/status', (params) => {
  summary.statuses.push({ t: elapsed(), ...params });
  poke();
});
connection.onNotification('$/progress', (params) => {
  const value = params.value ?? {};
  summary.progress.push({ t: elapsed(), token: params.token, kind: value.kind, title: value.title, message: value.message, percentage: value.percentage });
  poke();
});
connection.onNotification('frognano/result', (params) => {
  summary.results.push({ t: elapsed(), ...params });
  poke();
});
connection.onNotification('window/logMessage', (params) => logStream?.write(`[logMessage ${params.type}] ${params.message}\n`));
connection.onNotification('window/showMessage', (params) => {
  summary.messages.push(`[${params.type}] ${params.message}`);
  poke();
});
connection.onNotification('telemetry/event', () => undefined);

connection.onRequest('workspace/configuration', (params) => {
  summary.configurationRequests++;
  return params.items.map((item) => {
    if (item.section === 'frognano') return settings;
    if (item.section?.startsWith('frognano.')) return settings[item.section.slice('frognano.'.length)] ?? null;
    return null;
  });
});
connection.onRequest('window/workDoneProgress/create', (params) => {
  summary.progressCreated.push(params.token);
  return null;
});
connection.onRequest('client/registerCapability', () => null);
connection.onRequest('client/unregisterCapability', () => null);
connection.onRequest('workspace/workspaceFolders', () => [{ uri: uriOf(root), name: path.basename(root) }]);
connection.onRequest('window/showMessageRequest', (params) => {
  summary.messages.push(`[request ${params.type}] ${params.message}`);
  return null;
});
connection.onRequest('window/showDocument', () => ({ success: true }));
connection.onRequest('workspace/applyEdit', (params) => {
  // The server applying an edit itself (autoFix "apply", or frognano.applyFix).
  const result = applyWorkspaceEdit(params.edit, true);
  summary.fix = { appliedBy: 'workspace/applyEdit', label: params.label ?? null, ...result };
  poke();
  return result.applied ? { applied: true } : { applied: false, failureReason: result.failureReason };
});
// Anything else the server asks is answered MethodNotFound by vscode-jsonrpc, as VS Code would.

connection.listen();

// ---------------------------------------------------------------- documents and edits

function openDocument(file) {
  const uri = uriOf(file);
  if (open.has(uri)) return uri;
  const text = fs.readFileSync(file, 'utf8');
  open.set(uri, { version: 1, text });
  connection.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'python', version: 1, text } });
  return uri;
}

function changeDocument(uri, text) {
  const doc = open.get(uri);
  if (!doc) throw new Error(`${uri} is not open`);
  doc.version += 1;
  doc.text = text;
  connection.sendNotification('textDocument/didChange', { textDocument: { uri, version: doc.version }, contentChanges: [{ text }] });
}

function saveDocument(uri) {
  const doc = open.get(uri);
  if (!doc) throw new Error(`${uri} is not open`);
  fs.writeFileSync(fileURLToPath(uri), doc.text);
  connection.sendNotification('textDocument/didSave', { textDocument: { uri }, text: doc.text });
}

/** Offset of an LSP position (UTF-16 code units, which is what JS string indices are). */
function offsetAt(text, position) {
  let offset = 0;
  for (let line = 0; line < position.line; line++) {
    const next = text.indexOf('\n', offset);
    if (next < 0) return text.length;
    offset = next + 1;
  }
  const end = text.indexOf('\n', offset);
  const lineEnd = end < 0 ? text.length : end;
  return Math.min(offset + position.character, lineEnd);
}

function applyTextEdits(text, edits) {
  const resolved = edits
    .map((e, i) => ({ start: offsetAt(text, e.range.start), end: offsetAt(text, e.range.end), newText: e.newText, i }))
    .sort((a, b) => b.start - a.start || b.i - a.i);
  for (let k = 1; k < resolved.length; k++) {
    if (resolved[k].end > resolved[k - 1].start) throw new Error('overlapping text edits');
  }
  let out = text;
  for (const e of resolved) out = out.slice(0, e.start) + e.newText + out.slice(e.end);
  return out;
}

/**
 * Apply a WorkspaceEdit like VS Code: every TextDocumentEdit must name the version we hold for
 * an open document (null only for a closed one); unversioned `changes` are refused, since the
 * design promises versioned edits. Then didChange each touched file, and save it (didSave)
 * now, or a moment later when `deferSave` (the server's applyEdit is answered first, as in VS Code).
 * @returns {{applied: boolean, failureReason?: string, files: string[], versioned: boolean, edits: unknown[]}}
 */
function applyWorkspaceEdit(edit, deferSave = false) {
  const files = [];
  const edits = [];
  if (!edit || !Array.isArray(edit.documentChanges)) {
    const reason = edit?.changes ? 'the WorkspaceEdit uses unversioned `changes`, not versioned `documentChanges`' : 'the WorkspaceEdit has no documentChanges';
    return { applied: false, failureReason: reason, files, versioned: false, edits };
  }
  // Check every version first: all or nothing, like VS Code.
  for (const change of edit.documentChanges) {
    if (!('textDocument' in change)) {
      return { applied: false, failureReason: `resource operation ${change.kind} not supported here`, files, versioned: false, edits };
    }
    const { uri, version } = change.textDocument;
    const doc = open.get(uri);
    if (doc && version !== doc.version) {
      return { applied: false, failureReason: `${rel(uri)}: edit for version ${version}, document is at ${doc.version}`, files, versioned: false, edits };
    }
    if (!doc && version !== null && version !== undefined) {
      return { applied: false, failureReason: `${rel(uri)}: edit names version ${version} of a document that is not open`, files, versioned: false, edits };
    }
  }
  for (const change of edit.documentChanges) {
    const { uri } = change.textDocument;
    if (!open.has(uri)) openDocument(fileURLToPath(uri)); // VS Code opens a model for it, too
    const doc = /** @type {{version: number, text: string}} */ (open.get(uri));
    const before = doc.text;
    const after = applyTextEdits(before, change.edits);
    changeDocument(uri, after);
    if (deferSave) setTimeout(() => saveDocument(uri), 200);
    else saveDocument(uri);
    files.push(rel(uri));
    edits.push(...change.edits.map((e) => ({ file: rel(uri), line: e.range.start.line + 1, newText: e.newText })));
  }
  return { applied: true, files, versioned: true, edits };
}

// ---------------------------------------------------------------- the flow

/** The verified fix: marked `data: {frognano: "verifiedFix"}` by the server (titles are prose) and carrying an edit. */
const isVerifiedFix = (action) => action?.data?.frognano === 'verifiedFix' && !!action.edit;

async function codeActions(uri, diagnostic, resolveProvider) {
  const actions = (await request('textDocument/codeAction', {
    textDocument: { uri },
    range: diagnostic.range,
    context: { diagnostics: [diagnostic], triggerKind: 1 },
  })) ?? [];
  const out = [];
  for (const action of actions) {
    if (resolveProvider && 'title' in action && !('command' in action && typeof action.command === 'string') && !action.edit && action.data !== undefined) {
      out.push(await request('codeAction/resolve', action));
    } else {
      out.push(action);
    }
  }
  return out;
}

/** Resolve after `ms`, or sooner when the server sends something (diagnostics, status, progress). */
function nap(ms) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      waiters.delete(done);
      resolve(undefined);
    };
    const timer = setTimeout(done, ms);
    waiters.add(done);
  });
}

/**
 * Ask for code actions on the (current) Error diagnostic until the verified fix shows up,
 * as the lightbulb would: again after every server message, and at least once a second.
 */
async function pollForFix(uri, currentError, resolveProvider, seconds) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    if (serverExit) fail(`the server exited (code ${serverExit.code}, signal ${serverExit.signal}) while waiting for the verified fix`);
    if (summary.fix?.appliedBy === 'workspace/applyEdit') {
      if (!summary.fix.applied) fail(`the server's edit could not be applied: ${summary.fix.failureReason}`);
      return { applied: true }; // the server applied it itself
    }
    const diagnostic = currentError();
    if (diagnostic) {
      const list = await codeActions(uri, diagnostic, resolveProvider);
      for (const action of list) if (!summary.actionsOffered.includes(action.title)) summary.actionsOffered.push(action.title);
      const found = list.find(isVerifiedFix);
      if (found) return found;
    }
    if (Date.now() > deadline) {
      const last = summary.statuses[summary.statuses.length - 1];
      fail(`timed out after ${seconds}s waiting for a code action marked verifiedFix (offered: ${JSON.stringify(summary.actionsOffered)}; last frognano/status: ${JSON.stringify(last ?? null)}; diagnostics: ${JSON.stringify(diagnosticCounts())})`);
    }
    await nap(1000);
  }
}

async function main() {
  const file = buggyFile();
  const fileUri = uriOf(file);

  summary.phase = 'initialize';
  const init = await request(
    'initialize',
    {
      processId: process.pid,
      clientInfo: { name: 'frognano-protocol-flow', version: '0.1.0' },
      rootUri: uriOf(root),
      rootPath: root,
      workspaceFolders: [{ uri: uriOf(root), name: path.basename(root) }],
      initializationOptions: settings,
      capabilities: {
        workspace: {
          applyEdit: true,
          workspaceEdit: { documentChanges: true, failureHandling: 'abort', resourceOperations: [] },
          configuration: true,
          didChangeConfiguration: { dynamicRegistration: true },
          workspaceFolders: true,
          executeCommand: { dynamicRegistration: true },
        },
        window: { workDoneProgress: true, showDocument: { support: true } },
        textDocument: {
          synchronization: { didSave: true, dynamicRegistration: true },
          publishDiagnostics: { relatedInformation: true, versionSupport: true, codeDescriptionSupport: true, dataSupport: true },
          codeAction: {
            dataSupport: true,
            isPreferredSupport: true,
            resolveSupport: { properties: ['edit'] },
            codeActionLiteralSupport: { codeActionKind: { valueSet: ['', 'quickfix', 'refactor', 'source'] } },
          },
        },
      },
    },
    60,
  );
  summary.timings.initialize = elapsed();
  summary.serverInfo = init.serverInfo ?? null;
  const caps = init.capabilities ?? {};
  const commands = caps.executeCommandProvider?.commands ?? [];
  summary.serverCommands = commands;
  const resolveProvider = typeof caps.codeActionProvider === 'object' && !!caps.codeActionProvider.resolveProvider;
  connection.sendNotification('initialized', {});
  // What the extension sends when a frognano.* setting changes: the server must take it in stride.
  connection.sendNotification('workspace/didChangeConfiguration', { settings: { frognano: settings } });
  if (!caps.codeActionProvider) fail('the server does not advertise codeActionProvider');

  summary.phase = 'diagnostics';
  const uri = openDocument(file);
  saveDocument(uri); // unchanged content: the save is what triggers a test run
  const firstError = await waitFor('an Error diagnostic from source "frognano"', opts.timeouts.diagnostics, () => frognanoDiagnostics(1)[0]);
  summary.timings.diagnostics = elapsed();
  summary.initialDiagnostics = frognanoDiagnostics().map(describe);

  if (settings.autoFix === 'apply') {
    // Nothing to click: the server finds the fix and sends it as workspace/applyEdit.
    summary.phase = 'waiting for the server to apply a fix (autoFix "apply")';
    const fix = await waitFor('workspace/applyEdit from the server', opts.timeouts.fix, () => summary.fix);
    if (!fix.applied) fail(`the server's edit could not be applied: ${fix.failureReason}`);
    summary.timings.applied = elapsed();
    return finish();
  }

  // The user clicks the problem: its file opens, the lightbulb asks for code actions.
  summary.phase = 'code actions';
  openDocument(fileURLToPath(firstError.uri));
  const currentError = () => {
    const list = diagnostics.get(firstError.uri) ?? [];
    return list.find((d) => d.source === 'frognano' && d.severity === 1) ?? frognanoDiagnostics(1)[0]?.diagnostic;
  };
  let actions = await codeActions(firstError.uri, firstError.diagnostic, resolveProvider);
  summary.actionsOffered = actions.map((a) => a.title);
  summary.initialDiagnostics = frognanoDiagnostics().map(describe); // with those published meanwhile
  if (opts.slowFix) return slowFix(actions, fileUri, commands);
  let fix = actions.find(isVerifiedFix);

  if (!fix) {
    summary.phase = 'fix';
    const fixAction = actions.find((a) => a.title === 'Fix with FrogNano');
    /** @type {{command: string, arguments?: unknown[]}} */
    const command =
      fixAction && typeof fixAction.command === 'object' ? fixAction.command : { command: 'frognano.fix', arguments: [fileUri] };
    summary.fixCommand = { via: fixAction ? 'code action "Fix with FrogNano"' : 'executeCommand fallback', ...command };
    if (!commands.includes(command.command)) fail(`the server does not list ${command.command} in executeCommandProvider.commands (${JSON.stringify(commands)})`);
    const asked = Date.now();
    const result = await request('workspace/executeCommand', { command: command.command, arguments: command.arguments ?? [] }, opts.timeouts.fix);
    summary.fixCommand.seconds = (Date.now() - asked) / 1000;
    summary.fixCommand.result = result ?? null;
    summary.phase = 'waiting for the verified fix';
    fix = await pollForFix(firstError.uri, currentError, resolveProvider, opts.timeouts.fix);
  }
  summary.timings.fixOffered = elapsed();

  summary.phase = 'apply';
  if (!fix.applied) {
    const result = applyWorkspaceEdit(fix.edit);
    if (!result.applied) fail(`cannot apply "${fix.title}": ${result.failureReason}`);
    summary.fix = { title: fix.title, data: fix.data, appliedBy: 'code action edit', isPreferred: !!fix.isPreferred, ...result };
  }
  summary.timings.applied = elapsed();
  return finish();
}

/**
 * "Fix with FrogNano" on a project whose fix takes minutes: the answer must come at once (a
 * started job; eglot gives a command 10 s), the job reports $/progress, a second request joins
 * it, and the progress's Cancel stops it.
 */
async function slowFix(actions, fileUri, commands) {
  summary.phase = 'slow fix: the command';
  const fixAction = actions.find((a) => a.title === 'Fix with FrogNano');
  /** @type {{command: string, arguments?: unknown[]}} */
  const command =
    fixAction && typeof fixAction.command === 'object' ? fixAction.command : { command: 'frognano.fix', arguments: [fileUri] };
  if (!commands.includes(command.command)) fail(`the server does not list ${command.command}`);
  const params = { command: command.command, arguments: command.arguments ?? [] };
  const asked = Date.now();
  const answer = await request('workspace/executeCommand', params, 10);
  const fix = { command: command.command, via: fixAction ? 'code action "Fix with FrogNano"' : 'executeCommand fallback',
                answer: answer ?? null, seconds: (Date.now() - asked) / 1000, at: elapsed() };
  summary.slowFix = fix;

  summary.phase = 'slow fix: progress';
  const begin = await waitFor('a $/progress begin', 15, () => summary.progress.find((p) => p.kind === 'begin'));
  fix.token = begin.token;
  await waitFor('a $/progress report with a percentage', 20, () =>
    summary.progress.find((p) => p.token === begin.token && p.kind === 'report' && typeof p.percentage === 'number'));
  fix.statusWhileFixing = summary.statuses[summary.statuses.length - 1] ?? null;

  summary.phase = 'slow fix: again';
  const again = Date.now();
  fix.again = (await request('workspace/executeCommand', params, 10)) ?? null;
  fix.againSeconds = (Date.now() - again) / 1000;
  fix.resultsBeforeCancel = summary.results.length;

  summary.phase = 'slow fix: cancel';
  const cancelled = Date.now();
  connection.sendNotification('window/workDoneProgress/cancel', { token: begin.token });
  fix.result = await waitFor('the fix job\'s frognano/result', 10, () => summary.results.find((r) => r.job === answer?.job));
  fix.cancelSeconds = (Date.now() - cancelled) / 1000;
  await waitFor('the $/progress end', 5, () => summary.progress.find((p) => p.token === begin.token && p.kind === 'end'));
  fix.statusAfter = await waitFor('frognano/status back to "failing"', 5, () => {
    const last = /** @type {{state?: string} | undefined} */ (summary.statuses[summary.statuses.length - 1]);
    return last?.state === 'failing' && last;
  });
  return shutdown();
}

/** After the fix is applied: wait for the Error diagnostics to clear, shut down, print the summary. */
async function finish() {
  summary.phase = 'clear';
  await waitFor('the Error diagnostics to clear', opts.timeouts.clear, () => frognanoDiagnostics(1).length === 0);
  summary.timings.cleared = elapsed();
  // Information diagnostics (suspicious lines) may be withdrawn a moment later: give them 5 s.
  const settled = Date.now() + 5000;
  while (frognanoDiagnostics().length && Date.now() < settled) await nap(250);
  // The server re-runs the tests as soon as a fix is applied, and the save that follows runs
  // them once more: wait until it is quiet (no status for a second, none running or fixing),
  // so that the summary's last status is the server's last word.
  const quietBy = Date.now() + opts.timeouts.clear * 1000;
  let seen = summary.statuses.length;
  let since = Date.now();
  while (Date.now() < quietBy) {
    await nap(200);
    if (summary.statuses.length !== seen) {
      seen = summary.statuses.length;
      since = Date.now();
      continue;
    }
    const last = /** @type {{state?: string} | undefined} */ (summary.statuses[summary.statuses.length - 1]);
    if (Date.now() - since >= 1000 && !['running', 'fixing'].includes(last?.state ?? '')) break;
  }
  summary.finalDiagnostics = frognanoDiagnostics().map(describe);
  return shutdown();
}

/** shutdown, exit, the process gone: print the summary. */
async function shutdown() {
  summary.phase = 'shutdown';
  await request('shutdown', null, 15);
  summary.phase = 'exit';
  connection.sendNotification('exit');
  const exited = await Promise.race([
    new Promise((resolve) => (serverExit ? resolve(true) : child.once('exit', () => resolve(true)))),
    new Promise((resolve) => setTimeout(() => resolve(false), 10000)),
  ]);
  summary.serverExitCode = serverExit?.code ?? null;
  if (!exited) {
    child.kill('SIGKILL');
    fail('the server did not exit within 10 s of the exit notification');
  }
  summary.timings.total = elapsed();
  summary.ok = true;
  logStream?.end();
  process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
  connection.dispose();
  process.exit(0);
}

main().catch((error) => fail(error instanceof Error ? error.stack ?? error.message : String(error)));
