// Which `frognano` executable runs `frognano serve`. No `vscode` import: unit-tested in Node.

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

export const DEFAULT_SERVER = 'frognano';

/** Where `frognano` can come from, in the order they are tried. */
export type ServerSource =
  | 'setting'
  | 'workspace .venv'
  | 'workspace venv'
  | 'python setting'
  | 'active virtualenv'
  | 'PATH'
  | 'FrogNano checkout'
  | '~/.local/bin';

export interface Candidate {
  source: ServerSource;
  /** The executable looked for (for PATH: the bare name). */
  path: string;
}

export interface ResolvedServer {
  /** What to spawn: an absolute path when one was found, else the bare setting. */
  command: string;
  /** Where it came from, for the output channel and error messages. */
  source: ServerSource;
  /** False when nothing executable was found; starting it would fail with ENOENT. */
  found: boolean;
  /** Every place looked in, in order: what to tell the user when nothing was found. */
  tried: Candidate[];
}

/** What else the lookup may use besides the setting and the folders. */
export interface LookupContext {
  /** `frognano.python`: the interpreter whose console scripts sit beside it. */
  python?: string;
  /** The extension's own directory: inside a FrogNano checkout, its `.venv` is tried. */
  extensionPath?: string;
  /** The home directory (for `~` and `~/.local/bin`); default `os.homedir()`. */
  home?: string;
}

function isExecutable(file: string): boolean {
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) {
      return false;
    }
    if (process.platform === 'win32') {
      return true;
    }
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `which`: the first executable named `name` on PATH (with PATHEXT on Windows). */
export function findOnPath(name: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const dirs = (env.PATH ?? env.Path ?? '').split(path.delimiter).filter(Boolean);
  const exts = process.platform === 'win32' ? ['', ...(env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';')] : [''];
  for (const dir of dirs) {
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext);
      if (isExecutable(candidate)) {
        return candidate;
      }
    }
  }
  return undefined;
}

/** The executable of a virtualenv at `venv`, on this platform. */
export function venvExecutable(venv: string, name = DEFAULT_SERVER): string {
  return process.platform === 'win32' ? path.join(venv, 'Scripts', `${name}.exe`) : path.join(venv, 'bin', name);
}

/** `python = "..."` in `[tool.frognano]` of `<folder>/pyproject.toml` (a line scan, not TOML). */
export function pyprojectPython(folder: string): string | undefined {
  let text: string;
  try {
    text = fs.readFileSync(path.join(folder, 'pyproject.toml'), 'utf8');
  } catch {
    return undefined;
  }
  let inTable = false;
  for (const line of text.split(/\r?\n/)) {
    const header = /^\s*\[([^\]]+)\]/.exec(line);
    if (header) {
      inTable = header[1].trim() === 'tool.frognano';
    } else if (inTable) {
      const value = /^\s*python\s*=\s*["']([^"']+)["']/.exec(line);
      if (value) {
        return value[1];
      }
    }
  }
  return undefined;
}

/**
 * The FrogNano checkout of the extension at `extensionPath`: the one it runs from
 * (`<checkout>/editors/vscode`, a development host), else the one its .vsix was built from
 * (`out/checkout.json`, written by scripts/record-checkout.js when packaging).
 */
export function extensionCheckout(extensionPath: string | undefined): string | undefined {
  if (!extensionPath) {
    return undefined;
  }
  const editors = path.dirname(path.resolve(extensionPath));
  if (path.basename(path.resolve(extensionPath)) === 'vscode' && path.basename(editors) === 'editors') {
    return path.dirname(editors);
  }
  return builtFrom(extensionPath);
}

/** The checkout recorded in `<extensionPath>/out/checkout.json`, if any. */
export function builtFrom(extensionPath: string): string | undefined {
  try {
    const record: unknown = JSON.parse(fs.readFileSync(path.join(extensionPath, 'out', 'checkout.json'), 'utf8'));
    const checkout = (record as { checkout?: unknown } | null)?.checkout;
    return typeof checkout === 'string' && path.isAbsolute(checkout) ? checkout : undefined;
  } catch {
    return undefined; // not packaged from a checkout (or an older .vsix)
  }
}

