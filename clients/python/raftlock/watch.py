"""Watching lock events: the API's ``GET /v1/watch`` stream (Server-Sent
Events), one :class:`Event` per change to a lock under a prefix."""

import base64
import binascii
import http.client
import json
import threading
from typing import Any, Callable, Iterator, NamedTuple, Optional, Tuple, Union

from .errors import RaftlockError, Unavailable, error_from_answer


class Event(NamedTuple):
    """One change to a lock, as every member applies it."""

    key: Union[str, bytes]  #: bytes for a key that is not UTF-8 (stored before the key rule)
    type: str  #: granted, renewed, released (a forced release too) or expired
    token: int
    owner: str
    lease: float  #: the lock's lease, in seconds
    index: int  #: the log index of the entry that made the change
    seq: int = 0  #: its place among that entry's events (from 0)

    @property
    def revision(self) -> str:
        """``"INDEX.SEQ"``: the event's revision, after which a watch may
        resume (``Client.watch(after=...)``)."""
        return "%d.%d" % (self.index, self.seq)


class Watch:
    """A running watch: iterate over it for its events, in log order.

    Each event comes once, in order. When the member stops, the connection
    breaks, the member cuts off a reader that fell behind, or it catches up
    by snapshot, the watch resumes by itself after the last event it gave
    (at any member, which replays what followed from its history). The
    iteration ends when the watch is closed (:meth:`close`, or the ``with``
    block's end), or when it cannot go on; then :attr:`error` says why
    (:class:`raftlock.Compacted` when no member still holds what followed
    the last event: list again), or is None after :meth:`close`.
    """

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse,
                 reopen: Optional[Callable[[str], Tuple[http.client.HTTPConnection, http.client.HTTPResponse]]] = None,
                 after: str = "") -> None:
        self._conn = conn
        self._resp = resp
        self._reopen = reopen
        self.last = after  #: the revision of the last event given ("" before any)
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
        while True:
            yield from self._stream()
            if self._closed.is_set() or self._reopen is None or not self.last:
                return
            if not isinstance(self.error, Unavailable) and getattr(self.error, "name", "") != "compacted":
                return
            try:
                conn, resp = self._reopen(self.last)
            except RaftlockError as e:
                self.error = e
                return
            with self._mu:
                if self._closed.is_set():
                    conn.close()
                    return
                self._conn.close()
                self._conn, self._resp, self.error = conn, resp, None

    def _stream(self) -> Iterator[Event]:
        kind, data, ident = "message", "", ""
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
            elif line.startswith("id:"):
                ident = line[len("id:"):].strip()
            elif line.startswith("data:"):
                data += line[len("data:"):].strip()
            elif line == "" and data:
                msg, failed = _decode(data), kind == "error"
                kind, data = "message", ""
                if failed or "type" not in msg:
                    self.error = error_from_answer(str(msg.get("error", "error")), str(msg.get("message", "")), 0)
                    return
                ev = Event(
                    key=_key_of(msg),
                    type=str(msg.get("type", "")),
                    token=int(msg.get("token", 0)),
                    owner=str(msg.get("owner", "")),
                    lease=int(msg.get("lease_ms", 0)) / 1000.0,
                    index=int(msg.get("index", 0)),
                    seq=int(msg.get("seq", 0)),
                )
                self.last = ident or ev.revision
                yield ev

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
