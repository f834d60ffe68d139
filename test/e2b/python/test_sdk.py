"""The sync clients (e2b.Sandbox, e2b_code_interpreter.Sandbox): what
../sdk.test.mjs does with the JS SDK, as a Python program writes it."""

import base64
import os
import re
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest
from e2b import (AuthenticationException, CommandExitException, PtySize, RateLimitException, Sandbox, SandboxQuery,
                 SandboxState, SandboxUnreachableException)
from e2b_code_interpreter import Sandbox as CodeSandbox

from conftest import API_KEY, API_URL, MODE, NET, ONE_MODE, RUN, api, fetch_in, plausible, send

state = {}  # the main sandbox, replaced when connect hands back a new object


@pytest.fixture(scope="module")
def sbx():
    """The module's main sandbox, shared by its tests (so not tracked: the
    tests' own sandboxes go when each ends)."""
    state["sbx"] = CodeSandbox.create(metadata={"run": RUN, "role": "main"}, timeout=900)
    yield state["sbx"]
    try:
        state["sbx"].kill()
    except Exception:  # noqa: BLE001 — killed by a test already
        pass


def test_create(sbx):
    assert re.fullmatch(r"[a-z0-9]{20}", sbx.sandbox_id)
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id == "code-interpreter-v1"
    assert info.state == SandboxState.RUNNING
    assert info.metadata == {"run": RUN, "role": "main"}
    assert info.cpu_count >= 1 and info.memory_mb >= 128, info
    assert sbx.is_running()


def test_default_user(sbx):
    """As on E2B: commands and files act as "user" in /home/user, who may
    sudo; the image has curl and git."""
    assert sbx.commands.run("whoami; pwd; echo $HOME").stdout == "user\n/home/user\n/home/user\n"
    assert sbx.files.write("rel.txt", "relative").path == "/home/user/rel.txt"
    info = sbx.files.get_info("rel.txt")
    assert (info.path, info.owner, info.group) == ("/home/user/rel.txt", "user", "user")
    assert sbx.commands.run("sudo -n whoami").stdout == "root\n"
    assert sbx.commands.run("whoami", user="root").stdout == "root\n"
    tools = sbx.commands.run("curl --version | head -1; git --version")
    assert tools.stdout.startswith("curl ") and "git version" in tools.stdout, tools.stdout


def test_commands_run(sbx):
    r = sbx.commands.run('echo out; echo err >&2; echo "$GREETING"', envs={"GREETING": "hi sandlot"})
    assert (r.exit_code, r.stdout, r.stderr) == (0, "out\nhi sandlot\n", "err\n")
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("exit 7")
    assert e.value.exit_code == 7


def test_commands_background(sbx):
    h = sbx.commands.run("sleep 600", background=True)
    assert any(p.pid == h.pid for p in sbx.commands.list())
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()


def test_commands_stream_and_stdin(sbx):
    out = []
    r = sbx.commands.run("for i in 1 2 3; do echo line$i; done", on_stdout=out.append)
    assert r.exit_code == 0 and "".join(out) == "line1\nline2\nline3\n"
    h = sbx.commands.run("read x; echo got-$x", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "typed\n")
    assert h.wait().stdout == "got-typed\n"


def test_pty(sbx):
    """A PTY with its size and env; reconnected, it keeps both."""
    out = bytearray()
    h = sbx.pty.create(PtySize(rows=24, cols=80), envs={"PTY_MARK": "pty-env"}, timeout=0)
    sbx.pty.send_stdin(h.pid, b"echo A-$PTY_MARK-$(tput cols)\n")
    deadline = time.time() + 20
    for _, _, pty in h:
        out += pty or b""
        if b"A-pty-env-80" in out or time.time() > deadline:
            break
    assert b"A-pty-env-80" in out, bytes(out)
    h.disconnect()
    again = sbx.pty.connect(h.pid, timeout=0)
    sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(h.pid, b"echo B-$PTY_MARK-$(tput cols)\nexit\n")
    out = bytearray()
    again.wait(on_pty=lambda d: out.extend(d))
    assert b"B-pty-env-100" in out, bytes(out)


