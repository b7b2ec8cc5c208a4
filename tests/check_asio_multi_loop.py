#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Load client and judge of examples/asio_multi_loop.cpp: usage
check_asio_multi_loop.py SERVER [IDLE_MS] [LOOPS] [PER_LOOP]. Starts
SERVER --port 0 --idle-ms IDLE_MS --loops LOOPS, then over 127.0.0.1:
- opens LOOPS * PER_LOOP idle connections one after the other (each echoed once before
  the next), so that the server's round-robin gives every loop PER_LOOP of them;
- opens LOOPS busy connections that send every 50 ms for 2 * IDLE_MS, all at once.
Passes iff every idle connection is echoed and then closed by the server, never before
IDLE_MS after its last input (within 10 s); every busy one is echoed throughout and never
closed; the server's "closed an idle connection on loop K" lines count exactly PER_LOOP for
every loop; SIGTERM stops it with exit status 0 and its "stopped:" line reports every
connection accepted, every idle close, and no close off its loop's thread."""
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from check_echo_idle import recv_exact  # tests/, beside this script


def main():
    server_path = sys.argv[1]
    idle_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    loops = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    per_loop = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    server = subprocess.Popen([server_path, "--port", "0", "--idle-ms", str(idle_ms), "--loops", str(loops)],
                              stdout=subprocess.PIPE, text=True)
    failures = []
    lines = []
    try:
        line = server.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"unexpected first line: {line!r}")
        port = int(line.split()[-1])
        reader = threading.Thread(target=lambda: lines.extend(server.stdout), daemon=True)
        reader.start()

        idle = []
        for i in range(loops * per_loop):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            msg = f"idle {i}\n".encode()
            s.sendall(msg)
            last_input = time.monotonic()
            if recv_exact(s, len(msg)) != msg:
                failures.append(f"idle connection {i}: its input was not echoed")
            idle.append((s, last_input))

        closes = [None] * len(idle)

        def wait_close(i):
            s, last_input = idle[i]
            try:
                eof = s.recv(1) == b""
            except OSError:
                eof = True  # reset: closed too
            closes[i] = (eof, time.monotonic() - last_input)

        waiters = [threading.Thread(target=wait_close, args=(i,)) for i in range(len(idle))]
        for w in waiters:
            w.start()

        busy_echoes = [0] * loops

        def keep_busy(k):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                end = time.monotonic() + 2 * idle_ms / 1000
                while time.monotonic() < end:
                    msg = f"busy {k} {busy_echoes[k]}\n".encode()
                    s.sendall(msg)
                    if recv_exact(s, len(msg)) != msg:
                        failures.append(f"busy connection {k}: echoed wrong")
                        return
                    busy_echoes[k] += 1
                    time.sleep(0.05)
                s.sendall(b"still here")
                if recv_exact(s, 10) != b"still here":
                    failures.append(f"busy connection {k} stopped echoing")
                s.close()
            except (OSError, RuntimeError) as e:
                failures.append(f"busy connection {k}: {e!r} after {busy_echoes[k]} echoes")

        busy = [threading.Thread(target=keep_busy, args=(k,)) for k in range(loops)]
        for b in busy:
            b.start()
        for b in busy:
            b.join(30)
        for w in waiters:
            w.join(10)
        for i, c in enumerate(closes):
            if c is None:
                failures.append(f"idle connection {i} was not closed within 10 s")
            elif not c[0]:
                failures.append(f"idle connection {i} got data instead of a close")
            elif c[1] < idle_ms / 1000:
                failures.append(f"idle connection {i} was closed early: {c[1]:.3f} s < {idle_ms} ms")
        for s, _ in idle:
            s.close()
        late = max((c[1] for c in closes if c), default=0)
        print(f"{len(idle)} idle connections closed, the latest {late:.3f} s after its input; "
              f"busy connections: {busy_echoes} echoes")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            rc = "killed: SIGTERM did not stop it within 10 s"
    if rc != 0:
        failures.append(f"server exit status {rc}")
    time.sleep(0.1)  # the reader thread takes the last lines
    per = [0] * loops
    for line in lines:
        m = re.fullmatch(r"closed an idle connection on loop (\d+)\n", line)
        if m:
            per[int(m.group(1))] += 1
    if per != [per_loop] * loops:
        failures.append(f"idle closes per loop {per}, not {per_loop} on each of the {loops} loops")
    stopped = [line for line in lines if line.startswith("stopped:")]
    want = (f"stopped: {loops} loops, accepted {loops * per_loop + loops}, idle closes {loops * per_loop}, "
            f"closes off their loop's thread 0\n")
    if stopped != [want]:
        failures.append(f"server summary {stopped!r}, not {want!r}")
    else:
        print(stopped[0], end="")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
