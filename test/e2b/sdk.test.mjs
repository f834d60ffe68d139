// The real, unmodified E2B SDKs against sandlot-api on a real cluster.
// Run by test/e2b/e2b_test.go (make test-e2b), once per proxy mode:
//   SANDLOT_MODE=sandbox-url  E2B_SANDBOX_URL points every sandbox call at
//                             the API server (E2b-Sandbox-Id/-Port headers)
//   SANDLOT_MODE=domain       E2B_DOMAIN: the SDK calls
//                             https://<port>-<id>.<domain> (resolve.mjs maps
//                             the wildcard name to the API server)
import { test, before, after, afterEach } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox as CodeSandbox } from '@e2b/code-interpreter'
import { Sandbox, Volume, Secret, CommandExitError, AuthenticationError } from 'e2b'
import { createHash, randomUUID } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'

const apiUrl = process.env.E2B_API_URL
const apiKey = process.env.E2B_API_KEY
const mode = process.env.SANDLOT_MODE

// oneMode runs a test in sandbox-URL mode only: what it tries does not
// depend on how the SDK reaches the proxy, and the Python suite runs its
// own in domain mode (CI's time is close to its budget).
const oneMode = { skip: mode !== 'sandbox-url' && 'run in sandbox-URL mode (the Python suite runs it in domain mode)' }
const run = `${mode}-${Date.now()}` // this run's metadata tag
const created = []

let sbx

function track(s) {
  created.push(s)
  return s
}

// api calls the REST API directly (what the SDK has no method for).
async function api(method, path, { body, key = apiKey, headers = {} } = {}) {
  const res = await fetch(apiUrl + path, {
    method,
    headers: { 'X-API-KEY': key, 'Content-Type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  })
  const text = await res.text()
  return { status: res.status, json: text ? JSON.parse(text) : undefined, headers: res.headers }
}

before(async () => {
  assert.ok(apiUrl && apiKey && mode, 'run with E2B_API_URL, E2B_API_KEY and SANDLOT_MODE')
  sbx = await CodeSandbox.create({ metadata: { run, role: 'main' }, timeoutMs: 900_000 })
})

// A test's own sandboxes go when it ends (each with its own key, team-b's
// too): VMs of finished tests filled the nodes' CPU, and a later test's
// resume or clone, which restores on its snapshot's node, waited for room
// past the SDK's 60 s (the kubelet's OutOfcpu in the events).
afterEach(async () => {
  for (const s of created.splice(0)) await s.kill().catch(() => {})
})

after(async () => {
  await sbx?.kill().catch(() => {})
})

test('create: the default template, a sandbox ID and an access token', async () => {
  assert.match(sbx.sandboxId, /^[a-z0-9]{20}$/)
  const info = await sbx.getInfo()
  assert.equal(info.sandboxId, sbx.sandboxId)
  assert.equal(info.templateId, 'code-interpreter-v1')
  assert.equal(info.state, 'running')
  assert.deepEqual(info.metadata, { run, role: 'main' })
  assert.ok(info.cpuCount >= 1 && info.memoryMB >= 128, JSON.stringify(info))
  assert.equal(await sbx.isRunning(), true)
})

test('the default user: commands and files act as user in /home/user, who may sudo; curl and git are there', async () => {
  assert.equal((await sbx.commands.run('whoami; pwd; echo $HOME')).stdout, 'user\n/home/user\n/home/user\n')
  assert.equal((await sbx.files.write('rel-js.txt', 'relative')).path, '/home/user/rel-js.txt')
  const info = await sbx.files.getInfo('rel-js.txt')
  assert.deepEqual([info.path, info.owner, info.group], ['/home/user/rel-js.txt', 'user', 'user'])
  assert.equal((await sbx.commands.run('sudo -n whoami')).stdout, 'root\n')
  assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  const tools = (await sbx.commands.run('curl --version | head -1; git --version')).stdout
  assert.match(tools, /^curl [\s\S]*git version/)
})

test('commands.run: stdout, stderr, exit code and env', async () => {
  const r = await sbx.commands.run('echo out; echo err >&2; echo "$GREETING"', { envs: { GREETING: 'hi sandlot' } })
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'out\nhi sandlot\n')
  assert.equal(r.stderr, 'err\n')
  await assert.rejects(sbx.commands.run('exit 7'), (err) => err instanceof CommandExitError && err.exitCode === 7)
})

test('commands: a background command is listed and killed', async () => {
  const h = await sbx.commands.run('sleep 600', { background: true })
  assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid))
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(h.wait(), CommandExitError)
})

test('files: write, read, list, makeDir, exists, remove', async () => {
  await sbx.files.makeDir('/tmp/e2b-dir')
  await sbx.files.write('/tmp/e2b-dir/a.txt', 'alpha')
  assert.equal(await sbx.files.read('/tmp/e2b-dir/a.txt'), 'alpha')
  const names = (await sbx.files.list('/tmp/e2b-dir')).map((e) => e.name)
  assert.deepEqual(names, ['a.txt'])
  assert.equal(await sbx.files.exists('/tmp/e2b-dir/a.txt'), true)
  await sbx.files.remove('/tmp/e2b-dir/a.txt')
  assert.equal(await sbx.files.exists('/tmp/e2b-dir/a.txt'), false)
  await sbx.files.remove('/tmp/e2b-dir/a.txt') // gone already: no error, as on E2B
  // A large upload streams through the proxy.
  const big = 'x'.repeat(3 << 20)
  await sbx.files.write('/tmp/e2b-dir/big.txt', big)
  assert.equal((await sbx.files.read('/tmp/e2b-dir/big.txt')).length, big.length)
})

test('file metadata: written as headers, kept as user.e2b.* xattrs (on the disk), listed, kept by a rename, replaced by a write', async () => {
  const want = { owner: 'team-a', stage: 'raw' }
  const w = await sbx.files.write('/home/user/md-js/a.txt', 'data', { metadata: { Owner: 'team-a', stage: 'raw' } })
  assert.deepEqual(w.metadata, want)
  assert.deepEqual((await sbx.files.getInfo('/home/user/md-js/a.txt')).metadata, want)
  assert.deepEqual((await sbx.files.list('/home/user/md-js')).map((e) => e.metadata), [want])
  await sbx.files.rename('/home/user/md-js/a.txt', '/home/user/md-js/b.txt')
  assert.deepEqual((await sbx.files.getInfo('/home/user/md-js/b.txt')).metadata, want)
  const xattr = await sbx.commands.run(`python3 -c 'import os; print(os.getxattr("/home/user/md-js/b.txt", "user.e2b.owner").decode())'`)
  assert.equal(xattr.stdout.trim(), 'team-a')
  await sbx.files.write('/home/user/md-js/b.txt', 'again')
  assert.equal((await sbx.files.getInfo('/home/user/md-js/b.txt')).metadata, undefined)
})