def test_files(sbx):
    sbx.files.make_dir("/tmp/e2b-dir")
    sbx.files.write("/tmp/e2b-dir/a.txt", "alpha")
    assert sbx.files.read("/tmp/e2b-dir/a.txt") == "alpha"
    assert [e.name for e in sbx.files.list("/tmp/e2b-dir")] == ["a.txt"]
    assert sbx.files.exists("/tmp/e2b-dir/a.txt")
    info = sbx.files.get_info("/tmp/e2b-dir/a.txt")
    assert (info.name, info.size) == ("a.txt", 5)
    moved = sbx.files.rename("/tmp/e2b-dir/a.txt", "/tmp/e2b-dir/b.txt")
    assert moved.path == "/tmp/e2b-dir/b.txt"
    assert sbx.files.read("/tmp/e2b-dir/b.txt", format="bytes") == b"alpha"
    sbx.files.remove("/tmp/e2b-dir/b.txt")
    assert not sbx.files.exists("/tmp/e2b-dir/b.txt")
    sbx.files.remove("/tmp/e2b-dir/b.txt")  # gone already: no error, as on E2B
    big = b"x" * (3 << 20)  # streams through the proxy
    sbx.files.write("/tmp/e2b-dir/big.bin", big)
    assert len(sbx.files.read("/tmp/e2b-dir/big.bin", format="bytes")) == len(big)
    many = sbx.files.write_files([{"path": "/tmp/e2b-dir/m1", "data": "one"}, {"path": "/tmp/e2b-dir/m2", "data": b"two"}])
    assert sorted(w.path for w in many) == ["/tmp/e2b-dir/m1", "/tmp/e2b-dir/m2"]


def test_file_metadata(sbx):
    """Metadata travels as X-Metadata-* headers, is kept as xattrs (on /tmp,
    a tmpfs, as trusted ones the agent alone reads): listed,
    stat'ed, kept by a rename, replaced by the next write."""
    w = sbx.files.write("/tmp/md/a.txt", "data", metadata={"Owner": "team-a", "stage": "raw"})
    want = {"owner": "team-a", "stage": "raw"}
    assert w.metadata == want, w
    assert sbx.files.get_info("/tmp/md/a.txt").metadata == want
    assert [e.metadata for e in sbx.files.list("/tmp/md")] == [want]
    sbx.files.rename("/tmp/md/a.txt", "/tmp/md/b.txt")
    assert sbx.files.get_info("/tmp/md/b.txt").metadata == want
    sbx.files.write("/tmp/md/b.txt", "again")
    assert sbx.files.get_info("/tmp/md/b.txt").metadata is None


def _fetch(sbx, url, data=None, headers=None):
    """GET (or POST data to) a file URL as a browser would; in sandbox-url
    mode with the routing headers the SDK's own requests carry."""
    h = dict(headers or {})
    if MODE == "sandbox-url":
        h.update({"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"})
    return send(urllib.request.Request(url, data=data, headers=h, method="POST" if data is not None else "GET"))


def test_signed_urls(sbx):
    """Signed download and upload URLs work without the access token; a
    tampered or expired signature is refused."""
    sbx.files.write("/tmp/signed.txt", "signed content")
    url = sbx.download_url("/tmp/signed.txt", use_signature_expiration=120)
    assert "signature=" in url and "signature_expiration=" in url, url
    assert _fetch(sbx, url) == (200, b"signed content")
    assert _fetch(sbx, url.replace("signature=v1_", "signature=v1_x"))[0] == 401
    expired = sbx.download_url("/tmp/signed.txt", use_signature_expiration=-10)
    assert _fetch(sbx, expired)[0] == 401
    up = sbx.upload_url("/tmp/signed-up.txt", use_signature_expiration=120)
    body = (b"--b0und\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\nuploaded\r\n--b0und--\r\n")
    status, reply = _fetch(sbx, up, body, {"Content-Type": "multipart/form-data; boundary=b0und"})
    assert status == 200, reply
    assert sbx.files.read("/tmp/signed-up.txt") == "uploaded"


def test_watch_dir(sbx):
    """Events with their entries (envd 0.6.3), recursive."""
    sbx.files.make_dir("/tmp/watched/sub")
    w = sbx.files.watch_dir("/tmp/watched", recursive=True, include_entry=True, allow_network_mounts=True)
    sbx.files.write("/tmp/watched/sub/new.txt", "hi")
    deadline = time.time() + 20
    events = []
    while time.time() < deadline and not any(ev.name == "sub/new.txt" for ev in events):
        events += w.get_new_events()
        time.sleep(0.3)
    w.stop()
    ev = next((ev for ev in events if ev.name == "sub/new.txt"), None)
    assert ev is not None, events
    assert ev.entry is not None and ev.entry.path == "/tmp/watched/sub/new.txt" and ev.entry.owner == "user", ev


