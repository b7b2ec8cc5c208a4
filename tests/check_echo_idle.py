#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Drives an echo server with idle timeouts (examples/asio_echo_idle.cpp,
examples/uv_echo_idle.cpp): usage
check_echo_idle.py SERVER [IDLE_MS]. Starts SERVER --port 0 --idle-ms IDLE_MS, then over
127.0.0.1: an idle connection is echoed once and then closed by the server, not before
IDLE_MS after its last input (within 10 s); a busy connection, sending every 50 ms for
2 * IDLE_MS, is echoed and never closed; SIGTERM stops the server with exit status 0.
Exits 0 iff all of that holds. The bounds are generous: a loaded machine slows the
server but cannot make it close early."""
import signal
import socket
import subprocess
import sys
import threading
import time


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RuntimeError(f"connection closed after {len(data)} of {n} echoed bytes")
        data += chunk
    return data


def main():
    server_path = sys.argv[1]
    idle_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    server = subprocess.Popen([server_path, "--port", "0", "--idle-ms", str(idle_ms)],
                              stdout=subprocess.PIPE, text=True)
    failures = []
    try:
        line = server.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"unexpected first line: {line!r}")
        port = int(line.split()[-1])

        idle = socket.create_connection(("127.0.0.1", port), timeout=10)
        idle.sendall(b"hello")
        last_input = time.monotonic()
        if recv_exact(idle, 5) != b"hello":
            failures.append("the idle connection's input was not echoed")
        closed = {}

        def wait_close():
            try:
                closed["eof"] = idle.recv(1) == b""
            except OSError as e:
                closed["error"] = repr(e)
            closed["after"] = time.monotonic() - last_input

        waiter = threading.Thread(target=wait_close)
        waiter.start()

        busy = socket.create_connection(("127.0.0.1", port), timeout=10)
        end = time.monotonic() + 2 * idle_ms / 1000
        i = 0
        while time.monotonic() < end:
            msg = f"ping {i}\n".encode()
            busy.sendall(msg)
            if recv_exact(busy, len(msg)) != msg:
                failures.append(f"busy connection: message {i} echoed wrong")
                break
            i += 1
            time.sleep(0.05)

        waiter.join(10)
        if waiter.is_alive() or "after" not in closed:
            failures.append("the idle connection was not closed within 10 s")
        elif not closed.get("eof") and "error" not in closed:
            failures.append("the idle connection got data instead of a close")
        elif closed["after"] < idle_ms / 1000:
            failures.append(f"the idle connection was closed early: {closed['after']:.3f} s < {idle_ms} ms")
        busy.sendall(b"still here")
        if recv_exact(busy, 10) != b"still here":
            failures.append("the busy connection stopped echoing")
        print(f"idle connection closed after {closed.get('after', -1):.3f} s; busy connection: {i} echoes")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            rc = server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            rc = "killed: SIGTERM did not stop it within 10 s"
    if rc != 0:
        failures.append(f"server exit status {rc}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
