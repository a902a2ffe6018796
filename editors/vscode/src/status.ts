// Rendering of the `frognano/status` notification for the status bar item.
// No `vscode` import here, so the text is unit-tested in plain Node (test/unit.test.js).

export type TestState = 'idle' | 'running' | 'passing' | 'failing' | 'fixing' | 'fixed' | 'error';

/** Params of the custom `frognano/status` notification (server -> client). */
export interface StatusParams {
  state: TestState;
  failing: number;
  autoFix: string;
  message: string;
}

export const STATUS_NOTIFICATION = 'frognano/status';

export interface StatusView {
  /** Status bar text, with codicons. */
  text: string;
  /** Plain-text tooltip. */
  tooltip: string;
  /** Drives the item's background colour. */
  severity: 'none' | 'warning' | 'error';
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** "$(beaker) FrogNano: 1 failing · auto-fix: suggest" and friends. Tolerates partial params. */
export function renderStatus(status: Partial<StatusParams>): StatusView {
  const failing = typeof status.failing === 'number' && status.failing > 0 ? status.failing : 0;
  const autoFix = status.autoFix || 'off';
  let icon = '$(beaker)';
  let label: string | undefined;
  let severity: StatusView['severity'] = 'none';
  switch (status.state) {
    case 'running':
      icon = '$(sync~spin)';
      label = 'running tests';
      break;
    case 'passing':
      label = 'tests pass';
      break;
    case 'failing':
      label = `${failing} failing`;
      severity = 'error';
      break;
    case 'fixing':
      icon = '$(sync~spin)';
      label = failing ? `fixing ${failing} failing` : 'fixing';
      severity = 'warning';
      break;
    case 'fixed':
      icon = '$(check)';
      label = 'fix verified';
      break;
    case 'error':
      icon = '$(warning)';
      label = 'error';
      severity = 'error';
      break;
    case 'idle':
    default:
      label = undefined;
  }
  const text = `${icon} FrogNano${label ? `: ${label}` : ''} · auto-fix: ${autoFix}`;
  const lines = [status.message?.trim() || `FrogNano: ${status.state ?? 'idle'}`];
  if (failing && status.state !== 'failing' && status.state !== 'fixing') {
    lines.push(`${plural(failing, 'failing test')}`);
  }
  lines.push(`Auto-fix: ${autoFix}. Click to cycle off → suggest → apply.`);
  return { text, tooltip: lines.join('\n'), severity };
}

/** The text before the server has reported anything, or while it is (re)starting or stopped. */
export function renderLifecycle(phase: 'starting' | 'stopped', autoFix: string, detail?: string): StatusView {
  if (phase === 'starting') {
    return {
      text: `$(sync~spin) FrogNano: starting · auto-fix: ${autoFix}`,
      tooltip: 'Starting `frognano serve`…',
      severity: 'none',
    };
  }
  return {
    text: '$(warning) FrogNano: stopped',
    tooltip: `${detail ?? 'The FrogNano server is not running.'}\nClick to show the FrogNano output.`,
    severity: 'warning',
  };
}
