// The E2B SDK smoke of `make e2e` (test/release): the unchanged SDK
// against the chart's API Service — create, commands.run, runCode, pause,
// connect (resumes), kill.
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create()
const r = await sbx.commands.run('echo smoke > /tmp/smoke && cat /tmp/smoke')
assert.equal(r.stdout, 'smoke\n')
assert.equal((await sbx.runCode('x = 6 * 7\nx')).text, '42')
assert.equal(await sbx.pause(), true)
const back = await Sandbox.connect(sbx.sandboxId)
assert.equal(await back.files.read('/tmp/smoke'), 'smoke\n')
assert.equal((await back.runCode('x')).text, '42')
assert.equal(await back.kill(), true)
assert.equal(await back.kill(), false)
console.log(`E2B SDK smoke: sandbox ${sbx.sandboxId} created, ran, paused, resumed and killed`)
