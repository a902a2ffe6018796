// Which `frognano` executable runs `frognano serve`. No `vscode` import: unit-tested in Node.

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

export const DEFAULT_SERVER = 'frognano';

export interface ResolvedServer {
  /** What to spawn: an absolute path when one was found, else the bare setting. */
  command: string;
  /** Where it came from, for the output channel and error messages. */
  source: 'setting' | 'workspace .venv' | 'PATH';
  /** False when nothing executable was found; starting it would fail with ENOENT. */
  found: boolean;
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

/**
 * `setting` is `frognano.serverPath`. An explicit path (anything but the default "frognano") wins;
 * `${workspaceFolder}` and a leading `~` are expanded and relative paths resolve against the first
 * folder. Otherwise the first workspace folder with `.venv/bin/frognano` provides the server, and
 * failing that `frognano` on PATH.
 */
export function resolveServer(
  setting: string | undefined,
  folders: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): ResolvedServer {
  let value = (setting ?? '').trim() || DEFAULT_SERVER;
  if (value !== DEFAULT_SERVER) {
    const first = folders[0];
    if (first) {
      value = value.replace(/\$\{workspaceFolder\}/g, first);
    }
    if (value === '~' || value.startsWith('~/') || value.startsWith('~\\')) {
      value = path.join(os.homedir(), value.slice(1));
    }
    const hasSeparator = value.includes('/') || value.includes('\\');
    if (!hasSeparator) {
      const onPath = findOnPath(value, env);
      return { command: onPath ?? value, source: 'setting', found: onPath !== undefined };
    }
    const absolute = path.isAbsolute(value) || !first ? value : path.resolve(first, value);
    return { command: absolute, source: 'setting', found: isExecutable(absolute) };
  }
  for (const folder of folders) {
    const candidate = venvExecutable(path.join(folder, '.venv'));
    if (isExecutable(candidate)) {
      return { command: candidate, source: 'workspace .venv', found: true };
    }
  }
  const onPath = findOnPath(DEFAULT_SERVER, env);
  return { command: onPath ?? DEFAULT_SERVER, source: 'PATH', found: onPath !== undefined };
}