function expand(value: string, first: string | undefined, home: string): string {
  if (first) {
    value = value.replace(/\$\{workspaceFolder\}/g, first);
  }
  if (value === '~' || value.startsWith('~/') || value.startsWith('~\\')) {
    value = path.join(home, value.slice(1));
  }
  return path.isAbsolute(value) || !first ? value : path.resolve(first, value);
}

/** Where `frognano` is looked for when `frognano.serverPath` is left at `frognano`, in order. */
export function serverCandidates(
  folders: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  context: LookupContext = {},
): Candidate[] {
  const home = context.home ?? os.homedir();
  const exe = process.platform === 'win32' ? `${DEFAULT_SERVER}.exe` : DEFAULT_SERVER;
  const out: Candidate[] = [];
  // The project's own virtualenv first: the server then imports what its tests import.
  for (const folder of folders) {
    out.push({ source: 'workspace .venv', path: venvExecutable(path.join(folder, '.venv')) });
    out.push({ source: 'workspace venv', path: venvExecutable(path.join(folder, 'venv')) });
  }
  const python = (context.python ?? '').trim() || (folders[0] ? pyprojectPython(folders[0]) : undefined);
  if (python) {
    out.push({ source: 'python setting', path: path.join(path.dirname(expand(python, folders[0], home)), exe) });
  }
  if (env.VIRTUAL_ENV) {
    out.push({ source: 'active virtualenv', path: venvExecutable(env.VIRTUAL_ENV) });
  }
  out.push({ source: 'PATH', path: DEFAULT_SERVER });
  const checkout = extensionCheckout(context.extensionPath);
  if (checkout) {
    // The README installs FrogNano in a virtualenv of its own clone.
    out.push({ source: 'FrogNano checkout', path: venvExecutable(path.join(checkout, '.venv')) });
  }
  if (process.platform !== 'win32') {
    out.push({ source: '~/.local/bin', path: path.join(home, '.local', 'bin', DEFAULT_SERVER) });
  }
  return out;
}

/**
 * `setting` is `frognano.serverPath`. An explicit path (anything but the default "frognano") wins;
 * `${workspaceFolder}` and a leading `~` are expanded and relative paths resolve against the first
 * folder. Otherwise the first of `serverCandidates` that is executable.
 */
export function resolveServer(
  setting: string | undefined,
  folders: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  context: LookupContext = {},
): ResolvedServer {
  const value = (setting ?? '').trim() || DEFAULT_SERVER;
  if (value !== DEFAULT_SERVER) {
    const home = context.home ?? os.homedir();
    const hasSeparator = value.includes('/') || value.includes('\\');
    if (!hasSeparator && !value.startsWith('~')) {
      const onPath = findOnPath(value, env);
      return { command: onPath ?? value, source: 'setting', found: onPath !== undefined, tried: [{ source: 'setting', path: value }] };
    }
    const absolute = expand(value, folders[0], home);
    return { command: absolute, source: 'setting', found: isExecutable(absolute), tried: [{ source: 'setting', path: absolute }] };
  }
  const tried = serverCandidates(folders, env, context);
  for (const candidate of tried) {
    const command = candidate.source === 'PATH' ? findOnPath(candidate.path, env) : isExecutable(candidate.path) ? candidate.path : undefined;
    if (command) {
      return { command, source: candidate.source, found: true, tried };
    }
  }
  return { command: DEFAULT_SERVER, source: 'PATH', found: false, tried };
}

/** The places tried, one per line, for the output channel and the error message. */
export function describeTried(tried: readonly Candidate[]): string[] {
  return tried.map((c) => (c.source === 'PATH' ? `${c.path} on PATH` : `${c.path} (${c.source})`));
}
