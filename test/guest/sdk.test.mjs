// The real, unmodified E2B SDKs against sandlot-guest running on the host.
// Debug mode (E2B_DEBUG=true): envd at localhost:49983, the code
// interpreter at localhost:49999, no control-plane calls.
// Run by test/guest/guest_test.go (make test-guest), which starts the agent.
import { test, before } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { CommandExitError, FileType, FilesystemEventType } from 'e2b'

let sbx

before(async () => {
  assert.equal(process.env.E2B_DEBUG, 'true', 'run with E2B_DEBUG=true')
  sbx = await CodeSandbox.create()
})

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function until(what, f, ms = 5000) {
  const end = Date.now() + ms
  for (;;) {
    if (await f()) return
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`)
    await sleep(50)
  }
}

test('commands.run: stdout, stderr, exit code', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\n')
  assert.equal(r.stderr, 'err\n')
})

test('commands.run: env and cwd', async () => {
  await sbx.files.makeDir('/tmp/work')
  const r = await sbx.commands.run('echo "$GREETING"; pwd', { envs: { GREETING: 'hello sandlot' }, cwd: '/tmp/work' })
  assert.equal(r.stdout, 'hello sandlot\n/tmp/work\n')
})

test('commands.run: a non-zero exit raises CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo bad >&2; exit 3'), (err) => {
    assert.ok(err instanceof CommandExitError, `got ${err}`)
    assert.equal(err.exitCode, 3)
    assert.equal(err.stderr, 'bad\n')
    return true
  })
})

test('commands.run: output is streamed to callbacks', async () => {
  const seen = []
  await sbx.commands.run('for i in 1 2 3; do echo $i; done', { onStdout: (d) => seen.push(d) })
  assert.equal(seen.join(''), '1\n2\n3\n')
})

test('commands: a background command is listed and killed', async () => {
  const h = await sbx.commands.run('sleep 60', { background: true })
  assert.ok(h.pid > 0)
  const listed = await sbx.commands.list()
  assert.ok(listed.some((p) => p.pid === h.pid), `pid ${h.pid} not in ${JSON.stringify(listed)}`)
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), CommandExitError)
  await until('process gone from list', async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid))
  assert.equal(await sbx.commands.kill(h.pid), false, 'killing a gone process reports false')
})

test('commands: stdin is sent and closed', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'line one\n')
  await sbx.commands.sendStdin(h.pid, 'line two\n')
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.stdout, 'line one\nline two\n')
})

test('pty: create, send input, resize, kill', async () => {
  let out = ''
  const dec = new TextDecoder()
  const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d) } })
  assert.ok(pty.pid > 0)
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo "pty-$((40+2))"\n'))
  await until('pty echo', () => out.includes('pty-42'))
  await sbx.pty.resize(pty.pid, { cols: 123, rows: 45 })
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size\n'))
  await until('resized pty', () => out.includes('45 123'))
  assert.equal(await sbx.pty.kill(pty.pid), true)
  await assert.rejects(pty.wait())
})

test('files: write, read, exists, list, rename, remove, makeDir', async () => {
  const info = await sbx.files.write('/tmp/files/a.txt', 'alpha')
  assert.equal(info.path, '/tmp/files/a.txt')
  assert.equal(await sbx.files.read('/tmp/files/a.txt'), 'alpha')
  assert.equal(await sbx.files.exists('/tmp/files/a.txt'), true)
  assert.equal(await sbx.files.exists('/tmp/files/nope.txt'), false)
  assert.equal(await sbx.files.makeDir('/tmp/files/sub'), true)
  assert.equal(await sbx.files.makeDir('/tmp/files/sub'), false, 'makeDir of an existing dir is false')
  const entries = await sbx.files.list('/tmp/files')
  const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
  assert.equal(byName['a.txt'].type, FileType.FILE)
  assert.equal(byName['sub'].type, FileType.DIR)
  assert.equal(byName['a.txt'].path, '/tmp/files/a.txt')
  const moved = await sbx.files.rename('/tmp/files/a.txt', '/tmp/files/sub/b.txt')
  assert.equal(moved.path, '/tmp/files/sub/b.txt')
  assert.equal(await sbx.files.read('/tmp/files/sub/b.txt'), 'alpha')
  assert.equal(await sbx.files.exists('/tmp/files/a.txt'), false)
  await sbx.files.remove('/tmp/files/sub')
  assert.equal(await sbx.files.exists('/tmp/files/sub'), false)
  // What the SDK wrote, a command sees: one view of the filesystem.
  await sbx.files.write('/tmp/files/c.txt', 'gamma')
  assert.equal((await sbx.commands.run('cat /tmp/files/c.txt')).stdout, 'gamma')
  await assert.rejects(sbx.files.read('/tmp/files/missing'), /not found|does not exist/i)
})

test('files.watchDir: events for create, write, remove', async () => {
  await sbx.files.makeDir('/tmp/watched')
  const events = []
  const w = await sbx.files.watchDir('/tmp/watched', (e) => events.push(e), { recursive: true })
  await sbx.files.write('/tmp/watched/new.txt', 'one')
  await sbx.commands.run('echo more >> /tmp/watched/new.txt; mkdir /tmp/watched/d; touch /tmp/watched/d/inner')
  await sbx.files.remove('/tmp/watched/new.txt')
  const has = (type, name) => events.some((e) => e.type === type && e.name === name)
  await until('watch events', () => has(FilesystemEventType.CREATE, 'new.txt') &&
    has(FilesystemEventType.WRITE, 'new.txt') && has(FilesystemEventType.REMOVE, 'new.txt') &&
    has(FilesystemEventType.CREATE, 'd/inner'))
  await w.stop()
})

test('files: a 50 MB upload and download are intact', async () => {
  const data = randomBytes(50 * 1024 * 1024)
  const want = createHash('sha256').update(data).digest('hex')
  await sbx.files.write('/tmp/big.bin', new Blob([data]))
  const got = await sbx.files.read('/tmp/big.bin', { format: 'bytes' })
  assert.equal(got.length, data.length)
  assert.equal(createHash('sha256').update(got).digest('hex'), want)
  const sum = await sbx.commands.run('sha256sum /tmp/big.bin')
  assert.equal(sum.stdout.split(' ')[0], want)
})

test('runCode: a value, stdout, state across calls', async () => {
  const ex = await sbx.runCode('x = 41\nprint("hello from python")\nx + 1')
  assert.equal(ex.text, '42')
  assert.deepEqual(ex.logs.stdout, ['hello from python\n'])
  assert.equal(ex.error, undefined)
  const again = await sbx.runCode('x * 2')
  assert.equal(again.text, '82', 'a variable is kept across calls')
})

test('runCode: an error with its traceback', async () => {
  const ex = await sbx.runCode('def f():\n    return 1/0\nf()')
  assert.ok(ex.error, 'expected an error')
  assert.equal(ex.error.name, 'ZeroDivisionError')
  assert.match(ex.error.value, /division by zero/)
  assert.match(ex.error.traceback, /ZeroDivisionError/)
})

test('runCode: a restarted context forgets', async () => {
  const ctx = await sbx.createCodeContext()
  assert.equal((await sbx.runCode('y = 7\ny', { context: ctx })).text, '7')
  assert.equal((await sbx.runCode('y', { context: ctx })).text, '7')
  await sbx.restartCodeContext(ctx)
  const ex = await sbx.runCode('y', { context: ctx })
  assert.equal(ex.error?.name, 'NameError')
})