// fileURL fetches a signed /files URL as a browser would; in sandbox-url
// mode with the routing headers the SDK's own requests carry.
async function fileURL(s, url, init = {}) {
  const headers = { ...(init.headers ?? {}) }
  if (mode === 'sandbox-url') Object.assign(headers, { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': '49983' })
  return fetch(url, { ...init, headers })
}

test('signed file URLs: download and upload without the token; a tampered or expired one refused', async () => {
  await sbx.files.write('/tmp/signed-js.txt', 'signed content')
  const url = await sbx.downloadUrl('/tmp/signed-js.txt', { useSignatureExpiration: 120 })
  assert.match(url, /signature=v1_.*signature_expiration=/)
  const res = await fileURL(sbx, url)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'signed content')
  assert.equal((await fileURL(sbx, url.replace('signature=v1_', 'signature=v1_x'))).status, 401)
  const up = await sbx.uploadUrl('/tmp/signed-up-js.txt', { useSignatureExpiration: 120 })
  const form = new FormData()
  form.append('file', new Blob(['uploaded']), 'x')
  const posted = await fileURL(sbx, up, { method: 'POST', body: form })
  assert.equal(posted.status, 200, await posted.text())
  assert.equal(await sbx.files.read('/tmp/signed-up-js.txt'), 'uploaded')
})

test('runCode: value, stdout, error with traceback, state kept', async () => {
  const a = await sbx.runCode('x = 20\nprint("hello")\nx + 22')
  assert.equal(a.text, '42')
  assert.deepEqual(a.logs.stdout, ['hello\n'])
  const b = await sbx.runCode('x * 2')
  assert.equal(b.text, '40')
  const c = await sbx.runCode('1/0')
  assert.equal(c.error.name, 'ZeroDivisionError')
  assert.match(c.error.traceback, /ZeroDivisionError/)
})

test('code contexts through the proxy, the SDK as it is: cwd, state, list, restart, remove', async () => {
  // The SDK sends these routes only E2B-Traffic-Access-Token (no
  // X-Access-Token): every sandbox's create answers one.
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
  assert.equal(ctx.cwd, '/tmp')
  assert.deepEqual((await sbx.runCode('import os\nprint(os.getcwd())', { context: ctx })).logs.stdout, ['/tmp\n'])
  await sbx.runCode('y = 7', { context: ctx })
  assert.equal((await sbx.runCode('y * 6', { context: ctx })).text, '42')
  assert.equal((await sbx.runCode('"y" in globals()')).text, 'False', 'the default context sees another context\'s state')
  assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id && c.cwd === '/tmp'))
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('y', { context: ctx })).error?.name, 'NameError')
  await sbx.removeCodeContext(ctx)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  // Another sandbox's traffic token opens none of this one's contexts.
  const other = track(await CodeSandbox.create({ metadata: { run, role: 'contexts' } }))
  assert.ok(other.trafficAccessToken, 'create answered no traffic access token')
  const res = await fetch(apiUrl + '/contexts', {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'E2B-Traffic-Access-Token': other.trafficAccessToken },
  })
  assert.equal(res.status, 401)
  assert.equal(await other.kill(), true)
})

test('runCode in javascript, typescript and bash: state kept, an error each; python runs !cmd and %pip', async () => {
  for (const [language, define, use, fail, errName] of [
    ['js', 'let n = 40', 'console.log("from js"); n + 2', 'missing.x', 'ReferenceError'],
    ['ts', 'const m: number = 40', 'console.log("from ts"); m + 2', 'null!.toString()', 'TypeError'],
  ]) {
    const ctx = await sbx.createCodeContext({ language })
    assert.equal(ctx.language, language === 'js' ? 'javascript' : 'typescript')
    assert.equal((await sbx.runCode(define, { context: ctx })).error, undefined)
    const r = await sbx.runCode(use, { context: ctx })
    assert.equal(r.text, '42', JSON.stringify(r))
    assert.deepEqual(r.logs.stdout, [`from ${language}\n`])
    assert.equal((await sbx.runCode(fail, { context: ctx })).error?.name, errName)
  }
  const sh = await sbx.createCodeContext({ language: 'bash' })
  await sbx.runCode('n=40; cd /tmp', { context: sh })
  assert.deepEqual((await sbx.runCode('echo $((n + 2)) $PWD', { context: sh })).logs.stdout, ['42 /tmp\n'])
  assert.equal((await sbx.runCode('ls /nonexistent', { context: sh })).error?.name, 'ExitCode')
  assert.equal((await sbx.runCode('6 * 7', { language: 'js' })).text, '42', 'the js default context')
  const py = await sbx.runCode('who = "hi"\n!echo {who} from the shell\n%pip --version')
  assert.equal(py.logs.stdout[0], 'hi from the shell\n')
  assert.match(py.logs.stdout.join(''), /^pip \d+/m)
  await assert.rejects(sbx.runCode('1', { language: 'r' }), /400/) // the body names what runs (unit-tested)
  for (const c of await sbx.listCodeContexts()) if (c.language !== 'python') await sbx.removeCodeContext(c)
})

test('the data stack: a matplotlib figure comes back as png, a DataFrame as a table', async () => {
  const fig = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()')
  assert.equal(fig.error, undefined, JSON.stringify(fig.error))
  const png = fig.results.find((r) => r.png)
  assert.ok(png, `no png result in ${JSON.stringify(fig.results.map((r) => r.formats()))}`)
  assert.equal(Buffer.from(png.png, 'base64').subarray(1, 4).toString(), 'PNG')
  const df = await sbx.runCode('import numpy as np, pandas as pd\npd.DataFrame({"a": np.arange(2), "b": ["x", "y"]})')
  assert.match(df.results[0].html, /<table/)
  assert.deepEqual(df.results[0].data, { a: [0, 1], b: ['x', 'y'] })
})

