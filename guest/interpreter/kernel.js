// sandlot code-interpreter kernel for javascript and typescript contexts.
//
// Started by guest/interpreter as `node -e <this file> [typescript]`. The
// protocol is kernel.py's: requests as JSON lines on fd 3, messages as JSON
// lines on fd 4, "ready" first and "done" after each cell. Cells run in this
// process's global scope, so declarations and globals persist between them,
// as in Node's REPL; the completion value of a cell is its result.
(() => {
  'use strict';
  const fs = require('fs');
  const readline = require('readline');
  const util = require('util');
  const vm = require('vm');

  const REQ_FD = 3;
  const MSG_FD = 4;
  const typescript = process.argv[1] === 'typescript';
  // Debian's node finds its packages (node-typescript) on its own; another
  // node build is pointed at Debian's directory.
  const requireTypeScript = () => {
    try {
      return require('typescript');
    } catch (_) {
      return require('/usr/share/nodejs/typescript');
    }
  };
  let tsc = null;
  if (typescript) {
    try {
      tsc = requireTypeScript();
    } catch (e) {
      process.stderr.write('typescript contexts need the TypeScript compiler in the sandbox image ' +
        '(Debian: apt-get install node-typescript): ' + e.message + '\n');
      process.exit(1);
    }
  }

  let active = false;
  let count = 0;

  const now = () => new Date().toISOString().replace(/Z$/, '000Z');
  const emit = (msg, always) => {
    if (!active && !always) return;
    fs.writeSync(MSG_FD, JSON.stringify(msg) + '\n');
  };

  // User output becomes stdout/stderr messages while a cell runs.
  const writer = (name) => (chunk, encoding, cb) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    emit({ type: name, text, timestamp: now() });
    if (typeof encoding === 'function') encoding();
    else if (typeof cb === 'function') cb();
    return true;
  };
  process.stdout.write = writer('stdout');
  process.stderr.write = writer('stderr');
  globalThis.console = new console.Console({ stdout: process.stdout, stderr: process.stderr });
  globalThis.require = require;
  globalThis.module = module;
  globalThis.exports = {}; // what TypeScript's CommonJS output writes to

  const show = (value) => {
    const msg = { type: 'result', is_main_result: true };
    msg.text = typeof value === 'string' ? value : util.inspect(value, { depth: 4 });
    if (value !== null && typeof value === 'object' && !Array.isArray(value) && !(value instanceof Error)) {
      try {
        msg.json = JSON.parse(JSON.stringify(value));
      } catch (_) { /* not JSON-able: text only */ }
    }
    emit(msg);
  };

  const errorMessage = (e) => {
    if (e instanceof Error || (e && typeof e === 'object' && 'message' in e)) {
      return { type: 'error', name: e.name || 'Error', value: String(e.message), traceback: String(e.stack || '') };
    }
    return { type: 'error', name: 'Error', value: String(e), traceback: '' };
  };

  const transpile = (code) => {
    if (!typescript) return code;
    const out = tsc.transpileModule(code, {
      reportDiagnostics: true,
      compilerOptions: { target: tsc.ScriptTarget.ES2022, module: tsc.ModuleKind.CommonJS, alwaysStrict: false },
    });
    const errs = (out.diagnostics || []).filter((d) => d.category === tsc.DiagnosticCategory.Error);
    if (errs.length) {
      const e = new SyntaxError(errs.map((d) => tsc.flattenDiagnosticMessageText(d.messageText, '\n')).join('\n'));
      e.name = 'TSError';
      throw e;
    }
    return out.outputText;
  };

  // compile makes the cell a script. One that uses top-level await becomes
  // an async function returning its last line's value when that line is an
  // expression; its declarations are then local to the cell (Node's REPL
  // rewrites them with a parser, which this kernel does without).
  const compile = (code, name) => {
    try {
      return new vm.Script(code, { filename: name });
    } catch (e) {
      if (!(e instanceof SyntaxError) || !/\bawait\b/.test(code)) throw e;
    }
    const lines = code.replace(/\s+$/, '').split('\n');
    const last = lines.pop().replace(/;\s*$/, '');
    const attempts = [lines.join('\n') + '\nreturn (' + last + '\n);', code];
    for (const [i, body] of attempts.entries()) {
      try {
        return new vm.Script('(async () => {' + body + '\n})()', { filename: name });
      } catch (e) {
        if (i === attempts.length - 1) throw e;
      }
    }
  };

  const run = async (req) => {
    const name = '<cell-' + count + '>';
    Object.assign(process.env, req.globals || {});
    const env = req.env || {};
    const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
    Object.assign(process.env, env);
    try {
      let value = compile(transpile(req.code || ''), name).runInThisContext({ breakOnSigint: true });
      if (value instanceof Promise) value = await value;
      if (value !== undefined) {
        globalThis._ = value;
        show(value);
      }
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  };

  const execute = async (req) => {
    count += 1;
    active = true;
    emit({ type: 'number_of_executions', execution_count: count });
    try {
      await run(req);
    } catch (e) {
      emit(errorMessage(e));
    }
    active = false;
    emit({ type: 'done' }, true);
  };

  process.on('SIGINT', () => {}); // between cells an interrupt is a no-op
  process.on('uncaughtException', (e) => emit({ ...errorMessage(e), name: 'Uncaught' + (e && e.name ? e.name : 'Error') }));
  process.on('unhandledRejection', (e) => emit(errorMessage(e)));

  const lines = readline.createInterface({ input: fs.createReadStream(null, { fd: REQ_FD }) });
  let queue = Promise.resolve();
  lines.on('line', (line) => {
    queue = queue.then(() => execute(JSON.parse(line)));
  });
  lines.on('close', () => process.exit(0));
  emit({ type: 'ready', pid: process.pid, node: process.version }, true);
})();
