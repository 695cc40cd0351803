"""The raftlock client: calls to a cluster's HTTP/JSON API.

A :class:`Client` sends each call to the leader, following a follower's
307 redirect itself (with the same method and body) and remembering where
the leader is. It retries only what is safe to retry, by the same rules as
the Go client:

* an attempt that never reached a member (the connection was refused or
  could not be made) goes to the next member;
* a ``503`` answer with raftlock's error body (``unavailable``,
  ``overloaded``) proposed nothing: it is tried again after the answer's
  ``Retry-After``, the next member for ``unavailable`` and the same one for
  ``overloaded``;
* a redirect is an answer, not a failure: followed at once (three times,
  then with a backoff);
* a read (get, list, status) whose connection broke after it was sent, or
  that got an answer other than raftlock's (a proxy's ``502``, ``503`` or
  ``504`` without raftlock's JSON error body), is tried again;
* a lock-changing call (acquire, release, renew) whose connection broke
  after it was sent, whose timeout ran out while it was in flight, or that
  got an answer other than raftlock's, is NEVER tried again: it raises
  :class:`~raftlock.errors.OutcomeUnknown`, as does the member's own
  ``500 outcome-unknown``.

Between attempts the client waits a jittered backoff (10 ms doubling to
200 ms, each wait drawn between half and all of it), or the
``Retry-After`` when that is longer, until the call's timeout.

Leases and waits are seconds (floats) here and whole milliseconds on the
wire. Watching locks change is not available in this client yet.
"""

import base64
import binascii
import http.client
import json
import os
import random
import select
import socket
import ssl
import threading
import time
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, Union
from urllib.parse import urlencode, urlsplit

from .errors import (
    Compacted,
    InvalidArgument,
    OutcomeUnknown,
    Overloaded,
    RaftlockError,
    Unavailable,
    error_from_answer,
)
from .watch import Watch

MAX_KEY_LEN = 256
"""The longest key, in bytes (UTF-8)."""

Key = Union[str, bytes]
"""A lock's key: text (the key rule: 1..256 bytes of UTF-8 without NUL),
or bytes for a key an older version stored that is not UTF-8, as
:meth:`Client.list` and watches give such a key and get, renew and release
take it."""
MAX_OWNER_LEN = 128
"""The longest owner, in bytes (UTF-8)."""
MIN_LEASE = 0.010
"""The shortest lease, in seconds."""
MAX_LEASE = 3600.0
"""The longest lease, in seconds."""
MAX_LIST_LIMIT = 1000
"""The most locks one page of :meth:`Client.list` may ask for."""

DEFAULT_TIMEOUT = 10.0
"""A call's default timeout, in seconds (the CLI's ``--timeout``)."""
DEFAULT_CONNECT_TIMEOUT = 1.0
"""How long one connection attempt may take, in seconds."""

# How long a connection may sit idle in the pool and still be used: well
# under the member's idle timeout (two minutes), so a member never closes
# a connection just as a call is written on it.
_MAX_IDLE = 30.0


class Grant(NamedTuple):
    """A held lock: an acquire's or a renewal's answer."""

    key: str
    token: int
    """The fencing token: pass it with every write to the resource the
    lock guards, which must refuse any token lower than the highest it saw."""
    lease: float
    """The lease, in seconds, from when the call was made."""


class LockInfo(NamedTuple):
    """A :meth:`Client.get` answer."""

    key: Key
    held: bool
    token: int
    """The holder's token (0 when not held)."""
    remaining: float
    """Seconds left of the holder's lease (0 when not held)."""
    owner: Optional[str]
    """What the holder's acquire recorded (None when not held)."""


class HeldLock(NamedTuple):
    """One lock of a :meth:`Client.list` page."""

    key: Key
    """bytes for a key that is not UTF-8 (stored before the key rule)."""
    token: int
    owner: str
    remaining: float
    """Seconds left of the lease."""


class LockPage(NamedTuple):
    """A page of held locks, in key order."""

    locks: List[HeldLock]
    more: bool
    """Locks follow the last one: list again with ``after=page.next``."""
    next: Optional[Key]
    """The ``after`` of the next page, when ``more``."""