test('setTimeout moves the end; getMetrics reads the guest', async () => {
  await sbx.setTimeout(600_000)
  const info = await sbx.getInfo()
  const left = info.endAt.getTime() - Date.now()
  assert.ok(left > 540_000 && left <= 605_000, `endAt ${info.endAt.toISOString()} is ${left} ms away`)
  const metrics = await sbx.getMetrics()
  assert.ok(metrics.length >= 1)
  plausible(metrics[0])
})

test('logs and metrics over time: the start command\'s output, a series of samples, several sandboxes', async () => {
  // The image's start command holds its stdout (its start-up line went to
  // the template's builder): what it writes now is the pod's log.
  await sbx.commands.run('for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = sleep ] && echo written-by-the-start-command > $p/fd/1 && break; done',
    { user: 'root' })
  const id = sbx.sandboxId
  // The guest agent's own log too: that command started and ended.
  const wanted = ['written-by-the-start-command', 'process started', 'process ended']
  let v2
  for (let i = 0; i < 30; i++) {
    v2 = await api('GET', `/v2/sandboxes/${id}/logs?limit=1000`)
    assert.equal(v2.status, 200, JSON.stringify(v2.json))
    if (wanted.every((m) => v2.json.logs.some((l) => l.message === m))) break
    await new Promise((r) => setTimeout(r, 500))
  }
  for (const m of wanted) {
    const l = v2.json.logs.find((l) => l.message === m)
    assert.ok(l, `"${m}" is not in the logs: ${JSON.stringify(v2.json.logs.slice(-10))}`)
    assert.equal(l.level, 'info')
  }
  const line = v2.json.logs.find((l) => l.message === 'written-by-the-start-command')
  const cursor = Date.parse(line.timestamp)
  assert.ok(Math.abs(cursor - Date.now()) < 60_000, line.timestamp)
  const later = await api('GET', `/v2/sandboxes/${id}/logs?cursor=${cursor + 1}&direction=forward`)
  assert.ok(!later.json.logs.some((l) => l.message === 'written-by-the-start-command'), 'the cursor did not move past it')
  const v1 = await api('GET', `/sandboxes/${id}/logs`)
  assert.ok(v1.json.logs.some((l) => l.line === 'written-by-the-start-command'), JSON.stringify(v1.json))
  assert.equal((await api('GET', `/v2/sandboxes/${id}/logs?direction=up`)).status, 400)

  let series = []
  for (let i = 0; i < 40 && series.length < 3; i++) {
    series = await sbx.getMetrics({ start: new Date(Date.now() - 3_600_000), end: new Date(Date.now() + 60_000) })
    if (series.length < 3) await new Promise((r) => setTimeout(r, 1000))
  }
  assert.ok(series.length >= 3, `${series.length} samples`)
  assert.ok(series.every((m, i) => i === 0 || m.timestamp >= series[i - 1].timestamp), 'samples out of order')
  series.forEach(plausible)
  const last = series[series.length - 1].timestamp
  const tail = await sbx.getMetrics({ start: last, end: new Date(last.getTime() + 60_000) })
  assert.ok(tail.length >= 1 && tail.length < series.length, `start=${last.toISOString()} gave ${tail.length} of ${series.length}`)

  const other = track(await CodeSandbox.create({ metadata: { run, role: 'metrics' } }))
  const both = await api('GET', `/sandboxes/metrics?sandbox_ids=${id},${other.sandboxId}`)
  assert.equal(both.status, 200, JSON.stringify(both.json))
  assert.deepEqual(Object.keys(both.json.sandboxes).sort(), [id, other.sandboxId].sort())
  plausible(both.json.sandboxes[id])
  plausible(both.json.sandboxes[other.sandboxId])
  assert.equal((await api('GET', '/sandboxes/metrics')).status, 400)
  assert.equal(await other.kill(), true)
})

test('security: a wrong key, another sandbox token, bad bodies', async () => {
  await assert.rejects(Sandbox.create({ apiKey: 'e2b_0000000000000000000000000000000000000000' }), AuthenticationError)
  for (const [method, path] of [['GET', '/v2/sandboxes'], ['GET', `/sandboxes/${sbx.sandboxId}`],
    ['DELETE', `/sandboxes/${sbx.sandboxId}`], ['POST', `/sandboxes/${sbx.sandboxId}/pause`], ['GET', '/templates'], ['GET', '/snapshots']]) {
    const r = await api(method, path, { key: 'e2b_wrong' })
    assert.equal(r.status, 401, `${method} ${path}`)
    assert.equal(r.json.code, 401)
  }
  assert.equal((await api('POST', '/v2/sandboxes', { body: '{"templateID":' })).status, 400)
  const typed = await api('POST', '/v2/sandboxes', { body: { templateID: 'base', timeout: 'soon' } })
  assert.equal(typed.status, 400)
  assert.match(typed.json.message, /timeout/)
  assert.equal((await api('POST', '/v2/sandboxes', { body: { templateID: 'base', metadata: { big: 'y'.repeat(2 << 20) } } })).status, 413)
  // The sandbox's envd refuses another sandbox's token, through the proxy.
  const other = track(await Sandbox.create({ metadata: { run, role: 'other' } }))
  const res = await fetch(apiUrl + '/health', {
    headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': other.envdAccessToken ?? 'none' },
  })
  assert.equal(res.status, 401)
  assert.equal(await other.kill(), true)
})

test('Sandbox.list: a metadata filter, and pages', async () => {
  for (let i = 0; i < 2; i++) track(await Sandbox.create({ metadata: { run, role: 'listed' } }))
  const only = await Sandbox.list({ query: { metadata: { run, role: 'listed' } } }).nextItems()
  assert.equal(only.length, 2)
  const pager = Sandbox.list({ query: { metadata: { run } }, limit: 2 })
  const seen = []
  let pages = 0
  while (pager.hasNext) {
    seen.push(...(await pager.nextItems()).map((s) => s.sandboxId))
    pages++
  }
  assert.equal(pages, 2)
  assert.equal(new Set(seen).size, 3)
  assert.ok(seen.includes(sbx.sandboxId))
})

