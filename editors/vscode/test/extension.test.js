// @ts-check
// The extension's glue (out/extension.js) with `vscode` and `vscode-languageclient/node` replaced
// by small fakes, since VS Code cannot run here: what it spawns, the settings it sends and
// answers, the status bar, palette arguments, and the stand-ins for missing server commands.
//   node --test test/extension.test.js      (after `npm run compile`)
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const Module = require('node:module');
const os = require('node:os');
const path = require('node:path');
const test = require('node:test');

const pkg = require('../package.json');
const DEFAULTS = Object.fromEntries(
  Object.entries(pkg.contributes.configuration.properties).map(([k, v]) => [k.slice('frognano.'.length), v.default]),
);

function emitter() {
  const listeners = new Set();
  const event = (fn) => {
    listeners.add(fn);
    return { dispose: () => listeners.delete(fn) };
  };
  return { event, fire: (e) => listeners.forEach((fn) => fn(e)) };
}

/** A fresh fake world: vscode API, language client, and a workspace folder. */
function world({ venvServer = true, userSettings = {}, serverCommands = null } = {}) {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'frognano-ext-'));
  const folder = path.join(tmp, 'proj');
  fs.mkdirSync(path.join(folder, '.venv', 'bin'), { recursive: true });
  if (venvServer) fs.writeFileSync(path.join(folder, '.venv', 'bin', 'frognano'), '#!/bin/sh\n', { mode: 0o755 });
  const user = { ...userSettings };
  const configChanged = emitter();
  const w = { tmp, folder, user, commands: new Map(), errors: [], clients: [], statusItem: /** @type {any} */ (null), executed: [] };
  const uri = (fsPath) => ({ scheme: 'file', fsPath, toString: () => `file://${fsPath}` });
  const vscode = {
    StatusBarAlignment: { Left: 1, Right: 2 },
    ThemeColor: class { constructor(id) { this.id = id; } },
    Uri: { parse: (s) => uri(s.replace(/^file:\/\//, '')), file: uri },
    window: {
      activeTextEditor: undefined,
      createOutputChannel: (name) => ({ name, lines: [], appendLine(l) { this.lines.push(l); }, show() {}, dispose() {} }),
      createStatusBarItem: (id) => (w.statusItem = { id, text: '', show() { this.visible = true; }, dispose() {} }),
      showErrorMessage: async (m) => { w.errors.push(m); return undefined; },
      showQuickPick: async (items) => items[0],
      showOpenDialog: async () => undefined,
    },
    commands: {
      registerCommand: (id, fn) => {
        assert.ok(!w.commands.has(id), `command ${id} registered twice`);
        w.commands.set(id, fn);
        return { dispose: () => w.commands.delete(id) };
      },
      executeCommand: async (id, ...args) => w.executed.push([id, ...args]),
    },
    workspace: {
      workspaceFolders: [{ uri: uri(folder), name: 'proj', index: 0 }],
      onDidChangeConfiguration: configChanged.event,
      asRelativePath: (p) => p,
      getConfiguration: (section) => {
        assert.equal(section, 'frognano');
        return {
          get: (key) => (key in user ? user[key] : DEFAULTS[key]),
          inspect: (key) => (key in DEFAULTS ? { defaultValue: DEFAULTS[key], ...(key in user ? { globalValue: user[key] } : {}) } : undefined),
        };
      },
    },
  };
  const State = { Stopped: 1, Running: 2, Starting: 3 };
  class LanguageClient {
    constructor(id, name, serverOptions, clientOptions) {
      Object.assign(this, { id, name, serverOptions, clientOptions, state: State.Stopped, notifications: new Map(), sent: [] });
      this.stateChanged = emitter();
      this.onDidChangeState = this.stateChanged.event;
      w.clients.push(this);
    }
    onNotification(method, fn) { this.notifications.set(method, fn); }
    async sendNotification(type, params) { this.sent.push([type.method ?? type, params]); }
    async start() {
      this.stateChanged.fire({ oldState: this.state, newState: (this.state = State.Starting) });
      this.initOptions = this.clientOptions.initializationOptions();
      const commands = serverCommands ?? ['frognano.runTests', 'frognano.fix', 'frognano.applyFix', 'frognano.toggleAutoFix', 'frognano.showDiagnosis', 'frognano.showEpisode'];
      this.initializeResult = { capabilities: { executeCommandProvider: { commands } } };
      this.stateChanged.fire({ oldState: this.state, newState: (this.state = State.Running) });
    }
    async dispose() { this.stateChanged.fire({ oldState: this.state, newState: (this.state = State.Stopped) }); }
  }
  const lc = { LanguageClient, State, RevealOutputChannelOn: { Never: 4 }, DidChangeConfigurationNotification: { type: { method: 'workspace/didChangeConfiguration' } } };
  const load = Module._load;
  Module._load = function (request, ...rest) {
    if (request === 'vscode') return vscode;
    if (request === 'vscode-languageclient/node') return lc;
    return load.call(this, request, ...rest);
  };
  const file = require.resolve('../out/extension.js');
  delete require.cache[file];
  const extension = require(file);
  Module._load = load;
  return Object.assign(w, { vscode, extension, fireConfig: (keys) => configChanged.fire({ affectsConfiguration: (s) => keys.some((k) => k === s || k.startsWith(`${s}.`)) }), cleanup: () => fs.rmSync(tmp, { recursive: true, force: true }) });
}

test('starts the workspace .venv server with the settings the user set', async () => {
  const w = world({ userSettings: { timeout: 7, autoFix: 'suggest' } });
  await w.extension.activate({ subscriptions: [] });
  const [client] = w.clients;
  assert.equal(client.serverOptions.command, path.join(w.folder, '.venv', 'bin', 'frognano'));
  assert.deepEqual(client.serverOptions.args, ['serve', '-v']);
  assert.equal(client.serverOptions.options.cwd, w.folder);
  assert.deepEqual(client.clientOptions.documentSelector, [{ scheme: 'file', language: 'python' }]);
  assert.deepEqual(client.initOptions, { timeout: 7, autoFix: 'suggest', debounceMs: 300 });
  assert.equal(client.clientOptions.outputChannel.name, 'FrogNano');
  assert.equal(w.statusItem.text, '$(beaker) FrogNano · auto-fix: suggest');

  // workspace/configuration: our section from the settings, others via the default handler
  const answer = await client.clientOptions.middleware.workspace.configuration(
    { items: [{ section: 'frognano' }, { section: 'python' }, { section: 'frognano.timeout', scopeUri: `file://${w.folder}` }] },
    {},
    async (params) => params.items.map(() => 'other'),
  );
  assert.deepEqual(answer, [{ timeout: 7, autoFix: 'suggest', debounceMs: 300 }, 'other', 7]);

  // a settings change is pushed as {settings: {frognano: ...}}
  w.user.maxPairs = 3;
  w.fireConfig(['frognano', 'frognano.maxPairs']);
  assert.deepEqual(client.sent.at(-1), ['workspace/didChangeConfiguration', { settings: { frognano: { timeout: 7, maxPairs: 3, autoFix: 'suggest', debounceMs: 300 } } }]);

  // frognano/status drives the status bar; clicking toggles auto-fix on the server
  client.notifications.get('frognano/status')({ state: 'failing', failing: 1, autoFix: 'suggest', message: '1 failing test' });
  assert.equal(w.statusItem.text, '$(beaker) FrogNano: 1 failing · auto-fix: suggest');
  assert.equal(w.statusItem.command, 'frognano.toggleAutoFix');
  assert.equal(w.statusItem.backgroundColor.id, 'statusBarItem.errorBackground');

  // palette runs get the active Python file
  const next = async (command, args) => [command, args];
  w.vscode.window.activeTextEditor = { document: { uri: w.vscode.Uri.file('/p/a.py'), languageId: 'python' } };
  assert.deepEqual(await client.clientOptions.middleware.executeCommand('frognano.fix', [], next), ['frognano.fix', ['file:///p/a.py']]);
  assert.deepEqual(await client.clientOptions.middleware.executeCommand('frognano.fix', ['x'], next), ['frognano.fix', ['x']]);
  assert.deepEqual(await client.clientOptions.middleware.executeCommand('frognano.toggleAutoFix', [], next), ['frognano.toggleAutoFix', []]);
  // showEpisode with no record on disk and the dialog cancelled: nothing is sent
  assert.equal(await client.clientOptions.middleware.executeCommand('frognano.showEpisode', [], next), undefined);

  // no stand-ins while the server provides every command; restart builds a new client
  assert.ok(!w.commands.has('frognano.fix'));
  await w.commands.get('frognano.restartServer')();
  assert.equal(w.clients.length, 2);
  assert.equal(client.state, 1);
  await w.extension.deactivate();
  w.cleanup();
});

test('a missing server gives a clear error, a stopped status and stand-in commands', async () => {
  const w = world({ venvServer: false, userSettings: { serverPath: '/nowhere/frognano' } });
  await w.extension.activate({ subscriptions: [] });
  assert.equal(w.clients.length, 0);
  assert.match(w.errors[0], /cannot start the server: frognano.serverPath is "\/nowhere\/frognano"/);
  assert.equal(w.statusItem.text, '$(warning) FrogNano: stopped');
  assert.equal(w.statusItem.command, 'frognano.showOutput');
  await w.commands.get('frognano.fix')();
  assert.match(w.errors[1], /frognano.fix is unavailable/);
  await w.extension.deactivate();
  w.cleanup();
});

test('commands an older server lacks get stand-ins', async () => {
  const w = world({ serverCommands: ['frognano.runTests', 'frognano.fix'] });
  await w.extension.activate({ subscriptions: [] });
  assert.ok(w.commands.has('frognano.showEpisode') && w.commands.has('frognano.applyFix'));
  assert.ok(!w.commands.has('frognano.fix'));
  await w.extension.deactivate();
  w.cleanup();
});

/** Run `fn` with PATH empty, no active virtualenv and HOME at `home`: only the places the test makes exist. */
async function isolatedEnv(home, fn) {
  const saved = { PATH: process.env.PATH, VIRTUAL_ENV: process.env.VIRTUAL_ENV, HOME: process.env.HOME };
  process.env.PATH = '';
  delete process.env.VIRTUAL_ENV;
  process.env.HOME = home;
  try {
    await fn();
  } finally {
    for (const [key, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
  }
}

test('no server anywhere: one notification naming every place looked in, then only the output', { skip: process.platform === 'win32' }, async () => {
  const w = world({ venvServer: false, userSettings: { python: '/opt/py/bin/python' } });
  const home = path.join(w.tmp, 'home');
  const extensionPath = path.join(w.tmp, 'frognano', 'editors', 'vscode');
  await isolatedEnv(home, async () => {
    await w.extension.activate({ subscriptions: [], extensionPath });
    assert.equal(w.clients.length, 0);
    assert.equal(w.errors.length, 1);
    for (const place of [`${w.folder}/.venv/bin/frognano`, `${w.folder}/venv/bin/frognano`, '/opt/py/bin/frognano',
      'frognano on PATH', `${w.tmp}/frognano/.venv/bin/frognano`, `${home}/.local/bin/frognano`]) {
      assert.ok(w.errors[0].includes(place), `${place} not in: ${w.errors[0]}`);
    }
    assert.equal(w.statusItem.text, '$(warning) FrogNano: stopped');
    // A restart that still finds nothing logs it again but does not notify again.
    await w.commands.get('frognano.restartServer')();
    assert.equal(w.errors.length, 1);
    assert.equal(w.clients.length, 0);

    // The interpreter setting changes to one with frognano beside it: found, started.
    const exe = path.join(w.tmp, 'py', 'bin', 'frognano');
    fs.mkdirSync(path.dirname(exe), { recursive: true });
    fs.writeFileSync(exe, '#!/bin/sh\n', { mode: 0o755 });
    w.user.python = path.join(w.tmp, 'py', 'bin', 'python');
    w.fireConfig(['frognano', 'frognano.python']);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(w.clients.length, 1);
    assert.equal(w.clients[0].serverOptions.command, exe);
    assert.equal(w.errors.length, 1);
  });
  await w.extension.deactivate();
  w.cleanup();
});

test('the server in the FrogNano checkout the extension runs from (the README install)', { skip: process.platform === 'win32' }, async () => {
  const w = world({ venvServer: false });
  const clone = path.join(w.tmp, 'frognano');
  const exe = path.join(clone, '.venv', 'bin', 'frognano');
  fs.mkdirSync(path.dirname(exe), { recursive: true });
  fs.writeFileSync(exe, '#!/bin/sh\n', { mode: 0o755 });
  await isolatedEnv(path.join(w.tmp, 'home'), async () => {
    await w.extension.activate({ subscriptions: [], extensionPath: path.join(clone, 'editors', 'vscode') });
  });
  assert.equal(w.clients.length, 1);
  assert.equal(w.clients[0].serverOptions.command, exe);
  assert.deepEqual(w.errors, []);
  await w.extension.deactivate();
  w.cleanup();
});