class _Endpoint(NamedTuple):
    """Where a member's API is: a scheme, a host and a port."""

    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = "[" + self.host + "]" if ":" in self.host else self.host
        return "%s://%s:%d" % (self.scheme, host, self.port)


def _parse_endpoint(text: str, default_scheme: str) -> _Endpoint:
    """An endpoint as given: ``http://host:port``, ``https://host:port`` or
    a bare ``host:port`` (taking default_scheme)."""
    text = text.strip()
    if "://" not in text:
        text = default_scheme + "://" + text
    u = urlsplit(text)
    if u.scheme not in ("http", "https"):
        raise InvalidArgument("endpoint %r: the scheme must be http or https" % text, name="invalid-argument")
    try:
        port = u.port
    except ValueError as e:
        raise InvalidArgument("endpoint %r: %s" % (text, e), name="invalid-argument") from None
    if not u.hostname or port is None:
        raise InvalidArgument("endpoint %r: want host:port" % text, name="invalid-argument")
    if u.path not in ("", "/"):
        raise InvalidArgument("endpoint %r: want no path" % text, name="invalid-argument")
    return _Endpoint(u.scheme, u.hostname, port)


def default_owner() -> str:
    """This process as HOST:PID, the owner the CLI records by default
    (its last 128 bytes)."""
    owner = "%s:%d" % (socket.gethostname() or "unknown-host", os.getpid())
    return owner.encode("utf-8")[-MAX_OWNER_LEN:].decode("utf-8", "ignore")


def _ms(seconds: float) -> int:
    """seconds as whole milliseconds, as they go on the wire."""
    return int(round(seconds * 1000))


def _raw(s: str) -> bytes:
    """The bytes s stands for: its UTF-8, a lone surrogate that stands for
    a byte Python could not decode (sys.argv, os.fsdecode) being that
    byte."""
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def _check_key(key: str) -> None:
    """Checks a new key (an acquire's) against the key rule, with the
    messages of the Go client and the member: 1..256 bytes of UTF-8 text
    without NUL. A str holding a lone surrogate is not UTF-8."""
    if not isinstance(key, str):
        raise InvalidArgument("key must be a str, got %s" % type(key).__name__, name="invalid-argument")
    raw = _check_stored_key(key)
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("key must be valid UTF-8 without NUL", name="invalid-argument") from None
    if b"\0" in raw:
        raise InvalidArgument("key must be valid UTF-8 without NUL", name="invalid-argument")


def _check_stored_key(key: Key) -> bytes:
    """The bytes of a key that names a lock the cluster may hold, one stored
    before the key rule included: only its length is checked."""
    if isinstance(key, str):
        raw = _raw(key)
    elif isinstance(key, (bytes, bytearray)):
        raw = bytes(key)
    else:
        raise InvalidArgument("key must be a str or bytes, got %s" % type(key).__name__, name="invalid-argument")
    n = len(raw)
    if n == 0 or n > MAX_KEY_LEN:
        raise InvalidArgument("key must be 1..%d bytes, got %d" % (MAX_KEY_LEN, n), name="invalid-argument")
    return raw


def _with_key(body: Dict[str, Any], field: str, key: Key) -> Dict[str, Any]:
    """body naming key in field, or in field_b64 when it is not UTF-8 (a
    key stored before the key rule), which no JSON string carries."""
    raw = _check_stored_key(key) if field == "key" else _as_bytes(key)
    try:
        body[field] = raw.decode("utf-8")
    except UnicodeDecodeError:
        body[field + "_b64"] = base64.b64encode(raw).decode("ascii")
    return body


def _as_bytes(key: Key) -> bytes:
    return _raw(key) if isinstance(key, str) else bytes(key)


def _key_of(obj: Dict[str, Any], field: str = "key") -> Key:
    """The key an answer names in field: bytes from field_b64 when the key
    is not UTF-8 (the text in field then shows U+FFFD for each bad byte)."""
    b64 = obj.get(field + "_b64")
    if isinstance(b64, str) and b64:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            pass
    return str(obj.get(field, ""))


def _check_lease(lease: float) -> int:
    ms = _ms(lease)
    if ms < _ms(MIN_LEASE) or ms > _ms(MAX_LEASE):
        raise InvalidArgument("lease must be 10ms..1h, got %gs" % lease, name="invalid-argument")
    return ms