def test_run_code(sbx):
    a = sbx.run_code('x = 20\nprint("hello")\nx + 22')
    assert a.text == "42" and a.logs.stdout == ["hello\n"]
    assert sbx.run_code("x * 2").text == "40"
    c = sbx.run_code("1/0")
    assert c.error.name == "ZeroDivisionError" and "ZeroDivisionError" in c.error.traceback


def test_code_contexts(sbx, track):
    ctx = sbx.create_code_context(cwd="/tmp")
    assert ctx.cwd == "/tmp"
    assert sbx.run_code("import os\nprint(os.getcwd())", context=ctx).logs.stdout == ["/tmp\n"]
    sbx.run_code("y = 7", context=ctx)
    assert sbx.run_code("y * 6", context=ctx).text == "42"
    assert sbx.run_code('"y" in globals()').text == "False", "the default context sees another context's state"
    assert any(c.id == ctx.id and c.cwd == "/tmp" for c in sbx.list_code_contexts())
    sbx.restart_code_context(ctx)
    assert sbx.run_code("y", context=ctx).error.name == "NameError"
    sbx.remove_code_context(ctx)
    assert not any(c.id == ctx.id for c in sbx.list_code_contexts())
    js = sbx.create_code_context(language="js")
    assert sbx.run_code("let n = 40", context=js).error is None
    assert sbx.run_code("n + 2", context=js).text == "42"
    sh = sbx.create_code_context(language="bash")
    sbx.run_code("n=40; cd /tmp", context=sh)
    assert sbx.run_code("echo $((n + 2)) $PWD", context=sh).logs.stdout == ["42 /tmp\n"]
    for c in (js, sh):
        sbx.remove_code_context(c)


def test_data_stack(sbx):
    fig = sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    assert fig.error is None, fig.error
    png = next((r.png for r in fig.results if r.png), None)
    assert png, [r.formats() for r in fig.results]
    assert base64.b64decode(png)[1:4] == b"PNG"
    df = sbx.run_code('import numpy as np, pandas as pd\npd.DataFrame({"a": np.arange(2), "b": ["x", "y"]})')
    assert "<table" in df.results[0].html
    assert df.results[0].data == {"a": [0, 1], "b": ["x", "y"]}


def test_timeout_and_metrics(sbx):
    sbx.set_timeout(600)
    left = sbx.get_info().end_at - datetime.now(timezone.utc)
    assert timedelta(seconds=540) < left <= timedelta(seconds=605), left
    metrics = []
    for _ in range(40):
        metrics = sbx.get_metrics()
        if metrics:
            break
        time.sleep(1)
    assert metrics
    plausible(metrics[0])


def test_logs(sbx):
    sbx.commands.run("echo written-by-python > /proc/1/fd/1 || true", user="root")
    for _ in range(30):
        status, body = api("GET", f"/v2/sandboxes/{sbx.sandbox_id}/logs?limit=1000")
        assert status == 200, body
        if any(l["message"] == "process ended" for l in body["logs"]):
            break
        time.sleep(0.5)
    assert any(l["message"] == "process ended" for l in body["logs"]), body["logs"][-5:]


