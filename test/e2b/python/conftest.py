"""The real, unmodified E2B Python SDKs against sandlot-api on a real cluster.

Run by test/e2b/e2b_test.go (make test-e2b) once per proxy mode, as the JS
suite (../sdk.test.mjs) is:
  SANDLOT_MODE=sandbox-url  E2B_SANDBOX_URL points every sandbox call at the
                            API server (E2b-Sandbox-Id/-Port headers)
  SANDLOT_MODE=domain       E2B_DOMAIN: the SDK calls https://<port>-<id>.<domain>,
                            which the resolver the harness gives this process
                            answers with the API server's address
"""

import json
import os
import time
import urllib.error
import urllib.request

import pytest

API_URL = os.environ.get("E2B_API_URL", "")
API_KEY = os.environ.get("E2B_API_KEY", "")
MODE = os.environ.get("SANDLOT_MODE", "")
RUN = f"{MODE}-py-{int(time.time() * 1000)}"  # this run's metadata tag


def pytest_configure(config):
    if not (API_URL and API_KEY and MODE):
        raise pytest.UsageError("run with E2B_API_URL, E2B_API_KEY and SANDLOT_MODE (make test-e2b does)")


class Tracker:
    """Every sandbox a test made, killed at the end (each with its own key)."""

    def __init__(self):
        self.made = []

    def __call__(self, sbx):
        self.made.append(sbx)
        return sbx


@pytest.fixture(scope="session")
def track():
    t = Tracker()
    yield t
    for s in t.made:
        try:
            s.kill()
        except Exception:  # noqa: BLE001 — killed already, or another team's
            pass


@pytest.fixture(autouse=True)
def _kill_test_sandboxes(track):
    """A test's own sandboxes go when it ends: VMs of finished tests filled
    the nodes' CPU, and a later resume or clone (which restores on its
    snapshot's node) waited for room past the SDK's timeout."""
    n = len(track.made)
    yield
    for s in track.made[n:]:
        try:
            s.kill()
        except Exception:  # noqa: BLE001 — killed already, or another team's
            pass
    del track.made[n:]


def api(method, path, body=None, key=API_KEY, headers=None):
    """The REST API directly (what the SDK has no method for): status, JSON."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(API_URL + path, data=data, method=method,
                                 headers={"X-API-KEY": key, "Content-Type": "application/json", **(headers or {})})
    status, text = send(req)
    return status, json.loads(text) if text else None


def send(req, timeout=60):
    """A request's status and body, an HTTP error's too."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def plausible(m):
    """A metrics sample possible for one running guest."""
    assert m.cpu_count >= 1 and 0 <= m.cpu_used_pct <= 100 * m.cpu_count, m
    assert m.mem_total > 0 and 0 < m.mem_used <= m.mem_total, m
    assert m.disk_total > 0 and 0 <= m.disk_used <= m.disk_total, m


NET = {k: os.environ.get("SANDLOT_NET_" + k.upper(), "") for k in
       ("public", "public_body", "range", "range_body", "domain", "domain_body", "secure",
        "socks", "socks_log", "socks_user", "socks_password", "no_socks")}

FETCH = """import urllib.request
try:
    print(urllib.request.urlopen("http://%s/", timeout=3).read().decode())
except OSError:
    print("REFUSED")
"""


def fetch_in(s, host):
    """http://host/ fetched inside sandbox s: the body, or REFUSED."""
    return s.commands.run(f"python3 -c '{FETCH % host}'").stdout.strip()


# ONE_MODE runs a test in domain mode only: what it tries does not depend
# on how the SDK reaches the proxy, and the JS suite runs its own in
# sandbox-URL mode (CI's time is close to its budget).
ONE_MODE = pytest.mark.skipif(MODE != "domain", reason="run in domain mode (the JS suite runs it in sandbox-URL mode)")
