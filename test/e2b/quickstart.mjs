// The README's E2B quickstart against a `make up` cluster (hack/quickstart.sh
// runs it): the unchanged SDK creates a sandbox of its default template
// (code-interpreter-v1: config/samples/code-interpreter.yaml), runs a
// command, python with pandas and javascript in it, and kills it.
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create()
const { stdout } = await sbx.commands.run('uname -r')
const { text } = await sbx.runCode('sum(range(10))')
console.log(`E2B SDK: sandbox ${sbx.sandboxId}, guest kernel ${stdout.trim()}, runCode -> ${text}`)
if (text !== '45') throw new Error(`runCode answered ${text}`)
const table = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})')
if (!table.results[0]?.html?.includes('<table')) throw new Error(`a DataFrame answered ${JSON.stringify(table)}`)
const js = await sbx.runCode('[1, 2, 3].map((x) => x * 2).join(",")', { language: 'js' })
if (js.text !== '2,4,6') throw new Error(`javascript answered ${JSON.stringify(js)}`)
console.log('E2B SDK: a pandas DataFrame came back as an html table; javascript ran')
await sbx.kill()
