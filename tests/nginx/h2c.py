"""A minimal HTTP/2 client over cleartext with prior knowledge (h2c), standard library only:
enough to open streams, read each response's status and hold the bodies back with a zero
flow-control window (SETTINGS_INITIAL_WINDOW_SIZE = 0), as a client that never reads would.

The responses' header blocks are not decoded in full: nginx writes `:status` first (after an
optional dynamic table size update), as an indexed static entry or as a literal with the
static name and a raw 3-digit value; that is all `status` reads."""

import socket
import struct
import time

from run import Failure, check

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, CONTINUATION = 0, 1, 3, 4, 6, 7, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
CANCEL = 0x8
# HPACK's static table: the :status entries
STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + \
        struct.pack(">I", stream) + payload


def literal(name, value):
    """A header field as a literal without indexing, new name, no Huffman coding."""
    name, value = name.encode(), value.encode()
    check(len(name) < 127 and len(value) < 127, "h2c: header too long for this client")
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


def status_of(block):
    i = 0
    while i < len(block) and block[i] & 0xE0 == 0x20:  # dynamic table size update
        check(block[i] & 0x1F != 0x1F, "h2c: multi-byte table size update")
        i += 1
    check(i < len(block), "h2c: empty header block")
    b = block[i]
    if b & 0x80:
        check((b & 0x7F) in STATIC_STATUS, f"h2c: first field is not :status: {block[:16]!r}")
        return STATIC_STATUS[b & 0x7F]
    index = b & 0x3F if b & 0x40 else b & 0x0F
    check(index == 8, f"h2c: first field is not :status: {block[:16]!r}")
    n = block[i + 1]
    check(not n & 0x80, "h2c: Huffman-coded :status")
    return int(block[i + 2:i + 2 + n])


class H2c:
    """One connection; `window` is the client's initial stream window (0: no body flows)."""

    def __init__(self, port, window=0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        self.next_id = 1
        self.statuses = {}
        settings = struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, window)
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(SETTINGS, 0, 0, settings))

    def get(self, path):
        """Opens a stream with GET `path`: its id."""
        sid = self.next_id
        self.next_id += 2
        block = b"".join(literal(k, v) for k, v in ((":method", "GET"), (":scheme", "http"),
                                                     (":path", path),
                                                     (":authority", "localhost")))
        self.sock.sendall(frame(HEADERS, END_STREAM | END_HEADERS, sid, block))
        return sid

    def cancel(self, sid):
        self.sock.sendall(frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)))

    def read_frame(self, deadline):
        while True:
            if len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + n:
                    kind, flags = self.buf[3], self.buf[4]
                    sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
                    payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
                    return kind, flags, sid, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure("h2c: no frame in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise Failure("h2c: no frame in time") from None
            check(chunk, "h2c: the server closed the connection")
            self.buf += chunk

    def status(self, sid, timeout=5):
        """The status of stream `sid`'s response, waiting up to `timeout` s for its header."""
        deadline = time.monotonic() + timeout
        while sid not in self.statuses:
            kind, flags, stream, payload = self.read_frame(deadline)
            if kind == SETTINGS and not flags & ACK:
                self.sock.sendall(frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                self.sock.sendall(frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                raise Failure(f"h2c: GOAWAY {payload[4:8].hex()} {payload[8:]!r}")
            elif kind == RST_STREAM and stream == sid:
                raise Failure(f"h2c: stream {sid} reset ({payload.hex()})")
            elif kind == HEADERS and stream not in self.statuses:
                check(flags & END_HEADERS, "h2c: CONTINUATION frames are not supported")
                if flags & PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                if flags & PRIORITY:
                    payload = payload[5:]
                self.statuses[stream] = status_of(payload)
        return self.statuses[sid]

    def close(self):
        self.sock.close()
