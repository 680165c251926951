"""Raw HTTP/1.1 over a socket, for requests that `requests` would refuse or repair.

`requests` (and http.client) validate header names and values, encode them, merge duplicates
and set Content-Length themselves; a hostile client does none of that. `send()` writes exactly
the bytes it is given and reads the answer until the server closes the connection.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

Header = tuple[bytes, bytes]


@dataclass
class Answer:
    """A parsed HTTP response (status 0 when the server closed the connection without answering)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def build(method: bytes, path: bytes, headers: list[Header], body: bytes | None, *, chunked: bool = False,
          content_length: bool = True) -> bytes:
    """The request bytes: request line, headers exactly as given, then the body (chunked if asked)."""
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    if body is not None and chunked:
        lines.append(b"Transfer-Encoding: chunked")
        payload = b"".join(b"%x\r\n%s\r\n" % (len(part), part)
                           for part in (body[i:i + 4096] for i in range(0, len(body), 4096)) if part) + b"0\r\n\r\n"
    elif body is not None:
        if content_length:
            lines.append(b"Content-Length: %d" % len(body))
        payload = body
    else:
        payload = b""
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload


def send(port: int, raw: bytes, *, timeout: float = 30.0) -> Answer:
    """Write `raw` to 127.0.0.1:port, read until close, parse the status line, headers and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer (413) and close before reading an oversize body
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    data = b"".join(chunks)
    if not data:
        return Answer(0)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.decode("latin-1").strip().lower()] = value.decode("latin-1").strip()
    return Answer(status, headers, body)


def worker_pids(master_pid: int) -> set[int]:
    """The gunicorn master's child processes (its web workers), read from /proc."""
    pids = set()
    for task in Path(f"/proc/{master_pid}/task").iterdir():
        children = (task / "children").read_text().split()
        pids.update(int(pid) for pid in children)
    return pids


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def listening_sockets(pids: set[int]) -> set[str]:
    """What the processes `pids` listen on: "tcp:PORT" and "unix:PATH" (from /proc, Linux only)."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue  # closed meanwhile
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(f"tcp:{int(fields[1].rsplit(':', 1)[1], 16)}")
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[3], 16) & 0x10000 and fields[6] in inodes:  # __SO_ACCEPTCON: a listening socket
            found.add(f"unix:{fields[7] if len(fields) > 7 else '(unnamed)'}")
    return found
