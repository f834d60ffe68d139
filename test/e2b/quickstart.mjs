// The README's E2B quickstart against a `make up` cluster (hack/quickstart.sh
// runs it): the unchanged SDK creates a sandbox of the default template,
// runs a command and code in it, and kills it.
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create()
const { stdout } = await sbx.commands.run('uname -r')
const { text } = await sbx.runCode('sum(range(10))')
console.log(`E2B SDK: sandbox ${sbx.sandboxId}, guest kernel ${stdout.trim()}, runCode -> ${text}`)
if (text !== '45') throw new Error(`runCode answered ${text}`)
await sbx.kill()