def test_security(sbx, track):
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="e2b_0000000000000000000000000000000000000000")
    for method, path in [("GET", "/v2/sandboxes"), ("GET", f"/sandboxes/{sbx.sandbox_id}"),
                         ("DELETE", f"/sandboxes/{sbx.sandbox_id}"), ("POST", f"/sandboxes/{sbx.sandbox_id}/pause")]:
        status, body = api(method, path, key="e2b_wrong")
        assert (status, body["code"]) == (401, 401), (method, path)
    other = track(Sandbox.create(metadata={"run": RUN, "role": "other"}))
    req = urllib.request.Request(API_URL + "/health", headers={
        "E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": other._envd_access_token or "none"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 401
    assert other.kill() is True


def test_list(sbx, track):
    for _ in range(2):
        track(Sandbox.create(metadata={"run": RUN, "role": "listed"}))
    only = Sandbox.list(query=SandboxQuery(metadata={"run": RUN, "role": "listed"})).next_items()
    assert len(only) == 2
    pager = Sandbox.list(query=SandboxQuery(metadata={"run": RUN}), limit=2)
    seen, pages = [], 0
    while pager.has_next:
        seen += [s.sandbox_id for s in pager.next_items()]
        pages += 1
    assert pages == 2 and len(set(seen)) == 3 and sbx.sandbox_id in seen
    # Newest first by default, oldest first on request; startedAfter and
    # the template filter narrow it; running and paused page together.
    newest = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"run": RUN})).next_items()]
    oldest = [s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"run": RUN}), order="asc").next_items()]
    assert oldest == newest[::-1] and newest[-1] == sbx.sandbox_id, (newest, oldest)
    later = datetime.now(timezone.utc) + timedelta(minutes=5)
    assert Sandbox.list(query=SandboxQuery(metadata={"run": RUN}, started_after=later)).next_items() == []
    assert Sandbox.list(query=SandboxQuery(metadata={"run": RUN}, template="no-such-template")).next_items() == []
    assert len(Sandbox.list(query=SandboxQuery(metadata={"run": RUN}, template="code-interpreter-v1")).next_items()) == 1
    listed = track(Sandbox.create(metadata={"run": RUN, "role": "paused-listed"}))
    assert listed.pause()
    both, pager = [], Sandbox.list(query=SandboxQuery(metadata={"run": RUN}, state=[SandboxState.RUNNING, SandboxState.PAUSED]), limit=1)
    while pager.has_next:
        both += [(s.sandbox_id, s.state) for s in pager.next_items()]
    assert (listed.sandbox_id, SandboxState.PAUSED) in both and len(both) == 4, both


@ONE_MODE
def test_filesystem_pause(track):
    def boot_id(x):
        return x.commands.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    s = track(Sandbox.create(metadata={"run": RUN, "role": "fs-pause"}))
    s.files.write("/home/user/kept.txt", "on disk")
    h = s.commands.run("sleep 900", background=True)
    boot0 = boot_id(s)
    assert s.pause(mode="filesystem")
    back = Sandbox.connect(s.sandbox_id)
    assert back.sandbox_id == s.sandbox_id and back.files.read("/home/user/kept.txt") == "on disk"
    boot1 = boot_id(back)
    assert boot1 != boot0, "a filesystem-only pause resumes by a boot"
    assert not any(p.pid == h.pid for p in back.commands.list()), "its processes are gone"
    assert back.pause()
    again = Sandbox.connect(s.sandbox_id, on_resume="reboot")
    assert boot_id(again) != boot1 and again.files.read("/home/user/kept.txt") == "on disk"


def test_pause_connect(sbx):
    sbx.files.write("/tmp/kept.txt", "before pause")
    h = sbx.commands.run("sleep 900", background=True)
    assert sbx.pause(strict=True) is True  # its envd answers: paused
    assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
    resumed = Sandbox.connect(sbx.sandbox_id)
    assert resumed.sandbox_id == sbx.sandbox_id
    assert resumed.files.read("/tmp/kept.txt") == "before pause"
    assert any(p.pid == h.pid for p in resumed.commands.list()), "the background process survived the pause"
    state["sbx"] = CodeSandbox.connect(sbx.sandbox_id)
    assert state["sbx"].run_code("x").text == "20"


def test_pause_during_long_command(track):
    """Paused while a long command runs: after the resume it completes and
    its handle gets the result; a finished command is not listed."""
    s = track(Sandbox.create(metadata={"run": RUN, "role": "long"}))
    long = s.commands.run("sleep 8; echo finished", background=True)
    assert s.pause() is True
    back = Sandbox.connect(s.sandbox_id)
    r = back.commands.connect(long.pid).wait()
    assert (r.exit_code, r.stdout) == (0, "finished\n")
    assert all(p.pid != long.pid for p in back.commands.list())


def test_auto_resume(track):
    s = track(Sandbox.create(metadata={"run": RUN, "role": "auto"}, lifecycle={"on_timeout": "pause", "auto_resume": True}))
    s.files.write("/tmp/auto.txt", "still here")
    assert s.pause() is True
    assert s.files.read("/tmp/auto.txt") == "still here"
    assert s.get_info().state == SandboxState.RUNNING


def _port_get(s, port, path):
    """GET path from port of sandbox s through the proxy, as a browser
    would: its host name in domain mode, the routing headers else."""
    if MODE == "domain":
        req = urllib.request.Request(f"https://{s.get_host(port)}{path}")
    else:
        req = urllib.request.Request(API_URL + path, headers={"E2b-Sandbox-Id": s.sandbox_id, "E2b-Sandbox-Port": str(port)})
    return send(req)


