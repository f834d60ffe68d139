"""The async clients (e2b.AsyncSandbox, e2b_code_interpreter.AsyncSandbox):
the same API over asyncio, several sandboxes driven at once."""

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException, SandboxState
from e2b_code_interpreter import AsyncSandbox as AsyncCodeSandbox

from conftest import RUN


@pytest.mark.asyncio
async def test_async_lifecycle():
    sbx = await AsyncCodeSandbox.create(metadata={"run": RUN, "role": "async"}, timeout=600)
    try:
        info = await sbx.get_info()
        assert info.state == SandboxState.RUNNING and info.metadata["role"] == "async"
        out = []
        r = await sbx.commands.run("echo a; sleep 0.2; echo b", on_stdout=out.append)
        assert (r.exit_code, "".join(out)) == (0, "a\nb\n")
        with pytest.raises(CommandExitException):
            await sbx.commands.run("false")
        await sbx.files.write("/tmp/async.txt", "from asyncio")
        assert await sbx.files.read("/tmp/async.txt") == "from asyncio"
        ex = await sbx.run_code("21 * 2")
        assert ex.text == "42"
        assert await sbx.pause() is True
        back = await AsyncCodeSandbox.connect(sbx.sandbox_id)
        assert await back.files.read("/tmp/async.txt") == "from asyncio"
        assert (await back.run_code("6 * 7")).text == "42"
    finally:
        await AsyncSandbox.kill(sbx.sandbox_id)


@pytest.mark.asyncio
async def test_async_concurrent():
    """Three sandboxes created, driven and killed concurrently."""
    made = await asyncio.gather(*(AsyncSandbox.create(metadata={"run": RUN, "role": f"conc-{i}"}) for i in range(3)))
    try:
        rs = await asyncio.gather(*(s.commands.run(f"echo {i}") for i, s in enumerate(made)))
        assert [r.stdout for r in rs] == ["0\n", "1\n", "2\n"]
        assert len({s.sandbox_id for s in made}) == 3
    finally:
        assert all(await asyncio.gather(*(s.kill() for s in made)))