def _check_owner(owner: str) -> None:
    n = len(_raw(owner))
    if n > MAX_OWNER_LEN:
        raise InvalidArgument("owner must be at most %d bytes, got %d" % (MAX_OWNER_LEN, n), name="invalid-argument")
    try:
        owner.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument("owner must be valid UTF-8", name="invalid-argument") from None


def _jitter(d: float) -> float:
    """A retry delay between d/2 and d, so clients that lost the leader at
    the same moment do not all come back at once."""
    return d / 2 + random.uniform(0, d / 2)


def _retry_after(resp: http.client.HTTPResponse) -> float:
    """The answer's Retry-After in seconds (0 when absent or not a number)."""
    v = resp.getheader("Retry-After")
    try:
        return max(float(v), 0.0) if v is not None else 0.0
    except ValueError:
        return 0.0


class _NotSent(Exception):
    """An attempt failed before its request reached a member."""

    def __init__(self, err: BaseException, refused: bool) -> None:
        super().__init__(str(err))
        self.err = err
        self.refused = refused


class _Answer(NamedTuple):
    status: int
    retry_after: float
    location: Optional[str]
    body: Any  # the decoded JSON, or None when the body was not JSON


class Client:
    """A client of one raftlock cluster, through its members' HTTP/JSON API.

    Args:
        endpoints: the API addresses of the members (``raftlock node
            --api``): ``http://host:port``, ``https://host:port`` or a bare
            ``host:port`` (https when ``cert`` or ``ca`` is given, else http).
        cert: a client certificate (PEM) for a cluster that requires TLS;
            its common name is this client's identity under the ACL.
        key: the certificate's private key (PEM; default: in ``cert``).
        ca: the cluster's CA (PEM), to check the members' certificates
            (default: the system's CAs).
        timeout: how long a call may take, in seconds, retries included
            (an acquire that waits gets its wait on top).
        owner: recorded with every lock this client acquires when the call
            names none (at most 128 bytes; None records none).
        connect_timeout: how long one connection attempt may take.

    A Client is safe to use from several threads. Close it (or use it as a
    context manager) to close its connections.

    :meth:`watch` follows the lock events under a prefix.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        cert: Optional[str] = None,
        key: Optional[str] = None,
        ca: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
        owner: Optional[str] = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        scheme = "https" if (cert or ca) else "http"
        eps = [_parse_endpoint(e, scheme) for e in endpoints if e.strip()]
        if not eps:
            raise InvalidArgument("no endpoints", name="invalid-argument")
        if owner is not None:
            _check_owner(owner)
        self._endpoints: List[_Endpoint] = eps
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._owner = owner
        self._ssl: Optional[ssl.SSLContext] = None
        if cert or ca or any(e.scheme == "https" for e in eps):
            ctx = ssl.create_default_context(cafile=ca)
            if cert:
                ctx.load_cert_chain(cert, key)
            ctx.set_alpn_protocols(["http/1.1"])
            self._ssl = ctx
        self._mu = threading.Lock()
        self._leader: Optional[_Endpoint] = None
        self._next = 0
        self._idle: Dict[_Endpoint, List[Tuple[http.client.HTTPConnection, float]]] = {}
        self._closed = False

    # --- the calls ---

    def acquire(
        self,
        key: str,
        lease: float,
        wait: float = 0,
        owner: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Grant:
        """Take ``key`` for ``lease`` seconds and return its :class:`Grant`.

        ``wait`` 0 is a try-acquire, which raises :class:`Held` at once when
        the key is held; otherwise the call queues (first come, first
        served) for up to ``wait`` seconds, then raises :class:`Held`.
        ``owner`` is recorded with the lock (default: the client's).
        ``timeout`` (default: the client's) comes on top of ``wait``.

        Raises OutcomeUnknown when the call may have taken the lock: read
        it with :meth:`get` before trying again.
        """
        _check_key(key)
        lease_ms = _check_lease(lease)
        if owner is None:
            owner = self._owner
        body: Dict[str, Any] = {"key": key, "lease_ms": lease_ms, "wait_ms": max(_ms(wait), 0)}
        if owner:
            _check_owner(owner)
            body["owner"] = owner
        t = (self._timeout if timeout is None else timeout) + max(wait, 0)
        a = self._call("/v1/acquire", body, idempotent=False, timeout=t)
        return Grant(a["key"], int(a["token"]), a["lease_ms"] / 1000.0)

    def release(self, key: Key, token: int, timeout: Optional[float] = None) -> None:
        """Give ``key`` up; ``token`` must be the holder's, or :class:`NotHolder`.
        ``key`` may be bytes: a key stored before the key rule (:data:`Key`)."""
        body = _with_key({"token": token}, "key", key)
        self._call("/v1/release", body, idempotent=False, timeout=timeout)

    def renew(self, key: Key, token: int, lease: float, timeout: Optional[float] = None) -> Grant:
        """Start the holder's lease again at ``lease`` seconds from now.

        Raises :class:`NotHolder` when ``token`` no longer holds ``key``.
        """
        body = _with_key({"token": token}, "key", key)
        body["lease_ms"] = _check_lease(lease)
        a = self._call("/v1/renew", body, idempotent=False, timeout=timeout)
        return Grant(a["key"], int(a["token"]), a["lease_ms"] / 1000.0)

    def get(self, key: Key, timeout: Optional[float] = None) -> LockInfo:
        """Read ``key`` linearizably (the leader confirms it still leads).
        ``key`` may be bytes: a key stored before the key rule (:data:`Key`)."""
        a = self._call("/v1/get", _with_key({}, "key", key), idempotent=True, timeout=timeout)
        return LockInfo(_key_of(a), bool(a["held"]), int(a["token"]), a["remaining_ms"] / 1000.0, a.get("owner"))

    def list(
        self,
        prefix: str = "",
        limit: Optional[int] = None,
        after: Optional[Key] = None,
        timeout: Optional[float] = None,
    ) -> LockPage:
        """Read one page of the held locks whose keys start with ``prefix``,
        in key order, after the key ``after``, at most ``limit`` of them
        (1..1000; default 100). A page may hold fewer when keys are long;
        when ``page.more``, list again with ``after=page.next``
        (:meth:`list_all` does)."""
        for name, v in (("prefix", prefix), ("after", after or "")):
            if len(_as_bytes(v)) > MAX_KEY_LEN:
                raise InvalidArgument("%s must be at most %d bytes" % (name, MAX_KEY_LEN), name="invalid-argument")
        if limit is not None and not 0 <= limit <= MAX_LIST_LIMIT:
            raise InvalidArgument("limit must be 1..%d, got %d" % (MAX_LIST_LIMIT, limit), name="invalid-argument")
        body: Dict[str, Any] = {"prefix": prefix}
        if limit:
            body["limit"] = limit
        if after:
            _with_key(body, "after", after)
        a = self._call("/v1/list", body, idempotent=True, timeout=timeout)
        locks = [HeldLock(_key_of(l), int(l["token"]), l.get("owner", ""), l["remaining_ms"] / 1000.0) for l in a["locks"]]
        return LockPage(locks, bool(a["more"]), _key_of(a, "next") if "next" in a or "next_b64" in a else None)

    def list_all(self, prefix: str = "", page_size: Optional[int] = None, timeout: Optional[float] = None) -> Iterator[HeldLock]:
        """Every held lock whose key starts with ``prefix``, in key order,
        read a page at a time (each page a linearizable read of its own)."""
        after: Optional[Key] = None
        while True:
            page = self.list(prefix=prefix, limit=page_size, after=after, timeout=timeout)
            for lock in page.locks:
                yield lock
            if not page.more or not page.locks:
                return
            after = page.next or page.locks[-1].key

    def status(self, endpoint: Optional[str] = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        """The status of one member, as ``GET /status`` of its HTTP port
        shows it: ``endpoint`` (one of the API addresses, in the forms the
        constructor takes), or else the first member that answers. Status
        is never redirected: every member answers for itself."""
        t = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        if endpoint is not None:
            targets = [_parse_endpoint(endpoint, self._endpoints[0].scheme)]
        else:
            targets = list(self._endpoints)
        last: Optional[BaseException] = None
        for ep in targets:
            try:
                ans = self._attempt(ep, "/v1/status", b"{}", deadline)
            except _NotSent as e:
                last = e.err
                continue
            except (OSError, http.client.HTTPException) as e:
                last = e
                continue
            if ans.status == 200 and isinstance(ans.body, dict):
                return ans.body
            raise self._answer_error(ans)
        raise Unavailable("no member answered status: %s" % last, name="unavailable")

    def lock(
        self,
        key: str,
        lease: float,
        wait: float = 0,
        owner: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> "Lock":
        """A lock to hold in a ``with`` block: acquired on entry, renewed in
        a background thread every third of ``lease``, released on exit::

            with client.lock("job", lease=10, wait=30) as lk:
                write(data, fence=lk.token)
                if lk.lost.is_set():
                    ...  # stop: the lock can no longer be trusted

        See :class:`raftlock.Lock`.
        """
        from .lock import Lock  # the lock module imports this one

        return Lock(self, key, lease, wait=wait, owner=owner, timeout=timeout)

    def watch(self, prefix: str = "", endpoint: Optional[str] = None, timeout: Optional[float] = None,
              after: str = "") -> Watch:
        """Starts a watch of the lock events under ``prefix`` (every key
        when empty): from now on, or, with ``after`` (an
        :attr:`Event.revision`), every event after that one first. Iterate
        over the :class:`Watch` it returns, and close it when done; it
        resumes by itself at another member when its member goes.

        Any member serves a watch, leader or not; ``endpoint`` picks one,
        else the first member that answers. ``timeout`` bounds each start
        only. Raises :class:`raftlock.PermissionDenied` without the read
        right on the prefix, :class:`raftlock.Compacted` when no member
        still holds the events after ``after``, :class:`raftlock.Unavailable`
        when no member answers.
        """
        conn, resp = self._open_watch(prefix, endpoint, timeout, after)

        def reopen(last: str) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
            return self._open_watch(prefix, None, timeout, last, retry=True)

        return Watch(conn, resp, reopen, after)

    def _open_watch(self, prefix: str, endpoint: Optional[str], timeout: Optional[float], after: str,
                    retry: bool = False) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Opens the event stream at the first member that serves it; with
        retry, tries the members again until the timeout (a resume)."""
        if len(prefix.encode("utf-8")) > 256:
            raise InvalidArgument("prefix: at most 256 bytes", name="invalid-argument")
        t = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + t
        eps = [_parse_endpoint(endpoint, self._endpoints[0].scheme)] if endpoint else list(self._endpoints)
        if retry:
            eps = eps * max(1, int(t / 0.2))  # a resume goes round the members until the timeout
        last: Optional[BaseException] = None
        compacted: Optional[RaftlockError] = None
        query = {"prefix": prefix}
        if after:
            query["after"] = after
        for ep in eps:
            if time.monotonic() >= deadline:
                break
            try:
                conn = self._conn(ep, deadline)
            except _NotSent as e:
                last = e.err
                continue
            try:
                conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                conn.request("GET", "/v1/watch?" + urlencode(query), headers={"Accept": "text/event-stream"})
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                last = e
                continue
            if resp.status != 200:
                data = resp.read()
                conn.close()
                try:
                    body = json.loads(data.decode("utf-8")) if data else None
                except ValueError:
                    body = None
                err = self._answer_error(_Answer(resp.status, _retry_after(resp), resp.getheader("Location"), body))
                if isinstance(err, Compacted):
                    compacted = err  # another member may hold more of the history
                    continue
                if retry and isinstance(err, Unavailable):
                    last = err
                    time.sleep(0.2)
                    continue
                raise err
            conn.sock.settimeout(None)  # a watch waits as long as nothing changes
            return conn, resp
        if compacted is not None:
            raise compacted
        raise Unavailable("no member started the watch: %s" % (last,), name="unavailable")

    def close(self) -> None:
        """Close every idle connection; later calls open new ones."""
        with self._mu:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def leader(self) -> Optional[str]:
        """The URL of the member this client believes leads, if any."""
        with self._mu:
            return self._leader.url if self._leader else None

    # --- the retry loop (the Go client's call) ---

    def _call(self, path: str, body: Dict[str, Any], idempotent: bool, timeout: Optional[float]) -> Dict[str, Any]:
        """Send body to path at the leader, following redirects and retrying
        what is safe until the timeout; the success answer's JSON. A
        lock-changing call (not idempotent) whose request may have reached
        a member is never sent again."""
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        payload = json.dumps(body).encode("utf-8")
        backoff = 0.010
        last: Optional[RaftlockError] = None
        refused: Set[_Endpoint] = set()
        target = self._target(None)
        attempt = -1
        while True:
            attempt += 1
            if time.monotonic() >= deadline:
                raise self._gave_up(last, timeout)
            delay = 0.0
            try:
                ans = self._attempt(target, path, payload, deadline)
            except _NotSent as e:
                if e.refused and target in self._endpoints:
                    refused.add(target)
                    if len(refused) == len(self._endpoints):
                        raise Unavailable(
                            "no member reachable at %s: every member refused the connection"
                            % ",".join(ep.url for ep in self._endpoints),
                            name="unavailable",
                        ) from None
                last = Unavailable("%s: %s" % (target.url, e.err), name="unavailable")
                self._forget_leader(target)
                target = self._target(target)
            except (OSError, http.client.HTTPException) as e:
                # The request may have reached the member.
                self._forget_leader(target)
                why = _lost_why(e)
                if not idempotent:
                    raise OutcomeUnknown("%s: %s" % (target.url, why), name="outcome-unknown") from None
                last = Unavailable("%s: %s" % (target.url, why), name="unavailable")
                target = self._target(target)
            else:
                if ans.status == 200 and isinstance(ans.body, dict):
                    self._set_leader(target)  # only the leader answers lock calls
                    return ans.body
                if ans.status == 307 and ans.location:
                    leader = self._location(ans.location, target)
                    self._set_leader(leader)
                    target = leader
                    if attempt < 3:
                        continue  # a redirect is an answer, not a failure: no backoff
                    last = Unavailable("redirected to %s" % leader.url, name="unavailable")
                elif not _from_raftlock(ans):
                    # Not raftlock's answer: a proxy's 502, 503 or 504 when
                    # the member behind it died, say. The request reached
                    # something, and nothing says what became of it.
                    self._forget_leader(target)
                    why = "%s%s answered HTTP %d without raftlock's answer" % (target.url, path, ans.status)
                    if not idempotent:
                        raise OutcomeUnknown(why, name="outcome-unknown", status=ans.status)
                    last = Unavailable(why, name="unavailable", status=ans.status)
                    target = self._target(target)
                    delay = ans.retry_after
                else:
                    err = self._answer_error(ans)
                    if isinstance(err, Overloaded):
                        last = err  # busy, not gone: back off and ask it again
                    elif isinstance(err, Unavailable):
                        last = err
                        self._forget_leader(target)
                        target = self._target(target)
                    else:
                        raise err
                    delay = ans.retry_after
            self._sleep(max(_jitter(backoff), delay), deadline)
            backoff = min(backoff * 2, 0.200)

    def _attempt(self, ep: _Endpoint, path: str, payload: bytes, deadline: float) -> _Answer:
        """One request to ep. Raises _NotSent when it failed before the
        request could reach the member, and OSError or HTTPException when
        it failed after."""
        conn = self._conn(ep, deadline)
        try:
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            self._send(conn, path, payload)
            ans, reusable = self._receive(conn)
        except ssl.SSLError as e:
            conn.close()
            if "ALERT" in (e.reason or ""):
                # The member refused the TLS handshake (TLS 1.3 reports it
                # at the first read): it read no request.
                raise _NotSent(e, refused=False) from None
            raise
        except BaseException:
            conn.close()
            raise
        if reusable:
            self._put(ep, conn)
        else:
            conn.close()
        return ans

    def _send(self, conn: http.client.HTTPConnection, path: str, payload: bytes) -> None:
        """Write one call's request."""
        # This client follows a follower's 307 itself (one hop fewer than
        # the follower relaying the call), and says so.
        conn.request("POST", path, body=payload, headers={"Content-Type": "application/json", "Accept": "application/json",
                                                          "raftlock-redirect": "follow"})

    def _receive(self, conn: http.client.HTTPConnection) -> Tuple[_Answer, bool]:
        """Read the answer to the request just sent, and whether the
        connection may carry another."""
        resp = conn.getresponse()
        data = resp.read()
        try:
            body = json.loads(data.decode("utf-8")) if data else None
        except ValueError:
            body = None
        ans = _Answer(resp.status, _retry_after(resp), resp.getheader("Location"), body)
        return ans, not resp.will_close

    def _answer_error(self, ans: _Answer) -> RaftlockError:
        """The exception for a failed answer."""
        if isinstance(ans.body, dict) and isinstance(ans.body.get("error"), str):
            return error_from_answer(ans.body["error"], str(ans.body.get("message", "")), ans.status)
        return RaftlockError("unexpected answer: HTTP %d" % ans.status, status=ans.status)

    def _gave_up(self, last: Optional[RaftlockError], timeout: Optional[float]) -> RaftlockError:
        """The exception of a call whose timeout ran out between attempts."""
        t = self._timeout if timeout is None else timeout
        why = "gave up after %gs" % t
        if isinstance(last, Overloaded):
            return Overloaded("%s: %s" % (why, last.message), name="overloaded", status=last.status)
        if last is not None:
            return Unavailable("%s: %s" % (why, last.message), name="unavailable", status=last.status)
        return Unavailable(why, name="unavailable")

    @staticmethod
    def _sleep(d: float, deadline: float) -> None:
        time.sleep(max(min(d, deadline - time.monotonic()), 0))

    def _location(self, location: str, redirected_from: _Endpoint) -> _Endpoint:
        """The leader's endpoint named by a redirect's Location."""
        u = urlsplit(location)
        if not u.hostname or u.port is None:
            raise RaftlockError("%s redirected to %r, which names no host:port" % (redirected_from.url, location))
        return _Endpoint(u.scheme or redirected_from.scheme, u.hostname, u.port)

    # --- where to send, and connections ---

    def _target(self, failed: Optional[_Endpoint]) -> _Endpoint:
        """The known leader, else the next endpoint after the one that just failed."""
        with self._mu:
            if self._leader is not None and self._leader != failed:
                return self._leader
            ep = self._endpoints[self._next % len(self._endpoints)]
            self._next += 1
            if ep == failed and len(self._endpoints) > 1:
                ep = self._endpoints[self._next % len(self._endpoints)]
                self._next += 1
            return ep

    def _set_leader(self, ep: _Endpoint) -> None:
        with self._mu:
            self._leader = ep

    def _forget_leader(self, ep: _Endpoint) -> None:
        with self._mu:
            if self._leader == ep:
                self._leader = None

    def _conn(self, ep: _Endpoint, deadline: float) -> http.client.HTTPConnection:
        """An open connection to ep: an idle one still good, or a new one.
        Raises _NotSent when none can be made."""
        while True:
            with self._mu:
                idle = self._idle.get(ep)
                item = idle.pop() if idle else None
            if item is None:
                break
            conn, since = item
            if time.monotonic() - since < _MAX_IDLE and not _dropped(conn):
                return conn
            conn.close()
        t = max(min(self._connect_timeout, deadline - time.monotonic()), 0.001)
        conn: http.client.HTTPConnection
        if ep.scheme == "https":
            conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=t, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=t)
        try:
            conn.connect()
        except ConnectionRefusedError as e:
            conn.close()
            raise _NotSent(e, refused=True) from None
        except (OSError, ssl.SSLError) as e:
            conn.close()
            raise _NotSent(e, refused=False) from None
        return conn

    def _put(self, ep: _Endpoint, conn: http.client.HTTPConnection) -> None:
        with self._mu:
            self._idle.setdefault(ep, []).append((conn, time.monotonic()))


def _from_raftlock(ans: _Answer) -> bool:
    """Whether a failed answer is raftlock's own: a JSON object naming its
    error. Only such an answer says what the member did with the request."""
    return isinstance(ans.body, dict) and isinstance(ans.body.get("error"), str)


def _lost_why(e: BaseException) -> str:
    """What happened to a request that may have reached a member."""
    if isinstance(e, socket.timeout):
        return "no answer before the call's timeout"
    return "connection lost after the request was sent: %s" % (str(e) or type(e).__name__)


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the member (or has stray
    bytes): readable while no answer is due."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        r, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(r)
