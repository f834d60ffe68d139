// Templates built with the real, unmodified E2B SDK: Template().build()
// and fromDockerfile through sandlot-api. Run once by test/e2b/e2b_test.go
// (the builds do not depend on how sandbox traffic is routed).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox, Template, BuildError, waitForFile } from 'e2b'

const image = process.env.SANDLOT_BUILD_IMAGE
assert.ok(process.env.E2B_API_URL && process.env.E2B_API_KEY && image, 'run with E2B_API_URL, E2B_API_KEY and SANDLOT_BUILD_IMAGE')

const context = fs.mkdtempSync(path.join(os.tmpdir(), 'sandlot-build-'))
fs.writeFileSync(path.join(context, 'hello.txt'), 'hello from the build context\n')

// every step kind; the start command keeps a file fresh once it runs
function fullTemplate(runLine) {
  return Template({ fileContextPath: context })
    .fromImage(image)
    .copy('hello.txt', '/app/')
    .setEnvs({ GREETING: 'built in' })
    .setWorkdir('/app')
    .runCmd(runLine, { user: 'root' })
    .setUser('user')
    .runCmd('id -un > /tmp/built-as')
    .setStartCmd('while true; do date +%s > /tmp/started; echo "start command tick"; sleep 1; done', waitForFile('/tmp/started'))
}

async function build(tpl, name) {
  const logs = []
  const began = Date.now()
  await Template.build(tpl, name, { cpuCount: 1, memoryMB: 256, onBuildLogs: (e) => logs.push(e) })
  return { logs, ms: Date.now() - began }
}

async function run(s, cmd) {
  return (await s.commands.run(cmd)).stdout
}

// startedAt is the time the start command last wrote: its loop truncates
// the file before each write, so an empty read is tried again.
async function startedAt(s) {
  for (let i = 0; i < 20; i++) {
    const t = Number(await run(s, 'cat /tmp/started'))
    if (t > 0) return t
    await new Promise((r) => setTimeout(r, 100))
  }
  assert.fail('/tmp/started stays empty: the start command does not run')
}

test('Template.build: a file, an env, a workdir, a user, a RUN and a start command with a ready check', async () => {
  const { logs, ms } = await build(fullTemplate('echo "marker $GREETING" > marker'), 'sdk-built')
  const text = logs.map((e) => e.message).join('\n')
  assert.match(text, /\[4\/6\] RUN echo "marker \$GREETING" > marker/, 'the build log names each step')
  assert.match(text, /the ready command passed/)
  console.log(`# built sdk-built in ${ms} ms`)
  const s = await Sandbox.create('sdk-built', { timeoutMs: 120_000 })
  try {
    assert.equal(await s.files.read('/app/hello.txt'), 'hello from the build context\n')
    assert.equal(await run(s, 'cat /app/marker'), 'marker built in\n', 'RUN ran in the WORKDIR with the ENV')
    assert.equal(await run(s, 'cat /tmp/built-as'), 'user\n', 'USER applied to the step after it')
    assert.equal(await run(s, 'echo "$GREETING"'), 'built in\n', 'the ENV is the sandbox\'s too')
    // The start command runs on: a later tick (one a second) writes a
    // later time. Polled until it does, for at most 30 s.
    const before = await startedAt(s)
    let later = before
    for (const end = Date.now() + 30_000; later <= before && Date.now() < end;) {
      await new Promise((r) => setTimeout(r, 250))
      later = await startedAt(s)
    }
    assert.ok(later > before, `the start command runs in the sandbox: /tmp/started stays at ${before}`)
    let lines = []
    for (let i = 0; i < 20 && !lines.some((l) => l.message === 'start command tick'); i++) {
      const res = await fetch(`${process.env.E2B_API_URL}/v2/sandboxes/${s.sandboxId}/logs`, { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })
      assert.equal(res.status, 200)
      lines = (await res.json()).logs
      await new Promise((r) => setTimeout(r, 500))
    }
    assert.ok(lines.some((l) => l.message === 'start command tick'), `the start command's output in the sandbox's logs: ${JSON.stringify(lines.slice(-5))}`)
  } finally {
    await s.kill()
  }
})

