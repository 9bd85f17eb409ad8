#!/usr/bin/env python3
"""An MCP server over stdio (one JSON-RPC message per line) for tests/server/test_mcp.cpp.

Each tools/call runs in its own thread, so calls overlap and answer out of order.
Flags: --noisy (a notification, a line that is not JSON, a ping to the client and a reply
to an unknown id around each answer; the last notification and the answer in one write),
--grandchild / --grandchild-setsid (a sleeper that inherits stdin/stdout/stderr; setsid:
outside our process group), --no-tools, --no-init (never answers initialize), --stderr
(a line on stderr at start), --paged (tools/list two tools per page), --read-only=NAMES
(those tools, or all, listed with annotations.readOnlyHint true).
"""
import json, os, subprocess, sys, threading, time

flags = set(sys.argv[1:])
out_lock = threading.Lock()
state = {"pinged": False, "grandchild": None}


def send(*msgs):  # one write() for all of them
    data = "".join(m if isinstance(m, str) else json.dumps(m) + "\n" for m in msgs)
    with out_lock:
        os.write(1, data.encode())


def text(s, is_error=False):
    r = {"content": [{"type": "text", "text": s}]}
    return {**r, "isError": True} if is_error else r


def obj(**props):
    return {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}}


TOOLS = [
    ("echo", "Echo back the message", obj(message="string")),
    ("add", "Add two numbers", obj(a="number", b="number")),
    ("sleep", "Sleep, then answer", obj(seconds="number")),
    ("pid", "The server's pid", obj()),
    ("fail", "An isError result", obj()),
    ("rpc_error", "A JSON-RPC error", obj()),
    ("crash", "Answer, then exit", obj()),
    ("die", "Exit without answering", obj()),
    ("big", "n bytes of text", obj(n="integer")),
    ("env", "A variable and the cwd", obj(name="string")),
    ("pinged", "Whether the client answered our ping", obj()),
    ("grandchild", "The grandchild's pid", obj()),
]


def call(req_id, name, args):
    if name == "echo":
        result = text("echo: " + str(args.get("message", "")))
    elif name == "add":
        result = text(str(args.get("a", 0) + args.get("b", 0)))
    elif name == "sleep":
        time.sleep(float(args.get("seconds", 1)))
        result = text("slept %s" % args.get("seconds", 1))
    elif name == "pid":
        result = text(str(os.getpid()))
    elif name == "fail":
        result = text("it failed", is_error=True)
    elif name == "rpc_error":
        return send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32000, "message": "transient error"}})
    elif name == "crash":
        send({"jsonrpc": "2.0", "id": req_id, "result": text("crashing...")})
        os._exit(1)
    elif name == "die":
        sys.stderr.write("dying on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "big":
        result = text("x" * int(args.get("n", 0)))
    elif name == "env":
        result = text(os.environ.get(args.get("name", ""), "") + "|" + os.getcwd())
    elif name == "pinged":
        result = text("yes" if state["pinged"] else "no")
    elif name == "grandchild":
        result = text(str(state["grandchild"]))
    else:
        return send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32602, "message": "Unknown tool: " + name}})
    answer = {"jsonrpc": "2.0", "id": req_id, "result": result}
    if "--noisy" in flags:
        note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
        send(note)
        send("THIS IS NOT JSON\n")
        send({"jsonrpc": "2.0", "id": "srv-ping", "method": "ping"})
        send({"jsonrpc": "2.0", "id": 99999, "result": text("stale")})
        send(note, answer)
    else:
        send(answer)


def listed(name, description, schema):
    tool = {"name": name, "description": description, "inputSchema": schema}
    for f in flags:
        if f.startswith("--read-only=") and {"all", name} & set(f.split("=", 1)[1].split(",")):
            tool["annotations"] = {"readOnlyHint": True}
    return tool

def main():
    if "--stderr" in flags:
        sys.stderr.write("fixture starting\n")
        sys.stderr.flush()
    if "--grandchild" in flags or "--grandchild-setsid" in flags:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                                 start_new_session="--grandchild-setsid" in flags)
        state["grandchild"] = child.pid
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, req_id, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if method is None:  # a response to our ping
            state["pinged"] = state["pinged"] or (req_id == "srv-ping" and "result" in msg)
        elif req_id is None:
            pass  # a notification
        elif method == "initialize":
            if "--no-init" not in flags:
                send({"jsonrpc": "2.0", "id": req_id, "result": {
                    "protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                    "serverInfo": {"name": "fixture", "version": "1"}}})
        elif method == "tools/list":
            tools = [] if "--no-tools" in flags else [listed(n, d, s) for n, d, s in TOOLS]
            result = {"tools": tools}
            if "--paged" in flags:
                start = int(params.get("cursor", "0"))
                result = {"tools": tools[start:start + 2]}
                if start + 2 < len(tools):
                    result["nextCursor"] = str(start + 2)
            send({"jsonrpc": "2.0", "id": req_id, "result": result})
        elif method == "tools/call":
            threading.Thread(target=call, daemon=True,
                             args=(req_id, params.get("name"), params.get("arguments") or {})).start()
        else:
            send({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
