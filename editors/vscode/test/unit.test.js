// @ts-check
// Unit tests of the vscode-free parts of the extension (run after `npm run compile`):
//   node --test test/unit.test.js
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const test = require('node:test');

const { collectSettings, sectionValue } = require('../out/settings');
const { renderStatus, renderLifecycle } = require('../out/status');
const { resolveServer } = require('../out/serverPath');

const pkg = require('../package.json');

/** An `inspect` over package.json defaults plus the given user values. */
function inspector(user = {}, scope = 'globalValue') {
  const props = pkg.contributes.configuration.properties;
  return (key) => {
    const full = `frognano.${key}`;
    if (!(full in props)) return undefined;
    const inspected = { defaultValue: props[full].default };
    if (key in user) inspected[scope] = user[key];
    return inspected;
  };
}

test('defaults send only the editor settings (pyproject.toml keeps control of the rest)', () => {
  assert.deepEqual(collectSettings(inspector()), { autoFix: 'suggest', debounceMs: 300 });
});

test('explicit values are sent, the most specific scope wins', () => {
  const settings = collectSettings(inspector({ timeout: 5, testArgs: ['-x'], model: ' openai:m@http://h ', autoFix: 'suggest' }));
  assert.deepEqual(settings, { timeout: 5, testArgs: ['-x'], model: 'openai:m@http://h', autoFix: 'suggest', debounceMs: 300 });
  const layered = collectSettings((key) => (key === 'episodes' ? { defaultValue: 2, globalValue: 1, workspaceValue: 3, workspaceFolderValue: 4 } : undefined));
  assert.equal(layered.episodes, 4);
});

test('wrong types are dropped with a warning naming the key', () => {
  const warnings = [];
  const settings = collectSettings(inspector({ maxPairs: 1.5, autoFix: 'always', python: '' }), (m) => warnings.push(m));
  assert.deepEqual(settings, { autoFix: 'suggest', debounceMs: 300 });
  assert.equal(warnings.length, 2);
  assert.match(warnings.join('\n'), /frognano\.maxPairs/);
  assert.match(warnings.join('\n'), /frognano\.autoFix.*off \| suggest \| apply/);
});

test('workspace/configuration sections', () => {
  const settings = { autoFix: 'apply', debounceMs: 10, timeout: 3 };
  assert.deepEqual(sectionValue('frognano', settings), settings);
  assert.equal(sectionValue('frognano.timeout', settings), 3);
  assert.equal(sectionValue('frognano.model', settings), null);
});

test('every server setting of the contract is contributed with a default and a description', () => {
  const props = pkg.contributes.configuration.properties;
  for (const key of ['serverPath', 'model', 'testArgs', 'timeout', 'maxCandidates', 'maxPairs', 'searchSeconds', 'episodes', 'python', 'autoFix', 'debounceMs']) {
    const prop = props[`frognano.${key}`];
    assert.ok(prop, key);
    assert.ok('default' in prop, `${key} default`);
    assert.ok(prop.markdownDescription || prop.description, `${key} description`);
  }
  assert.deepEqual(props['frognano.autoFix'].enum, ['off', 'suggest', 'apply']);
  assert.equal(props['frognano.autoFix'].default, 'suggest');
  assert.equal(props['frognano.debounceMs'].default, 300);
});