def test_auto_resume_http(track):
    """A paused sandbox with autoResume wakes on a request to its HTTP
    server's port, which answers it, as on E2B."""
    s = track(Sandbox.create(metadata={"run": RUN, "role": "auto-http"}, lifecycle={"on_timeout": "pause", "auto_resume": True}))
    s.commands.run("mkdir -p /tmp/www && echo served > /tmp/www/index.html")
    s.commands.run("cd /tmp/www && python3 -m http.server 8000", background=True)
    deadline = time.time() + 30
    while _port_get(s, 8000, "/index.html") != (200, b"served\n"):
        assert time.time() < deadline, "the HTTP server never answered through the proxy"
        time.sleep(0.5)
    assert s.pause() is True
    assert s.get_info().state == SandboxState.PAUSED
    assert _port_get(s, 8000, "/index.html") == (200, b"served\n")
    assert s.get_info().state == SandboxState.RUNNING


HOST_ECHO = """import http.server as h
class H(h.BaseHTTPRequestHandler):
    def do_GET(self):
        b = self.headers["Host"].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
h.HTTPServer(("", 8001), H).serve_forever()
"""


def test_mask_request_host(track):
    """network.mask_request_host: the Host the sandbox's server sees, its port filled in."""
    s = track(Sandbox.create(metadata={"run": RUN, "role": "mask"}, network={"mask_request_host": "localhost:${PORT}"}))
    s.files.write("/tmp/host.py", HOST_ECHO)
    s.commands.run("python3 /tmp/host.py", background=True)
    deadline = time.time() + 30
    while (got := _port_get(s, 8001, "/"))[0] != 200:
        assert time.time() < deadline, f"the server never answered through the proxy: {got}"
        time.sleep(0.3)
    assert got == (200, b"localhost:8001")


def test_snapshot(track):
    sbx = state["sbx"]
    sbx.files.write("/tmp/snap.txt", "snapshotted")
    snap = sbx.create_snapshot()
    assert snap.snapshot_id
    clone = track(Sandbox.create(snap.snapshot_id, metadata={"run": RUN, "role": "clone"}))
    assert clone.sandbox_id != sbx.sandbox_id
    assert clone.files.read("/tmp/snap.txt") == "snapshotted"
    listed = []
    pager = Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id)
    while pager.has_next:
        listed += pager.next_items()
    assert any(s.snapshot_id == snap.snapshot_id for s in listed), listed


def test_fork(track):
    sbx = state["sbx"]
    sbx.files.write("/tmp/fork.txt", "parent state")
    forks = Sandbox.fork(sbx.sandbox_id, count=2)
    assert len(forks) == 2
    for f in forks:
        assert isinstance(f, Sandbox), f"fork failed: {f}"
        track(f)
        assert f.files.read("/tmp/fork.txt") == "parent state"
    assert forks[0].sandbox_id != forks[1].sandbox_id
    assert sbx.is_running()


def test_rollback(track):
    sbx = state["sbx"]
    sbx.files.write("/tmp/rb.txt", "old")
    snap = sbx.create_snapshot()
    sbx.files.write("/tmp/rb.txt", "new")
    status, body = api("POST", f"/sandboxes/{sbx.sandbox_id}/rollback", {"snapshotID": snap.snapshot_id})
    assert status == 200 and body["sandboxID"] == sbx.sandbox_id, body
    assert sbx.files.read("/tmp/rb.txt") == "old"


def test_network(track):
    assert NET["public"] and NET["range"] and NET["domain"], "run with the SANDLOT_NET_* of the test internet"
    s = track(Sandbox.create(metadata={"run": RUN}, allow_internet_access=False,
                             network={"allow_out": [NET["domain"], NET["range"]]}))
    assert fetch_in(s, NET["domain"]) == NET["domain_body"]
    assert fetch_in(s, NET["range"]) == NET["range_body"]
    assert fetch_in(s, NET["public"]) == "REFUSED"
    with pytest.raises(Exception, match=r"10\.0\.0\.1 is inside 10\.0\.0\.0/8, which the platform denies"):
        s.update_network({"allow_out": [NET["domain"], "10.0.0.1"]})
    s.update_network({"allow_out": [NET["domain"]], "deny_out": ["0.0.0.0/0"]})
    assert fetch_in(s, NET["range"]) == "REFUSED"
    s.update_network({})
    assert fetch_in(s, NET["public"]) == NET["public_body"]