test('pause, pause again, connect: files and processes intact', async () => {
  await sbx.files.write('/tmp/kept.txt', 'before pause')
  const h = await sbx.commands.run('sleep 900', { background: true })
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false, 'pausing a paused sandbox reports false')
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
  const resumed = await Sandbox.connect(sbx.sandboxId)
  assert.equal(resumed.sandboxId, sbx.sandboxId)
  assert.equal(await resumed.files.read('/tmp/kept.txt'), 'before pause')
  assert.ok((await resumed.commands.list()).some((p) => p.pid === h.pid), 'the background process survived the pause')
  assert.equal((await CodeSandbox.connect(sbx.sandboxId).then((s) => s.runCode('x'))).text, '20')
  sbx = await CodeSandbox.connect(sbx.sandboxId)
})

test('filesystem-only pause and reboot-resume: files kept, processes gone, same ID; a memory pause after restores memory', oneMode, async () => {
  const bootID = async (x) => (await x.commands.run('cat /proc/sys/kernel/random/boot_id')).stdout.trim()
  const s = track(await Sandbox.create({ metadata: { run } }))
  await s.files.write('/home/user/kept.txt', 'on disk')
  const h = await s.commands.run('sleep 900', { background: true })
  const boot0 = await bootID(s)
  assert.equal(await s.pause({ keepMemory: false }), true)
  const back = await Sandbox.connect(s.sandboxId)
  assert.equal(back.sandboxId, s.sandboxId)
  assert.equal(await back.files.read('/home/user/kept.txt'), 'on disk')
  const boot1 = await bootID(back)
  assert.notEqual(boot1, boot0, 'a filesystem-only pause resumes by a boot')
  assert.ok(!(await back.commands.list()).some((p) => p.pid === h.pid), 'its processes are gone')
  // A memory pause resumed by reboot.
  await back.pause()
  const again = await Sandbox.connect(s.sandboxId, { onResume: 'reboot' })
  assert.notEqual(await bootID(again), boot1, 'onResume reboot boots')
  assert.equal(await again.files.read('/home/user/kept.txt'), 'on disk')
  // A plain pause after that restores memory again.
  const h2 = await again.commands.run('sleep 902', { background: true })
  const boot2 = await bootID(again)
  await again.pause()
  const third = await Sandbox.connect(s.sandboxId)
  assert.equal(await bootID(third), boot2, 'a memory pause restores')
  assert.ok((await third.commands.list()).some((p) => p.pid === h2.pid), 'its process survived')
})

test('paused while a long command runs: after the resume it completes, its handle gets the result; a finished one is gone', async () => {
  const s = track(await Sandbox.create({ metadata: { run, role: 'long' } }))
  await s.commands.run('true')
  const long = await s.commands.run('sleep 8; echo finished', { background: true })
  assert.equal(await s.pause(), true)
  const back = await Sandbox.connect(s.sandboxId)
  const again = await back.commands.connect(long.pid)
  const r = await again.wait()
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'finished\n')
  assert.ok(!(await back.commands.list()).some((p) => p.pid === long.pid), 'a finished command is not listed')
})

test('autoResume: traffic to a paused sandbox resumes it', async () => {
  const s = track(await Sandbox.create({ metadata: { run, role: 'auto' }, lifecycle: { onTimeout: 'pause', autoResume: true } }))
  await s.files.write('/tmp/auto.txt', 'still here')
  assert.equal(await s.pause(), true)
  assert.equal(await s.files.read('/tmp/auto.txt'), 'still here')
  assert.equal((await s.getInfo()).state, 'running')
  // Without autoResume a paused sandbox answers 502 (isRunning: false).
  const plain = track(await Sandbox.create({ metadata: { run, role: 'plain' } }))
  assert.equal(await plain.pause(), true)
  assert.equal(await plain.isRunning(), false)
})

// portGet GETs path from a port of sandbox s through the proxy, as a
// browser would: its host name in domain mode, the routing headers else.
async function portGet(s, port, path) {
  const res = mode === 'domain'
    ? await fetch(`https://${s.getHost(port)}${path}`)
    : await fetch(apiUrl + path, { headers: { 'E2b-Sandbox-Id': s.sandboxId, 'E2b-Sandbox-Port': String(port) } })
  return [res.status, await res.text()]
}

test('autoResume: a request to its HTTP server\'s port wakes a paused sandbox, which answers it', async () => {
  const s = track(await Sandbox.create({ metadata: { run, role: 'auto-http' }, lifecycle: { onTimeout: 'pause', autoResume: true } }))
  await s.commands.run('mkdir -p /tmp/www && echo served > /tmp/www/index.html')
  await s.commands.run('cd /tmp/www && python3 -m http.server 8000', { background: true })
  for (const end = Date.now() + 30_000; ;) {
    const [code, body] = await portGet(s, 8000, '/index.html').catch((e) => [0, String(e)])
    if (code === 200 && body === 'served\n') break
    assert.ok(Date.now() < end, `the HTTP server never answered through the proxy: ${code} ${body}`)
    await new Promise((r) => setTimeout(r, 500))
  }
  assert.equal(await s.pause(), true)
  assert.equal((await s.getInfo()).state, 'paused')
  assert.deepEqual(await portGet(s, 8000, '/index.html'), [200, 'served\n'])
  assert.equal((await s.getInfo()).state, 'running')
})

test('network.maskRequestHost: the Host a sandbox\'s server sees, its port filled in', async () => {
  const s = track(await Sandbox.create({ metadata: { run, role: 'mask' }, network: { maskRequestHost: 'localhost:${PORT}' } }))
  await s.files.write('/tmp/host.py', [
    'import http.server as h',
    'class H(h.BaseHTTPRequestHandler):',
    '    def do_GET(self):',
    '        b = self.headers["Host"].encode()',
    '        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)',
    'h.HTTPServer(("", 8001), H).serve_forever()',
  ].join('\n'))
  assert.equal((await api('GET', `/sandboxes/${s.sandboxId}`)).json.network?.maskRequestHost, 'localhost:${PORT}')
  await s.commands.run('python3 /tmp/host.py', { background: true })
  for (const end = Date.now() + 30_000; ;) {
    const [code, body] = await portGet(s, 8001, '/').catch((e) => [0, String(e)])
    if (code === 200) {
      assert.equal(body, 'localhost:8001')
      break
    }
    assert.ok(Date.now() < end, `the server never answered through the proxy: ${code} ${body}`)
    await new Promise((r) => setTimeout(r, 300))
  }
})