test('status bar text', () => {
  assert.equal(renderStatus({ state: 'failing', failing: 1, autoFix: 'suggest', message: '' }).text, '$(beaker) FrogNano: 1 failing · auto-fix: suggest');
  assert.equal(renderStatus({ state: 'failing', failing: 1, autoFix: 'suggest', message: '' }).severity, 'error');
  assert.equal(renderStatus({ state: 'passing', failing: 0, autoFix: 'off', message: '5 passed' }).text, '$(beaker) FrogNano: tests pass · auto-fix: off');
  assert.equal(renderStatus({ state: 'passing', failing: 0, autoFix: 'off', message: '5 passed' }).tooltip.split('\n')[0], '5 passed');
  assert.equal(renderStatus({ state: 'running', failing: 0, autoFix: 'apply', message: '' }).text, '$(sync~spin) FrogNano: running tests · auto-fix: apply');
  assert.equal(renderStatus({ state: 'fixing', failing: 2, autoFix: 'off', message: '' }).text, '$(sync~spin) FrogNano: fixing 2 failing · auto-fix: off');
  assert.equal(renderStatus({ state: 'fixed', failing: 0, autoFix: 'off', message: '' }).text, '$(check) FrogNano: fix verified · auto-fix: off');
  assert.equal(renderStatus({ state: 'error', failing: 0, autoFix: 'off', message: 'collection error' }).text, '$(warning) FrogNano: error · auto-fix: off');
  assert.equal(renderStatus({ state: 'idle' }).text, '$(beaker) FrogNano · auto-fix: off');
  assert.equal(renderStatus({}).text, '$(beaker) FrogNano · auto-fix: off');
  assert.match(renderLifecycle('stopped', 'off').text, /stopped/);
});

