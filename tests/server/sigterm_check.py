#!/usr/bin/env python3
"""Graceful shutdown of `anedvd serve` over a real socket (run by run.sh last,
against a server started with --shutdown-grace 1):

1. a streaming request is opened and one chunk read, then the client stops
   reading with its connection open;
2. SIGTERM: the server stops accepting and gives in-flight requests the grace
   period, then cancels them. The stream must end properly: with a finish
   reason, or (when the generation was still running) with an error event
   naming the shutdown; either way followed by `data: [DONE]`. With the tiny
   fixture model (256 positions) the generation usually completes into the
   socket buffers before the signal; the cancellation event itself is
   covered by the in-process test in crates/server/tests/concurrency.rs;
3. the process must exit (status checked by run.sh) within 10 s.

  python tests/server/sigterm_check.py --base-url URL --api-key K --pid PID
"""
import argparse
import http.client
import json
import os
import signal
import sys
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--pid", type=int, required=True)
    args = ap.parse_args()
    url = urllib.parse.urlparse(args.base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "stream": True})
    conn.request(
        "POST",
        "/v1/completions",
        body,
        {"content-type": "application/json", "authorization": f"Bearer {args.api_key}"},
    )
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    first = resp.readline()
    assert first.startswith(b"data: "), first
    # Stop reading: the server's event buffer fills and the sequence waits.
    time.sleep(0.5)
    os.kill(args.pid, signal.SIGTERM)
    signalled = time.monotonic()
    rest = resp.read().decode()
    data = [l[len("data: "):] for l in rest.splitlines() if l.startswith("data: ")]
    assert data and data[-1] == "[DONE]", data[-3:]
    last = json.loads(data[-2])
    if "error" in last:
        assert "shutting down" in last["error"]["message"], last
        ending = "cancelled with an error event"
    else:
        assert last["choices"][0]["finish_reason"] in ("stop", "length"), last
        ending = f"finished ({last['choices'][0]['finish_reason']}) before the signal"
    while time.monotonic() - signalled < 10:
        try:
            os.kill(args.pid, 0)
        except ProcessLookupError:
            break
        # A zombie (exited, not yet reaped by run.sh) also counts as gone, and
        # so does a process reaped between the kill above and this read (the
        # read then fails with ESRCH or ENOENT).
        try:
            with open(f"/proc/{args.pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.1)
    else:
        sys.exit("server still running 10 s after SIGTERM")
    print(f"sigterm: stream {ending}; server gone {time.monotonic() - signalled:.1f} s after SIGTERM")


if __name__ == "__main__":
    main()