test('snapshot, then a sandbox from its ID', async () => {
  await sbx.files.write('/tmp/snap.txt', 'snapshotted')
  const snap = await sbx.createSnapshot()
  assert.ok(snap.snapshotId)
  const clone = track(await Sandbox.create(snap.snapshotId, { metadata: { run, role: 'clone' } }))
  assert.notEqual(clone.sandboxId, sbx.sandboxId)
  assert.equal(await clone.files.read('/tmp/snap.txt'), 'snapshotted')
  const listed = []
  for (const pager = Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }); pager.hasNext;) listed.push(...(await pager.nextItems()))
  assert.ok(listed.some((s) => s.snapshotId === snap.snapshotId), JSON.stringify(listed))
})

test('fork: two sandboxes from a running one', async () => {
  await sbx.files.write('/tmp/fork.txt', 'parent state')
  const forks = await Sandbox.fork(sbx.sandboxId, { count: 2 })
  assert.equal(forks.length, 2)
  for (const f of forks) {
    assert.ok(f instanceof Sandbox, `fork failed: ${f}`)
    track(f)
    assert.equal(await f.files.read('/tmp/fork.txt'), 'parent state')
  }
  assert.notEqual(forks[0].sandboxId, forks[1].sandboxId)
  assert.equal(await sbx.isRunning(), true)
})

test('rollback: back to a snapshot in place', async () => {
  await sbx.files.write('/tmp/rb.txt', 'old')
  const snap = await sbx.createSnapshot()
  await sbx.files.write('/tmp/rb.txt', 'new')
  const r = await api('POST', `/sandboxes/${sbx.sandboxId}/rollback`, { body: { snapshotID: snap.snapshotId } })
  assert.equal(r.status, 200, JSON.stringify(r.json))
  assert.equal(r.json.sandboxID, sbx.sandboxId)
  assert.equal(await sbx.files.read('/tmp/rb.txt'), 'old')
  const other = track(await Sandbox.create({ metadata: { run, role: 'rb-other' } }))
  const refused = await api('POST', `/sandboxes/${other.sandboxId}/rollback`, { body: { snapshotID: snap.snapshotId } })
  assert.equal(refused.status, 409, JSON.stringify(refused.json))
})

// The test internet (test/inet) the pods reach: a public host, a host in
// another range, and a name the zone resolves.
const net = {
  public: process.env.SANDLOT_NET_PUBLIC, publicBody: process.env.SANDLOT_NET_PUBLIC_BODY,
  range: process.env.SANDLOT_NET_RANGE, rangeBody: process.env.SANDLOT_NET_RANGE_BODY,
  domain: process.env.SANDLOT_NET_DOMAIN, domainBody: process.env.SANDLOT_NET_DOMAIN_BODY,
  secure: process.env.SANDLOT_NET_SECURE,
  socks: process.env.SANDLOT_NET_SOCKS, socksLog: process.env.SANDLOT_NET_SOCKS_LOG, noSocks: process.env.SANDLOT_NET_NO_SOCKS,
  socksUser: process.env.SANDLOT_NET_SOCKS_USER, socksPassword: process.env.SANDLOT_NET_SOCKS_PASSWORD,
  gitRepo: process.env.SANDLOT_NET_GIT_REPO, gitEnv: JSON.parse(process.env.SANDLOT_NET_GIT_ENV || '{}'),
}

// plausible fails unless a metrics sample's values are possible for one
// running guest: present, non-negative, used no more than the total.
function plausible(m) {
  const at = JSON.stringify(m)
  assert.ok(m.cpuCount >= 1 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100 * m.cpuCount, `cpu: ${at}`)
  assert.ok(m.memTotal > 0 && m.memUsed > 0 && m.memUsed <= m.memTotal, `memory: ${at}`)
  assert.ok(m.diskTotal > 0 && m.diskUsed >= 0 && m.diskUsed <= m.diskTotal, `disk: ${at}`)
}

// fetchIn fetches http://<host>/ from inside a sandbox: its body, or
// REFUSED when the sandbox may not open the connection (a network error;
// any other failure, python's own, fails the command and the test).
async function fetchIn(s, host) {
  const py = [
    'import urllib.request',
    'try:',
    `    print(urllib.request.urlopen("http://${host}/", timeout=3).read().decode())`,
    'except OSError:',
    '    print("REFUSED")',
  ].join('\n')
  const r = await s.commands.run(`python3 -c '${py}'`)
  return r.stdout.trim()
}

test('network: allowInternetAccess false with allowOut, updateNetwork, shown in the info', async () => {
  assert.ok(net.public && net.range && net.domain, 'run with the SANDLOT_NET_* of the test internet')
  const s = track(await Sandbox.create({ metadata: { run }, allowInternetAccess: false,
    network: { allowOut: [net.domain, net.range] } }))
  assert.equal(await fetchIn(s, net.domain), net.domainBody, 'an allowOut domain is reached')
  assert.equal(await fetchIn(s, net.range), net.rangeBody, 'an allowOut address is reached')
  assert.equal(await fetchIn(s, net.public), 'REFUSED', 'the rest of the internet is closed')
  const info = await api('GET', `/sandboxes/${s.sandboxId}`)
  assert.deepEqual(info.json.network?.allowOut, [net.domain, net.range], JSON.stringify(info.json.network))

  // The platform's denials (the chart's network.denyOut) are not a
  // tenant's to open: asked for, refused with the reason, rules kept.
  await assert.rejects(s.updateNetwork({ allowOut: [net.domain, '10.0.0.1'] }),
    (e) => /10\.0\.0\.1 is inside 10\.0\.0\.0\/8, which the platform denies/.test(e.message) || assert.fail(e.message))
  await assert.rejects(Sandbox.create({ metadata: { run }, network: { allowOut: ['169.254.169.254'] } }),
    (e) => /169\.254\.169\.254 is inside 169\.254\.0\.0\/16/.test(e.message) || assert.fail(e.message))
  assert.deepEqual((await api('GET', `/sandboxes/${s.sandboxId}`)).json.network?.allowOut, [net.domain, net.range])

  // Live: the update answers once the node enforces it.
  await s.updateNetwork({ allowOut: [net.domain], denyOut: ['0.0.0.0/0'] })
  assert.equal(await fetchIn(s, net.range), 'REFUSED', 'no longer allowed after updateNetwork')
  assert.equal(await fetchIn(s, net.domain), net.domainBody)
  await s.updateNetwork({})
  assert.equal(await fetchIn(s, net.public), net.publicBody, 'open again with no rules')
})

