// make bench-guest: SDK round trips to sandlot-guest against the same
// operations done directly on the host (the floor), in the same run.
import { execFile, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { writeFile, readFile, mkdtemp } from 'node:fs/promises'
import { tmpdir, cpus } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Sandbox } from '@e2b/code-interpreter'

const N = Number(process.env.BENCH_N || 50)
const exec = promisify(execFile)

async function measure(fn) {
  await fn() // warm-up
  const out = []
  for (let i = 0; i < N; i++) {
    const t = process.hrtime.bigint()
    await fn()
    out.push(Number(process.hrtime.bigint() - t) / 1e6)
  }
  return out.sort((a, b) => a - b)
}

const pct = (d, p) => d[Math.min(d.length - 1, Math.round(p * (d.length - 1)))]
const fmt = (x) => `${x.toFixed(2)}ms`.padStart(10)
function row(name, d) {
  console.log(`${name.padEnd(40)} ${String(d.length).padStart(4)} ${fmt(d[0])} ${fmt(pct(d, 0.5))} ${fmt(pct(d, 0.95))} ${fmt(d[d.length - 1])}`)
  return pct(d, 0.5)
}

// A python process kept open, fed one expression at a time: the floor for
// runCode (an interpreter already running, no HTTP, no sandbox).
function pythonRepl() {
  const py = spawn('python3', ['-u', '-c', 'import sys\nfor l in sys.stdin: print(repr(eval(l)), flush=True)'])
  let buf = ''
  let wake
  py.stdout.on('data', (d) => { buf += d; if (buf.includes('\n') && wake) wake() })
  return {
    async eval(expr) {
      buf = ''
      const done = new Promise((r) => { wake = r })
      py.stdin.write(expr + '\n')
      await done
      return buf.trim()
    },
    close: () => py.kill(),
  }
}

const sbx = await Sandbox.create()
const dir = await mkdtemp(join(tmpdir(), 'bench-guest-'))
const mb = randomBytes(1 << 20)
const repl = pythonRepl()

console.log(`# sandlot-guest on the host (no VM: accel n/a), e2b 2.51.0 / @e2b/code-interpreter 2.8.0, ${cpus().length} cores, ${cpus()[0].model}`)
console.log(`${'measure'.padEnd(40)} ${'n'.padStart(4)} ${'min'.padStart(10)} ${'median'.padStart(10)} ${'p95'.padStart(10)} ${'max'.padStart(10)}`)
const ratios = []
const pair = async (what, viaSDK, floor) => {
  const a = row(`sdk: ${what}`, await measure(viaSDK))
  const b = row(`host floor: ${what}`, await measure(floor))
  ratios.push(`${what}: ${(a / b).toFixed(1)}x the floor (${(a - b).toFixed(2)} ms added)`)
}
// The floor runs the same login shell with an empty HOME, as the sandbox's
// /root is (the host's root profile may be slow to load).
const floorEnv = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', HOME: dir }
await pair("commands.run('true')", () => sbx.commands.run('true'), () => exec('/bin/bash', ['-l', '-c', 'true'], { env: floorEnv }))
await pair('1 MB file write+read', async () => {
  await sbx.files.write('/tmp/bench.bin', new Blob([mb]))
  await sbx.files.read('/tmp/bench.bin', { format: 'bytes' })
}, async () => {
  await writeFile(join(dir, 'bench.bin'), mb)
  await readFile(join(dir, 'bench.bin'))
})
// The same through plain HTTP without the SDK (identity encoding): the
// agent's own share of the SDK figure above.
row('http, no SDK: 1 MB file write+read', await measure(async () => {
  const url = 'http://127.0.0.1:49983/files?path=/tmp/bench-raw.bin'
  await (await fetch(url, { method: 'POST', body: mb, headers: { 'Content-Type': 'application/octet-stream' } })).arrayBuffer()
  await (await fetch(url, { headers: { 'Accept-Encoding': 'identity' } })).arrayBuffer()
}))
await pair("runCode('1+1')", () => sbx.runCode('1+1'), () => repl.eval('1+1'))
repl.close()
console.log('\n' + ratios.join('\n'))