def test_teams(track):
    key_b = os.environ.get("SANDLOT_TEAM_B_KEY")
    assert key_b, "run with SANDLOT_TEAM_B_KEY (a key of team-b, whose quota is 2 sandboxes)"
    b = [track(Sandbox.create(api_key=key_b, metadata={"run": RUN, "role": "team-b"})) for _ in range(2)]
    with pytest.raises(RateLimitException, match=r"count/sandboxes\.sandlot\.dev=2"):
        Sandbox.create(api_key=key_b, metadata={"run": RUN, "role": "team-b"})
    listed = Sandbox.list(api_key=key_b, query=SandboxQuery(metadata={"run": RUN})).next_items()
    assert sorted(s.sandbox_id for s in listed) == sorted(s.sandbox_id for s in b)
    sbx = state["sbx"]
    for victim, key in [(sbx.sandbox_id, key_b), (b[0].sandbox_id, API_KEY)]:
        with pytest.raises(Exception, match="(?i)not found"):
            Sandbox.get_info(victim, api_key=key)
        assert Sandbox.kill(victim, api_key=key) is False, f"a stranger's key killed {victim}"
    assert sbx.is_running()
    for s in b:
        assert Sandbox.kill(s.sandbox_id, api_key=key_b) is True


def test_access_token_manages_keys():
    """The team's access token (sandlot-api issue-token in the chart's API
    pod) makes a key the SDK then uses, lists it masked and deletes it;
    the SDK's next call with it is refused. An API key may not."""
    token = os.environ.get("SANDLOT_ACCESS_TOKEN")
    assert token, "run with SANDLOT_ACCESS_TOKEN (make test-e2b issues one)"
    auth = {"Authorization": f"Bearer {token}"}
    status, made = api("POST", "/api-keys", {"name": f"py-{RUN}"}, key="", headers=auth)
    assert status == 201 and made["key"].startswith("e2b_"), made
    s = Sandbox.create(api_key=made["key"], metadata={"run": RUN, "role": "made-key"})
    assert s.commands.run("echo ok").stdout == "ok\n"
    assert s.kill() is True
    status, listed = api("GET", "/api-keys", key="", headers=auth)
    assert status == 200 and any(k["id"] == made["id"] and "key" not in k for k in listed), listed
    assert api("GET", "/api-keys")[0] == 401, "an API key listed the team's keys"
    assert api("DELETE", f"/api-keys/{made['id']}", key="", headers=auth)[0] == 204
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            Sandbox.list(api_key=made["key"]).next_items()
        except AuthenticationException:
            break
        time.sleep(0.5)
    else:
        pytest.fail("a deleted key still lists sandboxes")


def test_team_metrics():
    """The team's concurrent sandboxes and start rate over time (sampled
    every 10 s while this suite ran); another team's are refused."""
    status, teams = api("GET", "/teams")
    team = teams[0]["teamID"]
    since = int(time.time()) - 900
    status, series = api("GET", f"/teams/{team}/metrics?start={since}")
    assert status == 200 and any(m["concurrentSandboxes"] >= 1 for m in series), series
    assert all(m["sandboxStartRate"] >= 0 and m["timestampUnix"] >= since for m in series), series
    status, top = api("GET", f"/teams/{team}/metrics/max?metric=concurrent_sandboxes&start={since}")
    assert status == 200 and top["value"] >= 1, top
    other = "team-b" if team != "team-b" else "default"
    assert api("GET", f"/teams/{other}/metrics")[0] == 403


def test_killed_while_running(track):
    """A command's wait ends with the SDK's "killed or reached its timeout"
    when its sandbox is killed, not with a timeout of the request."""
    s = track(Sandbox.create(metadata={"run": RUN, "role": "killed"}))
    h = s.commands.run("sleep 600", background=True)
    ended = {}
    t = threading.Thread(target=lambda: ended.update(err=_raised(h.wait)))
    t.start()
    time.sleep(1)
    assert s.kill() is True
    t.join(60)
    assert not t.is_alive(), "the command's wait did not end"
    assert isinstance(ended["err"], SandboxUnreachableException), repr(ended["err"])
    assert "killed" in str(ended["err"]), str(ended["err"])


def _raised(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001 — the test looks at what it is
        return e
    return None


def test_kill():
    sbx = state["sbx"]
    assert sbx.kill() is True
    assert sbx.kill() is False
    assert api("GET", f"/sandboxes/{sbx.sandbox_id}")[0] == 404