// step awaits p, naming the step, its time and the sandbox in an error (a
// timeout's own error says nothing of where it happened).
async function step(name, s, p) {
  const t0 = Date.now()
  try {
    return await p
  } catch (e) {
    throw new Error(`${name} (sandbox ${s.sandboxId}, after ${Date.now() - t0} ms): ${e?.name} ${e?.message} ${JSON.stringify(e)}`)
  }
}

test('network: denyOut on an open internet; kept across pause and resume', async () => {
  const s = track(await Sandbox.create({ metadata: { run }, network: { denyOut: [`${net.range}/32`] } }))
  assert.equal(await step('fetch public', s, fetchIn(s, net.public)), net.publicBody)
  assert.equal(await step('fetch denied', s, fetchIn(s, net.range)), 'REFUSED', 'a denyOut address is closed')
  await step('pause', s, s.pause())
  const back = await step('connect', s, Sandbox.connect(s.sandboxId))
  assert.equal(await step('fetch denied after resume', s, fetchIn(back, net.range)), 'REFUSED', 'still closed after a resume')
  assert.equal(await step('fetch public after resume', s, fetchIn(back, net.public)), net.publicBody)
})

test('teams: a key sees, connects to and kills only its team\'s sandboxes; a create over the team\'s quota gets 429', async () => {
  const keyB = process.env.SANDLOT_TEAM_B_KEY
  assert.ok(keyB, 'run with SANDLOT_TEAM_B_KEY (a key of team-b, whose quota is 2 sandboxes)')
  const b = []
  for (let i = 0; i < 2; i++) b.push(track(await Sandbox.create({ apiKey: keyB, metadata: { run, role: 'team-b' } })))
  await assert.rejects(Sandbox.create({ apiKey: keyB, metadata: { run, role: 'team-b' } }),
    /Rate limit exceeded.*count\/sandboxes\.sandlot\.dev=2/)
  const listedB = await Sandbox.list({ apiKey: keyB, query: { metadata: { run } } }).nextItems()
  assert.deepEqual(listedB.map((s) => s.sandboxId).sort(), b.map((s) => s.sandboxId).sort())
  const listedA = await Sandbox.list({ query: { metadata: { run } } }).nextItems()
  assert.ok(!listedA.some((s) => b.some((x) => x.sandboxId === s.sandboxId)), 'team A lists team B\'s sandboxes')
  for (const [victim, key] of [[sbx.sandboxId, keyB], [b[0].sandboxId, apiKey]]) {
    await assert.rejects(Sandbox.getInfo(victim, { apiKey: key }), /not found/i)
    await assert.rejects(Sandbox.connect(victim, { apiKey: key }), /not found/i)
    assert.equal(await Sandbox.kill(victim, { apiKey: key }), false, `a stranger's key killed ${victim}`)
  }
  assert.equal(await sbx.isRunning(), true)
  const teams = await api('GET', '/teams', { key: keyB })
  assert.deepEqual(teams.json.map((t) => t.teamID), ['team-b'])
  for (const s of b) assert.equal(await Sandbox.kill(s.sandboxId, { apiKey: keyB }), true)
})

test('a command running while its sandbox is killed ends with E2B\'s message', async () => {
  const s = track(await Sandbox.create({ metadata: { run, role: 'killed' } }))
  const h = await s.commands.run('sleep 600', { background: true })
  const ended = h.wait().then(() => assert.fail('the command ended normally'), (e) => e)
  assert.equal(await s.kill(), true)
  const err = await ended
  assert.match(err.message, /The sandbox was killed or reached its end of life/, `${err.name}: ${err.message}`)
})