test('a rebuild of unchanged steps is a cache hit; a changed step runs again with only the steps after it; tags name builds', async () => {
  const v1 = await Template.assignTags('sdk-built', 'v1')
  assert.ok(v1.buildId, JSON.stringify(v1))
  const cached = await build(fullTemplate('echo "marker $GREETING" > marker'), 'sdk-built')
  const changed = await build(fullTemplate('echo "changed $GREETING" > marker'), 'sdk-built')
  console.log(`# cached rebuild ${cached.ms} ms, rebuild with step 4 of 6 changed ${changed.ms} ms`)
  assert.ok(cached.ms * 3 < changed.ms, `the cached rebuild (${cached.ms} ms) is not faster than a real one (${changed.ms} ms)`)
  const text = changed.logs.map((e) => e.message).join('\n')
  for (const step of ['[1/6] COPY', '[2/6] ENV', '[3/6] WORKDIR']) {
    assert.ok(text.includes(`CACHED ${step}`), `step ${step} is not cached:\n${text}`)
  }
  for (const step of ['[4/6] RUN', '[5/6] USER', '[6/6] RUN']) {
    assert.ok(text.includes(step) && !text.includes(`CACHED ${step}`), `step ${step} did not run again:\n${text}`)
  }
  // v1 names the build the rebuild replaced: listed, refused by name; v2 names the new one.
  const tags = await Template.getTags('sdk-built')
  const byTag = Object.fromEntries(tags.map((t) => [t.tag, t.buildId]))
  assert.equal(byTag.v1, v1.buildId, JSON.stringify(tags))
  assert.ok(byTag.default && byTag.default !== v1.buildId, JSON.stringify(tags))
  await assert.rejects(Sandbox.create('sdk-built:v1'), /no longer keeps/)
  assert.equal((await Template.assignTags('sdk-built', 'v2')).buildId, byTag.default)
  const s = await Sandbox.create('sdk-built:v2', { timeoutMs: 60_000 })
  try {
    assert.equal(await run(s, 'cat /app/marker'), 'changed built in\n')
    assert.equal(await s.files.read('/app/hello.txt'), 'hello from the build context\n', 'the cached COPY\'s file is there')
    assert.equal(await run(s, 'cat /tmp/built-as'), 'user\n')
    await startedAt(s)
  } finally {
    await s.kill()
  }
  await Template.removeTags('sdk-built', ['v1', 'v2'])
  assert.deepEqual((await Template.getTags('sdk-built')).map((t) => t.tag), ['default'])
})

test('fromDockerfile: its steps become the build', async () => {
  const dockerfile = `FROM ${image}\nENV FROM_DOCKERFILE=yes\nWORKDIR /srv\nRUN echo "df $FROM_DOCKERFILE" > df-marker\n`
  await build(Template().fromDockerfile(dockerfile), 'sdk-dockerfile')
  const s = await Sandbox.create('sdk-dockerfile', { timeoutMs: 60_000 })
  try {
    assert.equal(await run(s, 'cat /srv/df-marker'), 'df yes\n')
  } finally {
    await s.kill()
  }
})

test('a failing RUN ends the build in error with its output', async () => {
  const tpl = Template().fromImage(image).runCmd('echo about to fail; exit 3')
  await assert.rejects(build(tpl, 'sdk-broken'), (err) => {
    assert.ok(err instanceof BuildError, String(err))
    assert.match(err.message, /exited with status 3/)
    assert.match(err.message, /about to fail/)
    return true
  })
})

test('a public template: team B publishes its build, team A starts it from a copy of its own, and not after it is taken back', async () => {
  const keyB = process.env.SANDLOT_TEAM_B_KEY
  assert.ok(keyB, 'run with SANDLOT_TEAM_B_KEY (a key of team-b)')
  const patch = (key, body) => fetch(`${process.env.E2B_API_URL}/v2/templates/shared-b`, {
    method: 'PATCH', headers: { 'X-API-KEY': key, 'Content-Type': 'application/json' }, body: JSON.stringify(body) })
  const tpl = Template({ fileContextPath: context }).fromImage(image).copy('hello.txt', '/shared/')
    .runCmd('echo "published by team b" > /shared/marker', { user: 'root' })
  const shared = `${process.env.SANDLOT_TEAM_B}/shared-b` // another team's template is named by its team
  assert.ok(process.env.SANDLOT_TEAM_B, 'run with SANDLOT_TEAM_B (team b\'s namespace)')
  await Template.build(tpl, 'shared-b', { cpuCount: 1, memoryMB: 256, apiKey: keyB })
  assert.equal(await Template.exists(shared), false, 'team A sees team B\'s private template')
  await assert.rejects(Sandbox.create(shared), /not found/i)
  assert.equal((await patch(process.env.E2B_API_KEY, { public: true })).status, 404, 'team A published team B\'s template')
  assert.equal((await patch(keyB, { public: true })).status, 200)
  assert.equal(await Template.exists(shared), true, 'team A does not see the public template')
  assert.equal(await Template.exists('shared-b'), false, 'a bare name reached another team\'s template')
  await assert.rejects(Sandbox.create('shared-b'), /<namespace>\/<name>/, 'a bare name started another team\'s template')
  const began = Date.now()
  const s = await Sandbox.create(shared, { timeoutMs: 60_000 })
  console.log(`# team A's first sandbox of team B's public template (its copy's base built first) in ${Date.now() - began} ms`)
  try {
    assert.equal(await s.commands.run('cat /shared/marker').then((r) => r.stdout), 'published by team b\n')
    assert.equal(await s.files.read('/shared/hello.txt'), 'hello from the build context\n', 'the COPY step\'s files came along')
    const listedB = await Sandbox.list({ apiKey: keyB }).nextItems()
    assert.ok(!listedB.some((x) => x.sandboxId === s.sandboxId), 'team B lists team A\'s sandbox of its template')
  } finally {
    await s.kill()
  }
  // the API answers a PATCH once its next read sees it: no wait here
  assert.equal((await patch(keyB, { public: false })).status, 200)
  assert.equal(await Template.exists(shared), false, 'team A still sees the template taken back')
  await assert.rejects(Sandbox.create(shared), /no public template/)
  await assert.rejects(Sandbox.create('shared-b'), /no longer public/, 'team A\'s copy outlived the source\'s publication')
})
