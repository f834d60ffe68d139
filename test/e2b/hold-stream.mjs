// An E2B client holding a command's output stream through a drain
// (test/drain): it connects to sandbox SANDLOT_SANDBOX_ID, starts a
// counter in the background and follows its output. When the stream
// ends (the sandbox's VM left its node), it reconnects through the API as
// an E2B client does — Sandbox.connect, then commands.connect to the
// same process — until the counter's output comes again, then kills the
// counter and exits. Each event is one JSON line on stdout.
import { Sandbox } from 'e2b'

const id = process.env.SANDLOT_SANDBOX_ID
const say = (event, fields = {}) => console.log(JSON.stringify({ event, at: Date.now(), ...fields }))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const hour = 3600_000

let last = -1
let lastAt = 0
const onStdout = (data) => {
  for (const line of data.split('\n')) {
    if (line.trim() === '') continue
    last = Number(line)
    lastAt = Date.now()
    say('line', { n: last })
  }
}

const sbx = await Sandbox.connect(id, { timeoutMs: hour })
const counter = await sbx.commands.run('i=0; while :; do echo $i; i=$((i+1)); sleep 0.5; done',
  { background: true, onStdout, timeoutMs: 0 })
say('started', { pid: counter.pid })
try {
  await counter.wait()
  say('ended')
} catch (err) {
  say('cut', { error: String(err?.message ?? err), last })
}

const before = last
const beforeAt = lastAt
for (let attempt = 1; ; attempt++) {
  try {
    const again = await Sandbox.connect(id, { timeoutMs: hour })
    const handle = await again.commands.connect(counter.pid, { onStdout, timeoutMs: 0 })
    while (last <= before) await sleep(100)
    say('reconnected', { pid: counter.pid, before, after: last, gapMs: lastAt - beforeAt, attempt })
    await again.commands.kill(counter.pid)
    await handle.wait().catch(() => {})
    process.exit(0)
  } catch (err) {
    say('retry', { attempt, error: String(err?.message ?? err) })
    await sleep(1000)
  }
}