test('volumes: shared by two sandboxes, kept through pause, snapshot and fork, outliving both; the content API; another team gets 404', async () => {
  const vol = await Volume.create(`vol-${run}`)
  assert.ok(vol.volumeId && vol.token, JSON.stringify(vol))
  assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId))
  await vol.writeFile('/from-api.txt', 'written without a sandbox')
  const a = track(await Sandbox.create({ metadata: { run, role: 'vol-a' }, volumeMounts: { '/mnt/shared': vol } }))
  assert.deepEqual((await a.getInfo()).volumeMounts, [{ name: vol.name, path: '/mnt/shared' }])
  assert.equal(await a.files.read('/mnt/shared/from-api.txt'), 'written without a sandbox')
  await a.files.write('/mnt/shared/a.txt', 'from a')
  const b = track(await Sandbox.create({ metadata: { run, role: 'vol-b' }, volumeMounts: { '/data': vol.name } }))
  assert.equal(await b.files.read('/data/a.txt'), 'from a')
  assert.equal(await vol.readFile('/a.txt'), 'from a', 'the content API reads what a sandbox wrote')
  assert.equal((await a.commands.run('stat -c %U /mnt/shared/a.txt')).stdout.trim(), 'user')
  // A paused and resumed: the mount is back and sees B's writes made meanwhile.
  assert.equal(await step('pause a', a, a.pause()), true)
  await step('write from b', b, b.files.write('/data/b.txt', 'from b, while a was paused'))
  const resumed = await step('connect a', a, Sandbox.connect(a.sandboxId))
  assert.equal(await step('read in resumed a', a, resumed.files.read('/mnt/shared/b.txt')), 'from b, while a was paused')
  // A snapshot records the mount, not the bytes: its clone and A's forks see the volume as it is now.
  const snap = await step('snapshot a', a, resumed.createSnapshot())
  await step('write from b again', b, b.files.write('/data/after-snapshot.txt', 'later'))
  const clone = track(await step('clone', a, Sandbox.create(snap.snapshotId, { metadata: { run, role: 'vol-clone' } })))
  assert.equal(await step('read in the clone', clone, clone.files.read('/mnt/shared/after-snapshot.txt')), 'later')
  assert.deepEqual((await clone.getInfo()).volumeMounts, [{ name: vol.name, path: '/mnt/shared' }], 'the snapshot\'s mounts')
  const [fork] = await step('fork a', a, Sandbox.fork(a.sandboxId, { count: 1 }))
  assert.ok(fork instanceof Sandbox, `fork failed: ${fork}`)
  track(fork)
  await step('write in the fork', fork, fork.files.write('/mnt/shared/fork.txt', 'from the fork'))
  assert.equal(await step('read the fork\'s write in b', b, b.files.read('/data/fork.txt')), 'from the fork')
  // Root in A's guest asks its volume server for a volume A does not mount (its team's, another
  // team's of the same name) and for paths out of the export: refused.
  const unmounted = await Volume.create(`vol-unmounted-${run}`)
  const theirs = await Volume.create(vol.name, { apiKey: process.env.SANDLOT_TEAM_B_KEY })
  const nfs = 'vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock,addr=169.254.53.53'
  // The same command mounts what the sandbox does mount (so the refusals below are the server's).
  const own = await fork.commands.run(`mkdir -p /mnt/own && mount -t nfs -o ${nfs} 169.254.53.53:/${vol.name} /mnt/own && ` +
    'cat /mnt/own/a.txt && umount /mnt/own', { user: 'root' })
  assert.equal(own.stdout, 'from a')
  for (const exp of [unmounted.name, `${vol.name}/..`, '', '..']) {
    const r = await fork.commands.run(`mkdir -p /mnt/steal && mount -t nfs -o ${nfs} 169.254.53.53:/${exp} /mnt/steal`,
      { user: 'root' }).catch((e) => e)
    assert.ok(r instanceof CommandExitError, `root mounted export ${JSON.stringify(exp)}: ${JSON.stringify(r)}`)
  }
  assert.equal(await Volume.destroy(unmounted.volumeId), true)
  assert.equal(await Volume.destroy(theirs.volumeId, { apiKey: process.env.SANDLOT_TEAM_B_KEY }), true)
  // Another team sees nothing of it.
  const other = await api('GET', `/volumes/${vol.volumeId}`, { key: process.env.SANDLOT_TEAM_B_KEY })
  assert.equal(other.status, 404, JSON.stringify(other.json))
  const mountOther = await api('POST', '/v2/sandboxes', { key: process.env.SANDLOT_TEAM_B_KEY,
    body: { templateID: 'base', volumeMounts: [{ name: vol.name, path: '/x' }] } })
  assert.equal(mountOther.status, 400, JSON.stringify(mountOther.json))
  // The volume outlives its sandboxes; destroyed, its files are gone.
  for (const s of [a, b, clone, fork]) await s.kill()
  assert.equal(await vol.readFile('/fork.txt'), 'from the fork')
  assert.equal(await Volume.destroy(vol.volumeId), true)
  assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId))
})

test('secrets: stored, versioned, listed, never read back; another team sees none', async () => {
  const name = `key-${run}`
  const made = await Secret.create(name, 'sk-never-shown', { metadata: { owner: 'ci' } })
  assert.ok(made.secretId.startsWith('sec_') && made.version === 1 && made.metadata.owner === 'ci', JSON.stringify(made))
  assert.equal((await Secret.update(made.secretId, 'sk-rotated')).version, 2)
  assert.equal((await Secret.getInfo(name)).secretId, made.secretId)
  const listed = await Secret.list().nextItems()
  assert.ok(listed.some((s) => s.secretId === made.secretId) && !JSON.stringify(listed).includes('sk-'), JSON.stringify(listed))
  assert.equal(await Secret.exists(made.secretId, { apiKey: process.env.SANDLOT_TEAM_B_KEY }), false)
  assert.equal(await Secret.destroy(made.secretId), true)
  assert.equal(await Secret.exists(made.secretId), false)
})

// secureFetch fetches <scheme>://<host>/ from inside a sandbox with
// Python (the system's TLS roots: the egress CA is among them): the
// secure host's answer, or the error's text.
async function secureFetch(s, scheme, host = net.secure) {
  const py = [
    'import urllib.error, urllib.request',
    'try:',
    `    print(urllib.request.urlopen("${scheme}://${host}/", timeout=10).read().decode())`,
    'except urllib.error.HTTPError as e:',
    '    print("ERROR", e.code, e.read().decode())',
    'except Exception as e:',
    '    print("ERROR", e)',
  ].join('\n')
  return (await s.commands.run(`python3 -c '${py}'`)).stdout.trim()
}

const digest = (v) => 'auth=' + createHash('sha256').update(v).digest('hex')

test('network rules: a secret header reaches the server over HTTP and HTTPS, changes live, never enters the guest', oneMode, async () => {
  assert.ok(net.secure, 'run with SANDLOT_NET_SECURE (the test internet\'s secure host)')
  const value = `sk-live-${randomUUID()}`
  const other = `sk-other-${randomUUID()}`
  const [n1, n2] = [`egress-${run}`, `egress2-${run}`]
  const sec = await Secret.create(n1, value)
  const sec2 = await Secret.create(n2, other)
  const rule = (headers) => ({ [net.secure]: [{ transform: { headers } }] })
  const s = track(await Sandbox.create({ metadata: { run },
    network: { rules: rule({ Authorization: `Bearer ${Secret.fill(n1)}` }) } }))
  assert.equal(await secureFetch(s, 'https'), digest(`Bearer ${value}`), 'HTTPS carries the header')
  assert.equal(await secureFetch(s, 'http'), digest(`Bearer ${value}`), 'HTTP carries the header')
  const info = await api('GET', `/sandboxes/${s.sandboxId}`)
  assert.equal(info.json.network?.rules?.[net.secure]?.[0]?.transform?.headers?.Authorization, `Bearer \${e2b.secrets.${n1}}`, JSON.stringify(info.json.network))
  assert.ok(!JSON.stringify(info.json).includes(value), 'the info holds no secret')

  // Never in the guest: no process's environment, command line or
  // memory, no file.
  await s.files.write('/tmp/scan.py', readFileSync(new URL('./testdata/scan.py', import.meta.url), 'utf8'))
  const enc = Buffer.from([...value].reverse().join('')).toString('base64')
  const scan = await s.commands.run(`python3 /tmp/scan.py ${enc} 1800`, { user: 'root', timeoutMs: 300_000 })
  assert.equal(scan.stdout.trim(), 'CLEAN', scan.stderr)

  // Live: the update answers once the node applies it.
  await s.updateNetwork({ rules: rule({ Authorization: Secret.fill(n2) }) })
  assert.equal(await secureFetch(s, 'https'), digest(other), 'the new rule applies')
  await s.updateNetwork({})
  assert.equal(await secureFetch(s, 'http'), 'auth=none', 'no rule: no header')
  // A paused and resumed sandbox's rules come back with a new CA.
  await s.updateNetwork({ rules: rule({ Authorization: Secret.fill(n1) }) })
  await s.pause()
  const back = await Sandbox.connect(s.sandboxId)
  assert.equal(await secureFetch(back, 'https'), digest(value), 'after a resume')
  for (const x of [sec, sec2]) await Secret.destroy(x.secretId)
})

