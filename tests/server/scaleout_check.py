#!/usr/bin/env python3
"""Two anedvd replicas behind HAProxy on loopback (docs/scale-out.md).

  python3 tests/server/scaleout_check.py --binary target/debug/anedvd

Starts two `anedvd serve` replicas of the tiny qwen2 fixture and HAProxy
with the configuration docs/scale-out.md describes (readiness from /health,
requests routed by a consistent hash of the body's first bytes, so a
conversation's turns reach the replica holding its prefix cache), then:

1. every conversation's second turn reuses cached prompt tokens (it went to
   the replica that served its first turn), and both replicas served some;
2. with one replica killed, every request through the balancer still
   succeeds (health checks take it out; a refused connection is retried on
   the other).

Standard library only; needs `haproxy` on PATH (Debian's package).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

MODEL = "tests/fixtures/models/qwen2/model-f32.gguf"

HAPROXY_CFG = """global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 2
    option redispatch
frontend api
    bind 127.0.0.1:{lb}
    default_backend anedvd
backend anedvd
    # The request body is read before choosing, so its first bytes (model,
    # system prompt, first user message) pick the replica: a conversation's
    # turns share them and land where its prefix is cached.
    option http-buffer-request
    balance hash req.body,bytes(0,{prefix_bytes})
    hash-type consistent
    option httpchk GET /health
    http-check expect status 200
    default-server inter 300ms fall 2 rise 2
{servers}
"""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def post(url, body, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(url, proc, what, limit=60):
    start = time.time()
    while time.time() - start < limit:
        if proc.poll() is not None:
            sys.exit(f"scaleout: {what} exited with {proc.returncode}")
        try:
            if get(url, timeout=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"scaleout: {what} not ready after {limit} s")


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def chat(system, turns):
    messages = [{"role": "system", "content": system}]
    for i, t in enumerate(turns):
        messages.append({"role": "user", "content": t})
        if i + 1 < len(turns):
            messages.append({"role": "assistant", "content": "ok"})
    # `messages` first: the balancer hashes the body's first bytes.
    return {"messages": messages, "model": "m", "max_tokens": 2, "temperature": 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/debug/anedvd")
    ap.add_argument("--prefix-bytes", type=int, default=96)
    args = ap.parse_args()
    if shutil.which("haproxy") is None:
        sys.exit("scaleout: haproxy is not on PATH (apt-get install haproxy)")
    tmp = tempfile.mkdtemp(prefix="anedvd-scaleout-")
    procs = []
    try:
        ports = [free_port(), free_port()]
        replicas = []
        for i, port in enumerate(ports):
            log = open(os.path.join(tmp, f"replica{i}.log"), "w")
            p = subprocess.Popen([args.binary, "serve", "--model", MODEL, "--port", str(port),
                                  "--parallel", "2", "--max-seq", "256", "-t", "1"],
                                 stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            replicas.append(p)
        for i, port in enumerate(ports):
            wait_ready(f"http://127.0.0.1:{port}/health", replicas[i], f"replica {i}")
        lb = free_port()
        servers = "\n".join(f"    server r{i} 127.0.0.1:{port} check" for i, port in enumerate(ports))
        cfg = os.path.join(tmp, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(HAPROXY_CFG.format(lb=lb, prefix_bytes=args.prefix_bytes, servers=servers))
        check = subprocess.run(["haproxy", "-c", "-f", cfg], capture_output=True, text=True)
        if check.returncode != 0:
            sys.exit(f"scaleout: haproxy refused the configuration:\n{check.stdout}{check.stderr}")
        hap = subprocess.Popen(["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL,
                               stderr=open(os.path.join(tmp, "haproxy.log"), "w"))
        procs.append(hap)
        base = f"http://127.0.0.1:{lb}"
        wait_ready(f"{base}/health", hap, "haproxy")
        time.sleep(1.0)  # both servers through their first health checks

        # 1. Conversations stick to a replica: turn 2 reuses turn 1's cache.
        reused = 0
        conversations = 8
        for c in range(conversations):
            system = f"You are assistant number {c} of a test fleet; answer briefly."
            first = post(f"{base}/v1/chat/completions", chat(system, ["Hello there, who are you?"]))
            r = post(f"{base}/v1/chat/completions",
                     chat(system, ["Hello there, who are you?", "And what can you do?"]))
            # The first turn's whole prompt is a prefix of the second's: on
            # the replica that ran it, all of it is cached (another replica
            # shares at most the template's opening tokens).
            cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
            if cached >= first["usage"]["prompt_tokens"]:
                reused += 1
        served = [metric(get(f"http://127.0.0.1:{p}/metrics")[1], "anedvd_requests_total{endpoint=\"chat_completions\"}")
                  for p in ports]
        print(f"scaleout: {reused}/{conversations} second turns reused the prefix cache; "
              f"requests per replica {served}")
        if reused != conversations:
            sys.exit("scaleout: a conversation's second turn went to a replica without its cache")
        if min(served) == 0:
            sys.exit("scaleout: one replica served nothing (the hash did not spread conversations)")

        # 2. One replica down: every request still succeeds.
        replicas[0].send_signal(signal.SIGKILL)
        replicas[0].wait()
        ok = 0
        for c in range(10):
            r = post(f"{base}/v1/chat/completions", chat(f"Survivor test {c}.", ["Still there?"]))
            ok += r["object"] == "chat.completion"
        print(f"scaleout: with replica 0 killed, {ok}/10 requests succeeded")
        if ok != 10:
            sys.exit("scaleout: requests failed after a replica went down")
        print("scaleout: passed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
