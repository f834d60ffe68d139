// The E2B SDK smoke of `make e2e` (test/release): the unchanged SDK
// against the chart's API Service — create, commands.run, runCode, pause,
// connect (resumes), kill. Each step is logged with its time so that a
// failure names the call that failed.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

async function step (name, fn) {
  const t0 = Date.now()
  try {
    const v = await fn()
    console.log(`${new Date().toISOString()} ${name}: ok in ${Date.now() - t0} ms`)
    return v
  } catch (err) {
    console.log(`${new Date().toISOString()} ${name}: failed after ${Date.now() - t0} ms`)
    throw err
  }
}

const sbx = await step('create', () => Sandbox.create())
await step('commands.run', async () => {
  const r = await sbx.commands.run('echo smoke > /tmp/smoke && cat /tmp/smoke')
  assert.equal(r.stdout, 'smoke\n')
})
await step('runCode', async () => assert.equal((await sbx.runCode('x = 6 * 7\nx')).text, '42'))
await step('pause', async () => assert.equal(await sbx.pause(), true))
const back = await step('connect', () => Sandbox.connect(sbx.sandboxId))
await step('files.read', async () => assert.equal(await back.files.read('/tmp/smoke'), 'smoke\n'))
await step('runCode after resume', async () => assert.equal((await back.runCode('x')).text, '42'))
await step('kill', async () => assert.equal(await back.kill(), true))
await step('kill again', async () => assert.equal(await back.kill(), false))
console.log(`E2B SDK smoke: sandbox ${sbx.sandboxId} created, ran, paused, resumed and killed`)