test('server path: explicit setting, then workspace .venv, then PATH', { skip: process.platform === 'win32' }, () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'frognano-vscode-'));
  const folder = path.join(tmp, 'proj');
  const bin = path.join(tmp, 'bin');
  fs.mkdirSync(path.join(folder, '.venv', 'bin'), { recursive: true });
  fs.mkdirSync(bin);
  const venvExe = path.join(folder, '.venv', 'bin', 'frognano');
  const pathExe = path.join(bin, 'frognano');
  for (const exe of [venvExe, pathExe]) fs.writeFileSync(exe, '#!/bin/sh\n', { mode: 0o755 });
  const env = { PATH: bin };
  const home = { home: path.join(tmp, 'home') };
  const pick = (r) => ({ command: r.command, source: r.source, found: r.found });
  assert.deepEqual(pick(resolveServer('frognano', [folder], env, home)), { command: venvExe, source: 'workspace .venv', found: true });
  assert.deepEqual(pick(resolveServer(undefined, [path.join(tmp, 'other')], env, home)), { command: pathExe, source: 'PATH', found: true });
  assert.deepEqual(pick(resolveServer('frognano', [], { PATH: '' }, home)), { command: 'frognano', source: 'PATH', found: false });
  assert.deepEqual(pick(resolveServer('${workspaceFolder}/.venv/bin/frognano', [folder], env)), { command: venvExe, source: 'setting', found: true });
  assert.deepEqual(pick(resolveServer('.venv/bin/frognano', [folder], env)), { command: venvExe, source: 'setting', found: true });
  const missing = resolveServer('/nowhere/frognano', [folder], env);
  assert.equal(missing.found, false);
  assert.deepEqual(missing.tried, [{ source: 'setting', path: '/nowhere/frognano' }]);  // an explicit path is the only place
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('server path: where the README installs it, and every place tried when it is nowhere', { skip: process.platform === 'win32' }, () => {
  const { describeTried, extensionCheckout, pyprojectPython } = require('../out/serverPath');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'frognano-vscode-'));
  const folder = path.join(tmp, 'proj');
  fs.mkdirSync(folder);
  const clone = path.join(tmp, 'frognano');
  const extensionPath = path.join(clone, 'editors', 'vscode');
  const home = path.join(tmp, 'home');
  const context = { home, extensionPath, python: path.join(tmp, 'py', 'bin', 'python') };
  const env = { PATH: '', VIRTUAL_ENV: path.join(tmp, 'active') };
  const exe = (p) => {
    fs.mkdirSync(path.dirname(p), { recursive: true });
    fs.writeFileSync(p, '#!/bin/sh\n', { mode: 0o755 });
    return p;
  };

  // Nowhere: every place is named, in order.
  const none = resolveServer(undefined, [folder], env, context);
  assert.equal(none.found, false);
  assert.deepEqual(none.tried.map((c) => c.source),
    ['workspace .venv', 'workspace venv', 'python setting', 'active virtualenv', 'PATH', 'FrogNano checkout', '~/.local/bin']);
  assert.deepEqual(describeTried(none.tried), [
    `${folder}/.venv/bin/frognano (workspace .venv)`, `${folder}/venv/bin/frognano (workspace venv)`,
    `${tmp}/py/bin/frognano (python setting)`, `${tmp}/active/bin/frognano (active virtualenv)`, 'frognano on PATH',
    `${clone}/.venv/bin/frognano (FrogNano checkout)`, `${home}/.local/bin/frognano (~/.local/bin)`]);

  // Each place alone finds it (the last ones first, so that earlier ones do not shadow them).
  for (const [source, file] of [['~/.local/bin', `${home}/.local/bin/frognano`], ['FrogNano checkout', `${clone}/.venv/bin/frognano`],
    ['active virtualenv', `${tmp}/active/bin/frognano`], ['python setting', `${tmp}/py/bin/frognano`], ['workspace venv', `${folder}/venv/bin/frognano`]]) {
    exe(file);
    const found = resolveServer(undefined, [folder], env, context);
    assert.deepEqual([found.found, found.source, found.command], [true, source, file]);
  }

  // The interpreter named in [tool.frognano] when the setting is empty, relative to the folder.
  fs.writeFileSync(path.join(folder, 'pyproject.toml'), '[project]\nname = "p"\n\n[tool.frognano]\ntimeout = 5\npython = "tools/bin/python"\n');
  assert.equal(pyprojectPython(folder), 'tools/bin/python');
  const tools = exe(path.join(folder, 'tools', 'bin', 'frognano'));
  fs.rmSync(path.join(folder, 'venv'), { recursive: true });
  const fromPyproject = resolveServer(undefined, [folder], env, { home });
  assert.deepEqual([fromPyproject.source, fromPyproject.command], ['python setting', tools]);

  assert.equal(extensionCheckout(extensionPath), clone);
  const installed = path.join(home, '.vscode', 'extensions', 'frognano.frognano-0.1.0');
  assert.equal(extensionCheckout(installed), undefined);
  // A .vsix packaged from the clone records it (scripts/record-checkout.js): found from afar.
  fs.mkdirSync(path.join(installed, 'out'), { recursive: true });
  fs.writeFileSync(path.join(installed, 'out', 'checkout.json'), JSON.stringify({ checkout: clone }));
  assert.equal(extensionCheckout(installed), clone);
  fs.rmSync(path.join(folder, 'tools'), { recursive: true });
  const fromVsix = resolveServer(undefined, [folder], { PATH: '' }, { home, extensionPath: installed });
  assert.deepEqual([fromVsix.source, fromVsix.command], ['FrogNano checkout', `${clone}/.venv/bin/frognano`]);
  fs.rmSync(tmp, { recursive: true, force: true });
});

test('episode records are listed newest first from the server cache', { skip: process.platform === 'win32' }, () => {
  const { listEpisodes, projectCache, cacheRoot } = require('../out/episodes');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'frognano-episodes-'));
  const env = { FROGNANO_CACHE_DIR: path.join(tmp, 'cache') };
  const folder = path.join(tmp, 'proj');
  fs.mkdirSync(folder);
  assert.equal(cacheRoot(env), env.FROGNANO_CACHE_DIR);
  assert.equal(cacheRoot({ XDG_CACHE_HOME: '/x' }), '/x/frognano');
  assert.match(projectCache(folder, env), /\/projects\/proj-[0-9a-f]{12}$/);
  assert.deepEqual(listEpisodes([folder], env), []);
  const dir = path.join(projectCache(folder, env), 'episodes');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'old.json'), '{}');
  fs.writeFileSync(path.join(dir, 'new.json'), '{}');
  fs.writeFileSync(path.join(dir, 'notes.txt'), '');
  fs.utimesSync(path.join(dir, 'old.json'), new Date(1000), new Date(1000));
  assert.deepEqual(listEpisodes([folder], env).map((r) => path.basename(r.path)), ['new.json', 'old.json']);
  fs.rmSync(tmp, { recursive: true, force: true });
});