test('egressProxy: TCP leaves through a SOCKS5 proxy, by name for allowOut domains; a proxy that is down fails closed', oneMode, async () => {
  assert.ok(net.socks && net.noSocks, 'run with SANDLOT_NET_SOCKS* (the test internet\'s SOCKS5 host)')
  const proxy = { address: net.socks, username: net.socksUser, password: net.socksPassword }
  const s = track(await Sandbox.create({ metadata: { run }, network: { allowOut: [net.domain], egressProxy: proxy } }))
  assert.equal(await fetchIn(s, net.public), net.publicBody, 'an address, through the proxy')
  assert.equal(await fetchIn(s, net.domain), net.domainBody, 'an allowOut domain, through the proxy')
  const asked = await (await fetch(`http://${net.socksLog}/`)).json()
  assert.ok(asked.some((r) => !r.Domain && r.Host === net.public && r.Port === 80), JSON.stringify(asked))
  assert.ok(asked.some((r) => r.Domain && r.Host === net.domain && r.Port === 80), 'a domain goes by name: ' + JSON.stringify(asked))
  const info = await api('GET', `/sandboxes/${s.sandboxId}`)
  assert.deepEqual(info.json.network?.egressProxy, { address: net.socks, username: net.socksUser }, JSON.stringify(info.json.network))
  assert.ok(!JSON.stringify(info.json).includes(net.socksPassword), 'the info holds no password')
  // A proxy that is down: nothing leaves, never directly.
  await s.updateNetwork({ egressProxy: { address: net.noSocks } })
  assert.equal(await fetchIn(s, net.public), 'REFUSED', 'fails closed')
  await s.updateNetwork({})
  assert.equal(await fetchIn(s, net.public), net.publicBody, 'direct again without one')
  await assert.rejects(Sandbox.create({ metadata: { run }, network: { egressProxy: { address: '169.254.169.254:1080' } } }),
    (e) => /169\.254\.169\.254 is inside 169\.254\.0\.0\/16/.test(e.message) || assert.fail(e.message))
})

// domainMode: getMcpUrl() is https://50005-<id>.<domain>/mcp, which
// only domain mode reaches as it is (the Python suite runs its MCP test
// there too).
const domainMode = { skip: mode !== 'domain' && 'getMcpUrl() needs domain mode' }

test('mcp: the template\'s gateway runs a GitHub server; the official MCP client lists and calls its tools with the SDK\'s URL and token', domainMode, async () => {
  assert.ok(net.gitRepo, 'run with SANDLOT_NET_GIT_REPO (the test internet\'s git host)')
  const server = { runCmd: 'python3 server.py', installCmd: 'echo from-install > installed.txt', envs: { ACME_KEY: 'acme-1' } }
  const t0 = Date.now()
  const s = track(await Sandbox.create({ metadata: { run, role: 'mcp' }, envs: net.gitEnv, mcp: { [`github/${net.gitRepo}`]: server } }))
  console.log(`# create with an MCP gateway (clone, install, server started, tools listed): ${Date.now() - t0} ms`)
  const url = s.getMcpUrl()
  const token = await s.getMcpToken()
  assert.ok(url.endsWith('/mcp') && token, url)
  const client = new McpClient({ name: 'sandlot-test', version: '1.0.0' })
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }))
  const text = async (name, args = {}) => (await client.callTool({ name, arguments: args })).content[0].text
  try {
    assert.deepEqual((await client.listTools()).tools.map((t) => t.name).sort(), ['env', 'installed', 'reverse'])
    assert.equal(await text('reverse', { text: 'sandlot' }), 'toldnas')
    assert.equal(await text('env', { name: 'ACME_KEY' }), 'acme-1', 'the server\'s envs')
    assert.equal(await text('installed'), 'from-install', 'installCmd ran in the clone')
  } finally {
    await client.close()
  }
  const bare = await fetch(url, { method: 'POST', body: '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' } })
  assert.equal(bare.status, 401, 'no token')
  assert.equal(await (await Sandbox.connect(s.sandboxId)).getMcpToken(), token, 'another client reads the token from the sandbox')
  // A gateway that cannot start: E2B's message, and the sandbox is killed.
  const failing = { ...server, installCmd: 'echo no compiler here >&2; exit 3' }
  await assert.rejects(Sandbox.create({ metadata: { run, role: 'mcp-fails' }, envs: net.gitEnv, mcp: { [`github/${net.gitRepo}`]: failing } }),
    (e) => /Failed to start MCP gateway: .*no compiler here/s.test(e.message) || assert.fail(e.message))
  const left = await Sandbox.list({ query: { metadata: { run, role: 'mcp-fails' } } }).nextItems()
  assert.deepEqual(left, [], 'the sandbox whose gateway failed is killed')
  // A catalog server (a Docker image on E2B) is refused before a sandbox exists.
  await assert.rejects(Sandbox.create({ metadata: { run }, mcp: { duckduckgo: {} } }),
    (e) => /"duckduckgo": a server of Docker's MCP catalog/.test(e.message) || assert.fail(e.message))
})

test('kill, kill again', async () => {
  assert.equal(await sbx.kill(), true)
  assert.equal(await sbx.kill(), false)
  assert.equal((await api('GET', `/sandboxes/${sbx.sandboxId}`)).status, 404)
})
