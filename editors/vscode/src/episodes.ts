// Where the server keeps the records of model repair episodes, so that "FrogNano: Show Last
// Repair Episode" run from the palette can offer them. Mirrors frognano/paths.py (cache_root,
// project_cache); tests/editors/test_vscode.py checks the two agree. No `vscode` import.

import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

/** `$FROGNANO_CACHE_DIR`, else `$XDG_CACHE_HOME/frognano`, else `~/.cache/frognano`. */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  const expand = (p: string) => (p === '~' || p.startsWith('~/') ? path.join(os.homedir(), p.slice(1)) : p);
  if (env.FROGNANO_CACHE_DIR) {
    return expand(env.FROGNANO_CACHE_DIR);
  }
  const base = env.XDG_CACHE_HOME ? expand(env.XDG_CACHE_HOME) : path.join(os.homedir(), '.cache');
  return path.join(base, 'frognano');
}

/** The server's cache folder for the project at `folder`: `<root>/projects/<name>-<sha1[:12]>`. */
export function projectCache(folder: string, env: NodeJS.ProcessEnv = process.env): string {
  let real = folder;
  try {
    real = fs.realpathSync(folder);
  } catch {
    real = path.resolve(folder);
  }
  const digest = crypto.createHash('sha1').update(real, 'utf8').digest('hex').slice(0, 12);
  return path.join(cacheRoot(env), 'projects', `${path.basename(real) || 'root'}-${digest}`);
}

export interface EpisodeRecord {
  path: string;
  folder: string;
  mtimeMs: number;
}

/** Episode records of these project folders, newest first. */
export function listEpisodes(folders: readonly string[], env: NodeJS.ProcessEnv = process.env): EpisodeRecord[] {
  const out: EpisodeRecord[] = [];
  for (const folder of folders) {
    const dir = path.join(projectCache(folder, env), 'episodes');
    let names: string[] = [];
    try {
      names = fs.readdirSync(dir).filter((n) => n.endsWith('.json'));
    } catch {
      continue;
    }
    for (const name of names) {
      const file = path.join(dir, name);
      try {
        out.push({ path: file, folder, mtimeMs: fs.statSync(file).mtimeMs });
      } catch {
        // removed meanwhile
      }
    }
  }
  return out.sort((a, b) => b.mtimeMs - a.mtimeMs);
}
