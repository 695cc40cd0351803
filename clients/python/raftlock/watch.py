"""Watching lock events: the API's ``GET /v1/watch`` stream (Server-Sent
Events), one :class:`Event` per change to a lock under a prefix."""

import base64
import binascii
import http.client
import json
import threading
from typing import Any, Iterator, NamedTuple, Optional, Union

from .errors import RaftlockError, Unavailable, error_from_answer


class Event(NamedTuple):
    """One change to a lock, as every member applies it."""

    key: Union[str, bytes]  #: bytes for a key that is not UTF-8 (stored before the key rule)
    type: str  #: granted, renewed, released (a forced release too) or expired
    token: int
    owner: str
    lease: float  #: the lock's lease, in seconds
    index: int  #: the log index of the entry that made the change


class Watch:
    """A running watch: iterate over it for its events, in log order.

    The iteration ends when the watch is closed (:meth:`close`, or the
    ``with`` block's end) or when the member ends the stream; then
    :attr:`error` says why it ended, or is None after :meth:`close`. A
    member cuts off a reader that falls 1,024 events behind
    (:class:`raftlock.Overloaded`) and ends its watches when it stops or
    catches up by snapshot (:class:`raftlock.Unavailable`): watch again to
    go on, comparing :attr:`Event.index` to see what may have been missed.
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self._resp = resp
        self._closed = threading.Event()
        # _mu guards _reading: whether an iteration reads the stream. The
        # connection is closed by the iteration, once it stops, while it
        # reads; closing it under the reader makes http.client fail in
        # ways of its own (AttributeError).
        self._mu = threading.Lock()
        self._reading = False
        self.error: Optional[RaftlockError] = None

    def __iter__(self) -> Iterator[Event]:
        with self._mu:
            if self._closed.is_set() or self._reading:
                return
            self._reading = True
        try:
            yield from self._events()
        finally:
            with self._mu:
                self._reading = False
                closed = self._closed.is_set()
            if closed:
                self._conn.close()

    def _events(self) -> Iterator[Event]:
        kind, data = "message", ""
        while not self._closed.is_set():
            try:
                raw = self._resp.readline()
            except (OSError, http.client.HTTPException, ValueError) as e:
                if not self._closed.is_set():
                    self.error = Unavailable("watch ended: connection lost: %s" % e, name="unavailable")
                return
            if not raw:
                if not self._closed.is_set():
                    self.error = Unavailable("watch ended: the member closed the stream", name="unavailable")
                return
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith(":"):
                continue  # a comment: the opening line, keep-alives
            if line.startswith("event:"):
                kind = line[len("event:"):].strip()
            elif line.startswith("data:"):
                data += line[len("data:"):].strip()
            elif line == "" and data:
                msg, failed = _decode(data), kind == "error"
                kind, data = "message", ""
                if failed or "type" not in msg:
                    self.error = error_from_answer(str(msg.get("error", "error")), str(msg.get("message", "")), 0)
                    return
                yield Event(
                    key=_key_of(msg),
                    type=str(msg.get("type", "")),
                    token=int(msg.get("token", 0)),
                    owner=str(msg.get("owner", "")),
                    lease=int(msg.get("lease_ms", 0)) / 1000.0,
                    index=int(msg.get("index", 0)),
                )

    def close(self) -> None:
        """Ends the watch; an iteration in progress stops (from any thread)."""
        with self._mu:
            self._closed.set()
            reading = self._reading
        sock = self._conn.sock  # once: an ending iteration may clear it meanwhile
        try:
            if sock is not None:
                sock.shutdown(2)  # the reader sees the stream end
        except OSError:
            pass
        if not reading:
            self._conn.close()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _key_of(msg: dict) -> Union[str, bytes]:
    """An event's key: bytes from key_b64 when it is not UTF-8 (key then
    shows U+FFFD for each bad byte)."""
    b64 = msg.get("key_b64")
    if isinstance(b64, str) and b64:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            pass
    return str(msg.get("key", ""))


def _decode(data: str) -> dict:
    """An event's JSON object; anything else is read as an error message."""
    try:
        msg = json.loads(data)
    except ValueError:
        return {"error": "error", "message": "the member sent an event that is not JSON: %r" % data[:80]}
    if not isinstance(msg, dict):
        return {"error": "error", "message": "the member sent an event that is not a JSON object"}
    return msg
