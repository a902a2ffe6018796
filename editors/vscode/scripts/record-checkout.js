// @ts-check
// Run by `vscode:prepublish` (so by `vsce package`): records in out/checkout.json the FrogNano
// checkout the .vsix is built from.  The installed extension lives under ~/.vscode/extensions,
// far from that checkout, yet the README installs the server in the checkout's .venv: this
// record is how the extension finds it there (serverPath.ts, `builtFrom`).
'use strict';

const fs = require('node:fs');
const path = require('node:path');

const checkout = path.resolve(__dirname, '..', '..', '..');
const out = path.resolve(__dirname, '..', 'out');
fs.mkdirSync(out, { recursive: true });
fs.writeFileSync(path.join(out, 'checkout.json'), JSON.stringify({ checkout }) + '\n');
console.log(`recorded the FrogNano checkout ${checkout} in out/checkout.json`);
