// The `frognano` settings section as the server receives it (initializationOptions,
// workspace/configuration and workspace/didChangeConfiguration).
//
// No `vscode` import here, so the mapping is unit-tested in plain Node (test/unit.test.js).

/** What `WorkspaceConfiguration.inspect` reports for one key (the scopes we honour). */
export interface Inspected<T = unknown> {
  defaultValue?: T;
  globalValue?: T;
  workspaceValue?: T;
  workspaceFolderValue?: T;
}

type Kind = 'string' | 'number' | 'integer' | 'boolean' | 'string[]' | 'autoFix';

/**
 * Settings that tune the test runner and the fix search. They are sent only when the user set
 * them in VS Code (user, workspace or folder settings): left at their defaults they defer to
 * `[tool.frognano]` in the project's pyproject.toml, which the server reads itself. Sending the
 * package.json defaults would silently override a project's own configuration.
 */
export const ENGINE_SETTINGS: Readonly<Record<string, Kind>> = {
  model: 'string',
  testArgs: 'string[]',
  timeout: 'number',
  maxCandidates: 'integer',
  maxPairs: 'integer',
  searchSeconds: 'number',
  episodes: 'integer',
  python: 'string',
  allowTestEdits: 'boolean',
  allowDataEdits: 'boolean',
};

/** Editor behaviour: always sent, with the VS Code default when unset. */
export const EDITOR_SETTINGS: Readonly<Record<string, Kind>> = {
  autoFix: 'autoFix',
  debounceMs: 'integer',
};

export const AUTO_FIX_MODES = ['off', 'suggest', 'apply'] as const;
export type AutoFixMode = (typeof AUTO_FIX_MODES)[number];

/** Settings read by the extension itself, never sent to the server. */
export const CLIENT_ONLY_SETTINGS = ['serverPath', 'trace.server'] as const;

export type FrogNanoSettings = Record<string, string | number | boolean | string[]>;

function valid(kind: Kind, value: unknown): boolean {
  switch (kind) {
    case 'string':
      return typeof value === 'string' && value.trim() !== '';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'string[]':
      return Array.isArray(value) && value.every((v) => typeof v === 'string');
    case 'autoFix':
      return typeof value === 'string' && (AUTO_FIX_MODES as readonly string[]).includes(value);
  }
}

/** The most specific value the user set, or undefined when every scope is at its default. */
export function explicitValue<T>(inspected: Inspected<T> | undefined): T | undefined {
  if (!inspected) {
    return undefined;
  }
  return inspected.workspaceFolderValue ?? inspected.workspaceValue ?? inspected.globalValue;
}

/**
 * Build the section for one scope. `inspect(key)` is `getConfiguration('frognano', scope).inspect`;
 * `warn` receives one line per value of the wrong type (it is dropped, the server default applies).
 */
export function collectSettings(
  inspect: (key: string) => Inspected | undefined,
  warn: (message: string) => void = () => undefined,
): FrogNanoSettings {
  const out: FrogNanoSettings = {};
  const take = (key: string, kind: Kind, value: unknown) => {
    if (value === undefined || value === null || (kind === 'string' && value === '')) {
      return;
    }
    if (valid(kind, value)) {
      out[key] = kind === 'string' ? (value as string).trim() : (value as string | number | string[]);
    } else {
      warn(`frognano.${key}: ignoring ${JSON.stringify(value)} (expected ${kind === 'autoFix' ? AUTO_FIX_MODES.join(' | ') : kind})`);
    }
  };
  for (const [key, kind] of Object.entries(ENGINE_SETTINGS)) {
    take(key, kind, explicitValue(inspect(key)));
  }
  for (const [key, kind] of Object.entries(EDITOR_SETTINGS)) {
    const inspected = inspect(key);
    const value = explicitValue(inspected);
    if (value !== undefined && valid(kind, value)) {
      out[key] = value as string | number;
    } else {
      if (value !== undefined) {
        take(key, kind, value); // only to warn
      }
      if (inspected?.defaultValue !== undefined) {
        out[key] = inspected.defaultValue as string | number;
      }
    }
  }
  return out;
}

/** The value for a `workspace/configuration` item whose section is `frognano` or `frognano.x`. */
export function sectionValue(section: string, settings: FrogNanoSettings): unknown {
  if (section === 'frognano') {
    return settings;
  }
  const key = section.slice('frognano.'.length);
  return key in settings ? settings[key] : null;
}
