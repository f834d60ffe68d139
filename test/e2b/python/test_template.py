"""Templates built from Python: e2b.Template() through sandlot-api, as
../build.test.mjs builds them with the JS SDK (the harness runs this file
in the sandbox-url run only: a build does not depend on how sandbox
traffic is routed)."""

import os
import tempfile

from e2b import Sandbox, Template, wait_for_file

IMAGE = os.environ.get("SANDLOT_BUILD_IMAGE", "")


def test_template_build():
    assert IMAGE, "run with SANDLOT_BUILD_IMAGE (make test-e2b sets it)"
    ctx = tempfile.mkdtemp(prefix="sandlot-pybuild-")
    with open(os.path.join(ctx, "hello.txt"), "w") as f:
        f.write("hello from python\n")
    tpl = (Template(file_context_path=ctx)
           .from_image(IMAGE)
           .copy("hello.txt", "/app/")
           .set_envs({"GREETING": "py built"})
           .set_workdir("/app")
           .run_cmd('echo "marker $GREETING" > marker', user="root")
           .set_start_cmd("while true; do date +%s > /tmp/started; sleep 1; done", wait_for_file("/tmp/started")))
    logs = []
    Template.build(tpl, "py-built", cpu_count=1, memory_mb=256, on_build_logs=logs.append)
    text = "\n".join(str(e.message) for e in logs)
    assert "RUN echo" in text and "the ready command passed" in text, text[-2000:]
    info = Template.assign_tags("py-built", "stable")
    assert info.build_id and [(t.tag, t.build_id) for t in Template.get_tags("py-built")] == \
        [("default", info.build_id), ("stable", info.build_id)]
    s = Sandbox.create("py-built:stable", timeout=120)
    Template.remove_tags("py-built", "stable")
    try:
        assert s.files.read("/app/hello.txt") == "hello from python\n"
        assert s.commands.run("cat /app/marker").stdout == "marker py built\n"
        assert s.commands.run('echo "$GREETING"').stdout == "py built\n"
    finally:
        s.kill()
