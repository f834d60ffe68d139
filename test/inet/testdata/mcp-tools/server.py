#!/usr/bin/env python3
"""A stdio MCP server (newline-delimited JSON-RPC, no dependencies): the
repository the test internet's git host serves as github.com/acme/mcp-tools,
which a sandbox's mcp-gateway clones, installs and runs."""
import json
import os
import sys

TOOLS = [
    {"name": "reverse", "description": "the text, reversed",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "env", "description": "a variable of the server's environment",
     "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    {"name": "installed", "description": "what installCmd wrote in the clone",
     "inputSchema": {"type": "object", "properties": {}}},
]


def call(name, args):
    if name == "reverse":
        return args["text"][::-1]
    if name == "env":
        return os.environ.get(args["name"], "")
    if name == "installed":
        with open("installed.txt") as f:
            return f.read().strip()
    raise KeyError(name)


def answer(msg):
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": "acme-mcp-tools", "version": "1.0.0"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        text = call(params["name"], params.get("arguments") or {})
        return {"content": [{"type": "text", "text": text}]}
    raise NotImplementedError(method)


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue  # a notification (notifications/initialized)
    try:
        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg)}
    except NotImplementedError as e:
        reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no method %s" % e}}
    except Exception as e:  # a tool's failure is the call's result
        reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {"isError": True, "content": [{"type": "text", "text": repr(e)}]}}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
