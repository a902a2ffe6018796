// FrogNano for VS Code: a thin client for `frognano serve`.
//
// Everything interesting happens in the server: failing tests become diagnostics, verified fixes
// become code actions carrying versioned WorkspaceEdits, fix jobs report `$/progress`, and the
// commands are server-side (vscode-languageclient registers whatever the server lists in
// `executeCommandProvider`). This file only starts the server, maps settings, shows the
// `frognano/status` notification in the status bar and adds restart / output commands.

import * as vscode from 'vscode';
import {
  ConfigurationParams,
  ConfigurationRequest,
  DidChangeConfigurationNotification,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
} from 'vscode-languageclient/node';

import { listEpisodes } from './episodes';
import { collectSettings, FrogNanoSettings, sectionValue } from './settings';
import { describeTried, resolveServer } from './serverPath';
import { renderLifecycle, renderStatus, STATUS_NOTIFICATION, StatusParams, StatusView } from './status';

const SECTION = 'frognano';

/** Commands the server implements (contributed to the palette in package.json). */
export const SERVER_COMMANDS = [
  'frognano.runTests',
  'frognano.fix',
  'frognano.applyFix',
  'frognano.toggleAutoFix',
  'frognano.undoFix',
  'frognano.showDiagnosis',
  'frognano.showEpisode',
] as const;

/** Server commands that act on a document: from the palette they get the active Python file. */
const DOCUMENT_COMMANDS = new Set<string>(['frognano.runTests', 'frognano.fix', 'frognano.applyFix', 'frognano.undoFix', 'frognano.showDiagnosis']);

