"""E2B volumes, secrets and the header rules that use them, through the
Python SDK: what ../sdk.test.mjs's tests do, as a Python program writes it."""

import base64
import hashlib
import json
import os
import urllib.request
import uuid

from e2b import Sandbox, Secret, Volume

from conftest import NET, ONE_MODE, RUN, api, fetch_in


def test_volumes(track):
    vol = Volume.create(f"vol-py-{RUN}")
    assert vol.volume_id and vol.token
    assert any(v.volume_id == vol.volume_id for v in Volume.list())
    vol.write_file("/from-api.txt", "written without a sandbox")
    a = track(Sandbox.create(metadata={"run": RUN, "role": "vol-a"}, volume_mounts={"/mnt/shared": vol}))
    assert a.files.read("/mnt/shared/from-api.txt") == "written without a sandbox"
    a.files.write("/mnt/shared/a.txt", "from a")
    b = track(Sandbox.create(metadata={"run": RUN, "role": "vol-b"}, volume_mounts={"/data": vol.name}))
    assert b.files.read("/data/a.txt") == "from a"
    assert vol.read_file("/a.txt") == "from a"
    assert [e.name for e in vol.list("/") if e.name.endswith(".txt")] == ["a.txt", "from-api.txt"]
    # Paused and resumed, A mounts the volume again and sees B's writes.
    assert a.pause()
    b.files.write("/data/b.txt", "from b, while a was paused")
    a = Sandbox.connect(a.sandbox_id)
    assert a.files.read("/mnt/shared/b.txt") == "from b, while a was paused"
    # A snapshot records the mount, not the bytes; a fork shares the volume.
    snap = a.create_snapshot()
    b.files.write("/data/after-snapshot.txt", "later")
    clone = track(Sandbox.create(snap.snapshot_id, metadata={"run": RUN, "role": "vol-clone"}))
    assert clone.files.read("/mnt/shared/after-snapshot.txt") == "later"
    fork = track(Sandbox.fork(a.sandbox_id, count=1)[0])
    fork.files.write("/mnt/shared/fork.txt", "from the fork")
    assert b.files.read("/data/fork.txt") == "from the fork"
    # Another team: 404.
    status, body = api("GET", f"/volumes/{vol.volume_id}", key=os.environ["SANDLOT_TEAM_B_KEY"])
    assert status == 404, body
    # The volume outlives its sandboxes; destroyed, it is gone.
    for s in (a, b, clone, fork):
        s.kill()
    assert vol.read_file("/fork.txt") == "from the fork"
    assert Volume.destroy(vol.volume_id)
    assert not any(v.volume_id == vol.volume_id for v in Volume.list())


def test_secrets():
    """Secrets: stored, versioned, found by name, never read back; another team sees none."""
    name = f"key-py-{RUN}"
    made = Secret.create(name, "sk-never-shown", metadata={"owner": "ci"})
    assert made.secret_id.startswith("sec_") and made.version == 1 and made.metadata == {"owner": "ci"}
    assert Secret.update(made.secret_id, "sk-rotated").version == 2
    assert Secret.get_info(name).secret_id == made.secret_id
    status, body = api("GET", "/secrets")
    assert status == 200 and made.secret_id in str(body) and "sk-" not in str(body), body
    status, body = api("GET", f"/secrets/{made.secret_id}", key=os.environ["SANDLOT_TEAM_B_KEY"])
    assert status == 404, body
    assert Secret.destroy(made.secret_id)
    status, _ = api("GET", f"/secrets/{made.secret_id}")
    assert status == 404


def _secure_fetch(s, scheme):
    py = ("import urllib.error, urllib.request\n"
          "try:\n"
          f"    print(urllib.request.urlopen('{scheme}://{NET['secure']}/', timeout=10).read().decode())\n"
          "except urllib.error.HTTPError as e:\n"
          "    print('ERROR', e.code, e.read().decode())\n"
          "except Exception as e:\n"
          "    print('ERROR', e)\n")
    s.files.write("/tmp/fetch.py", py)
    return s.commands.run("python3 /tmp/fetch.py").stdout.strip()


def _digest(v):
    return "auth=" + hashlib.sha256(v.encode()).hexdigest()


@ONE_MODE
def test_network_rules_with_secrets(track):
    """A secret header reaches the server over HTTPS and HTTP, changes live, never enters the guest."""
    assert NET["secure"], "run with SANDLOT_NET_SECURE (the test internet's secure host)"
    value, other = f"sk-py-{uuid.uuid4()}", f"sk-py-other-{uuid.uuid4()}"
    n1, n2 = f"egress-{RUN}", f"egress2-{RUN}"
    made = [Secret.create(n1, value), Secret.create(n2, other)]

    def rule(headers):
        return {NET["secure"]: [{"transform": {"headers": headers}}]}

    s = track(Sandbox.create(metadata={"run": RUN},
                             network={"rules": rule({"Authorization": f"Bearer {Secret.fill(n1)}"})}))
    assert _secure_fetch(s, "https") == _digest(f"Bearer {value}")
    assert _secure_fetch(s, "http") == _digest(f"Bearer {value}")
    scan = os.path.join(os.path.dirname(__file__), "..", "testdata", "scan.py")
    with open(scan) as f:
        s.files.write("/tmp/scan.py", f.read())
    enc = base64.b64encode(value[::-1].encode()).decode()
    assert s.commands.run(f"python3 /tmp/scan.py {enc} 1800", user="root", timeout=300,
                          request_timeout=300).stdout.strip() == "CLEAN"
    s.update_network({"rules": rule({"Authorization": Secret.fill(n2)})})
    assert _secure_fetch(s, "https") == _digest(other)
    s.update_network({})
    assert _secure_fetch(s, "http") == "auth=none"
    for m in made:
        Secret.destroy(m.secret_id)


@ONE_MODE
def test_egress_proxy(track):
    """TCP leaves through a SOCKS5 proxy (an allowOut domain by name); a proxy that is down fails closed."""
    assert NET["socks"] and NET["no_socks"], "run with SANDLOT_NET_SOCKS* (the test internet's SOCKS5 host)"
    proxy = {"address": NET["socks"], "username": NET["socks_user"], "password": NET["socks_password"]}
    s = track(Sandbox.create(metadata={"run": RUN}, network={"allow_out": [NET["domain"]], "egress_proxy": proxy}))
    assert fetch_in(s, NET["domain"]) == NET["domain_body"]
    with urllib.request.urlopen(f"http://{NET['socks_log']}/", timeout=10) as r:
        asked = json.load(r)
    assert any(a["Domain"] and a["Host"] == NET["domain"] for a in asked), asked
    s.update_network({"egress_proxy": {"address": NET["no_socks"]}})
    assert fetch_in(s, NET["public"]) == "REFUSED"
    s.update_network({})
    assert fetch_in(s, NET["public"]) == NET["public_body"]
