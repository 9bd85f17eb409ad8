"""What the measuring scripts share: the port of a server command line, waiting for its
/health, and one JSON request (scripts/serve-acceptance.py, scripts/spec-bench.py)."""
import http.client
import json
import time


def port_of(cmd):
    """The --port of a server command line (llama-server's and edgellm's default: 8080)."""
    for i, a in enumerate(cmd):
        if a == "--port":
            return int(cmd[i + 1])
    return 8080


def wait_health(port, proc, timeout=300):
    """Polls GET /health until it says ok; raises if the process exits or time runs out."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            body = r.read()
            if r.status == 200 and b"ok" in body:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the server did not become ready")


def post(port, path, body, timeout=600):
    """POST a JSON body; the JSON answer (raises on a status other than 200)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
    return json.loads(data)