class FrogNano implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private readonly output: vscode.OutputChannel;
  private readonly status: vscode.StatusBarItem;
  private readonly disposables: vscode.Disposable[] = [];
  /** Stand-ins for server commands while no server provides them (never found, crashed, old). */
  private fallbacks: vscode.Disposable[] = [];
  private lastStatus: Partial<StatusParams> | undefined;
  private readonly warned = new Set<string>();
  private starting: Promise<void> | undefined;
  /** Whether the user was already told that no `frognano` executable was found. */
  private toldMissing = false;

  constructor(private readonly extensionPath?: string) {
    this.output = vscode.window.createOutputChannel('FrogNano');
    this.status = vscode.window.createStatusBarItem('frognano.status', vscode.StatusBarAlignment.Left, 50);
    this.status.name = 'FrogNano';
    this.disposables.push(
      this.output,
      this.status,
      vscode.commands.registerCommand('frognano.restartServer', () => this.restart()),
      vscode.commands.registerCommand('frognano.showOutput', () => this.output.show(true)),
      vscode.workspace.onDidChangeConfiguration((event) => this.onConfigurationChanged(event)),
    );
  }

  // ---------------------------------------------------------------- settings

  private scopeFor(uri?: vscode.Uri): vscode.ConfigurationScope | undefined {
    return uri ?? vscode.workspace.workspaceFolders?.[0]?.uri;
  }

  /** The `frognano` section for one scope (see settings.ts for what is sent and why). */
  settings(uri?: vscode.Uri): FrogNanoSettings {
    const config = vscode.workspace.getConfiguration(SECTION, this.scopeFor(uri));
    return collectSettings(
      (key) => config.inspect(key),
      (message) => {
        if (!this.warned.has(message)) {
          this.warned.add(message);
          this.output.appendLine(`[settings] ${message}`);
        }
      },
    );
  }

  /** workspace/configuration: our section from `settings()`, anything else the default way. */
  private async answerConfiguration(
    params: ConfigurationParams,
    token: vscode.CancellationToken,
    next: ConfigurationRequest.HandlerSignature,
  ): Promise<unknown[]> {
    const ours = (section: string | undefined) => section === SECTION || !!section?.startsWith(`${SECTION}.`);
    const others = params.items.filter((item) => !ours(item.section));
    let otherValues: unknown[] = [];
    if (others.length) {
      const answer = await next({ items: others }, token);
      otherValues = Array.isArray(answer) ? answer : others.map(() => null);
    }
    return params.items.map((item) => {
      if (!ours(item.section)) {
        return otherValues.shift() ?? null;
      }
      const scope = item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined;
      return sectionValue(item.section as string, this.settings(scope));
    });
  }

  private onConfigurationChanged(event: vscode.ConfigurationChangeEvent): void {
    if (event.affectsConfiguration(`${SECTION}.serverPath`)) {
      this.output.appendLine('[client] frognano.serverPath changed: restarting the server');
      void this.restart();
      return;
    }
    if (!this.client && event.affectsConfiguration(`${SECTION}.python`)) {
      // No server was found: the new interpreter's directory may hold one.
      this.output.appendLine('[client] frognano.python changed: looking for the server again');
      void this.restart();
      return;
    }
    if (!event.affectsConfiguration(SECTION) || event.affectsConfiguration(`${SECTION}.trace`)) {
      return;
    }
    if (this.client?.state === State.Running) {
      // Push the whole section (VS Code's convention: `{settings: {frognano: {...}}}`); a server
      // that prefers the pull model re-asks with workspace/configuration.
      void this.client
        .sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: this.settings() } })
        .catch((error) => this.output.appendLine(`[client] didChangeConfiguration failed: ${error}`));
    }
    if (!this.lastStatus && this.client?.state === State.Running) {
      this.showLifecycle(undefined); // shows the new auto-fix mode until the server reports
    }
  }

  // ---------------------------------------------------------------- status bar

  private paint(view: StatusView, command: string): void {
    this.status.text = view.text;
    this.status.tooltip = view.tooltip;
    this.status.command = command;
    this.status.backgroundColor =
      view.severity === 'error'
        ? new vscode.ThemeColor('statusBarItem.errorBackground')
        : view.severity === 'warning'
          ? new vscode.ThemeColor('statusBarItem.warningBackground')
          : undefined;
    this.status.show();
  }

  private onStatus(params: Partial<StatusParams>): void {
    this.lastStatus = params;
    this.paint(renderStatus(params), 'frognano.toggleAutoFix');
  }

  private showLifecycle(phase: 'starting' | 'stopped' | undefined, detail?: string): void {
    const autoFix = String(this.settings().autoFix ?? 'off');
    if (phase === undefined) {
      this.paint(renderStatus({ state: 'idle', autoFix, failing: 0, message: 'FrogNano is running.' }), 'frognano.toggleAutoFix');
    } else {
      this.paint(renderLifecycle(phase, autoFix, detail), 'frognano.showOutput');
    }
  }

  // ---------------------------------------------------------------- lifecycle

  private clearFallbacks(): void {
    this.fallbacks.forEach((d) => d.dispose());
    this.fallbacks = [];
  }

  private registerFallbacks(commands: readonly string[], reason: string): void {
    this.clearFallbacks();
    for (const command of commands) {
      this.fallbacks.push(
        vscode.commands.registerCommand(command, async () => {
          const choice = await vscode.window.showErrorMessage(`FrogNano: ${command} is unavailable: ${reason}`, 'Show Output', 'Restart Server');
          if (choice === 'Show Output') {
            this.output.show(true);
          } else if (choice === 'Restart Server') {
            await this.restart();
          }
        }),
      );
    }
  }

  /** Arguments for a document command run from the palette: the active Python file's URI. */
  private defaultArguments(command: string): unknown[] {
    if (!DOCUMENT_COMMANDS.has(command)) {
      return [];
    }
    const editor = vscode.window.activeTextEditor;
    if (editor && editor.document.uri.scheme === 'file' && editor.document.languageId === 'python') {
      return [editor.document.uri.toString()];
    }
    return [];
  }

  /** frognano.showEpisode from the palette: pick one of the workspace's episode records. */
  private async pickEpisode(): Promise<string | undefined> {
    const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => f.uri.fsPath);
    const records = listEpisodes(folders);
    if (!records.length) {
      const picked = await vscode.window.showOpenDialog({
        title: 'No episode records for this workspace yet: open one',
        canSelectMany: false,
        filters: { 'FrogNano episode records': ['json'] },
      });
      return picked?.[0]?.fsPath;
    }
    const multiRoot = folders.length > 1;
    const item = await vscode.window.showQuickPick(
      records.map((r) => ({
        label: new Date(r.mtimeMs).toLocaleString(),
        description: multiRoot ? vscode.workspace.asRelativePath(r.folder) : undefined,
        detail: r.path,
        record: r.path,
      })),
      { placeHolder: 'Model repair episode to show (newest first)', matchOnDetail: true },
    );
    return item?.record;
  }

  /** Palette runs pass no arguments: fill in what the server needs, or undefined to cancel. */
  private async withArguments(command: string, args: unknown[]): Promise<unknown[] | undefined> {
    if (args.length) {
      return args;
    }
    if (command === 'frognano.showEpisode') {
      const record = await this.pickEpisode();
      return record ? [record] : undefined;
    }
    return this.defaultArguments(command);
  }

  start(): Promise<void> {
    if (!this.starting) {
      this.starting = this.doStart().finally(() => {
        this.starting = undefined;
      });
    }
    return this.starting;
  }

  private async doStart(): Promise<void> {
    this.clearFallbacks();
    this.lastStatus = undefined;
    const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => f.uri.fsPath);
    const config = vscode.workspace.getConfiguration(SECTION, this.scopeFor());
    const setting = config.get<string>('serverPath');
    const server = resolveServer(setting, folders, process.env, {
      python: config.get<string>('python'),
      extensionPath: this.extensionPath,
    });
    if (!server.found) {
      const places = describeTried(server.tried);
      const reason =
        server.source === 'setting'
          ? `frognano.serverPath is "${setting}", which is not an executable.`
          : `no \`frognano\` executable found. Looked in: ${places.join('; ')}.`;
      this.output.appendLine(`[client] cannot start the server: no executable frognano; looked in:`);
      places.forEach((place) => this.output.appendLine(`[client]   ${place}`));
      this.output.appendLine('[client] Install FrogNano in one of these (e.g. `pip install -e /path/to/frognano` in the project .venv) or set frognano.serverPath.');
      this.showLifecycle('stopped', `Cannot start the server: ${reason}`);
      this.registerFallbacks(SERVER_COMMANDS, reason);
      // Once per session: restarts and settings changes that still find nothing only log it.
      if (this.toldMissing) {
        return;
      }
      this.toldMissing = true;
      void vscode.window
        .showErrorMessage(`FrogNano: cannot start the server: ${reason}`, 'Open Settings', 'Show Output')
        .then((choice) => {
          if (choice === 'Open Settings') {
            void vscode.commands.executeCommand('workbench.action.openSettings', 'frognano.serverPath');
          } else if (choice === 'Show Output') {
            this.output.show(true);
          }
        });
      return;
    }
    this.output.appendLine(`[client] starting ${server.command} serve -v (from ${server.source})`);

    const serverOptions: ServerOptions = {
      command: server.command,
      args: ['serve', '-v'],
      options: { cwd: folders[0], env: { ...process.env } },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: 'file', language: 'python' }],
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: () => this.settings(),
      middleware: {
        workspace: {
          configuration: (params, token, next) => this.answerConfiguration(params, token, next),
          // We push the full section ourselves (onConfigurationChanged); without this a server
          // that registers for didChangeConfiguration dynamically would get it twice.
          didChangeConfiguration: async () => undefined,
        },
        executeCommand: async (command, args, next) => {
          const filled = await this.withArguments(command, args);
          return filled === undefined ? undefined : next(command, filled);
        },
      },
    };
    const client = new LanguageClient('frognano', 'FrogNano', serverOptions, clientOptions);
    this.client = client;
    client.onDidChangeState((event) => {
      if (this.client !== client) {
        return;
      }
      if (event.newState === State.Starting) {
        this.showLifecycle('starting');
      } else if (event.newState === State.Stopped) {
        this.lastStatus = undefined;
        this.showLifecycle('stopped');
      } else if (event.newState === State.Running && !this.lastStatus) {
        this.showLifecycle(undefined);
      }
    });
    client.onNotification(STATUS_NOTIFICATION, (params: Partial<StatusParams>) => this.onStatus(params ?? {}));
    this.showLifecycle('starting');
    try {
      await client.start();
    } catch (error) {
      this.output.appendLine(`[client] the server failed to start: ${error}`);
      this.showLifecycle('stopped', `The server failed to start: ${error}`);
      this.registerFallbacks(SERVER_COMMANDS, 'the server failed to start (see the FrogNano output).');
      return;
    }
    const provided = new Set(client.initializeResult?.capabilities.executeCommandProvider?.commands ?? []);
    const missing = SERVER_COMMANDS.filter((command) => !provided.has(command));
    if (missing.length) {
      this.output.appendLine(`[client] the server does not provide: ${missing.join(', ')}`);
      this.registerFallbacks(missing, 'this frognano server does not provide it (upgrade frognano?).');
    }
    if (!this.lastStatus) {
      this.showLifecycle(undefined);
    }
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.dispose(3000);
      } catch (error) {
        this.output.appendLine(`[client] stopping the server: ${error}`);
      }
    }
  }

  async restart(): Promise<void> {
    await this.starting?.catch(() => undefined);
    await this.stop();
    await this.start();
  }

  dispose(): void {
    this.clearFallbacks();
    this.disposables.forEach((d) => d.dispose());
  }
}

let frognano: FrogNano | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  frognano = new FrogNano(context.extensionPath);
  context.subscriptions.push(frognano);
  await frognano.start();
}

export async function deactivate(): Promise<void> {
  await frognano?.stop();
  frognano = undefined;
}
