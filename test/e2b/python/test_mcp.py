"""Sandbox.create(mcp=...): the template's mcp-gateway, started by the SDK,
answering MCP's streamable HTTP transport at get_mcp_url() behind
get_mcp_token(), as a Python MCP client speaks it."""

import json
import os
import urllib.error
import urllib.request

import pytest
from e2b import Sandbox

from conftest import MODE, RUN

DOMAIN_MODE = pytest.mark.skipif(MODE != "domain", reason="get_mcp_url() is https://50005-<id>.<domain>/mcp: domain mode")


def _mcp(url, token, body, session=None):
    """POST one JSON-RPC message; the session ID the gateway gave and the
    reply (from a JSON body or from an event stream's data lines)."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=60) as res:
        sid, kind, text = res.headers.get("Mcp-Session-Id"), res.headers.get_content_type(), res.read().decode()
    if kind == "text/event-stream":
        msgs = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
        return sid, next((m for m in msgs if m.get("id") == body.get("id")), None)
    return sid, json.loads(text) if text else None


@DOMAIN_MODE
def test_mcp_gateway(track):
    """A GitHub server (cloned from the test internet's git host) runs
    with its envs; its tools answer through the proxy; no token is 401; a
    server of Docker's catalog is refused before a sandbox exists."""
    repo, env = os.environ.get("SANDLOT_NET_GIT_REPO"), json.loads(os.environ.get("SANDLOT_NET_GIT_ENV", "{}"))
    assert repo, "run with SANDLOT_NET_GIT_REPO (the test internet's git host)"
    s = track(Sandbox.create(metadata={"run": RUN, "role": "mcp"}, envs=env,
                             mcp={f"github/{repo}": {"runCmd": "python3 server.py", "envs": {"ACME_KEY": "py-1"}}}))
    url, token = s.get_mcp_url(), s.get_mcp_token()
    init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "sandlot-py", "version": "1"}}
    sid, reply = _mcp(url, token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
    assert reply["result"]["serverInfo"]["name"] == "sandlot-mcp-gateway", reply
    _mcp(url, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
    _, reply = _mcp(url, token, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                 "params": {"name": "env", "arguments": {"name": "ACME_KEY"}}}, sid)
    assert reply["result"]["content"][0]["text"] == "py-1", reply
    with pytest.raises(urllib.error.HTTPError) as refused:
        _mcp(url, "not-the-token", {"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert refused.value.code == 401
    with pytest.raises(Exception, match="Docker's MCP catalog"):
        Sandbox.create(metadata={"run": RUN}, mcp={"duckduckgo": {}})
