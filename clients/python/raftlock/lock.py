"""A lock held for a ``with`` block, renewed in the background."""

import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Optional, Type

from .errors import NotHolder, RaftlockError

if TYPE_CHECKING:
    from .client import Client

_log = logging.getLogger("raftlock")


class Lock:
    """One lock: acquired on entering a ``with`` block, renewed by a
    background thread every third of its lease, released on exit.

    Made by :meth:`raftlock.Client.lock`::

        with client.lock("job", lease=10, wait=30) as lk:
            write(data, fence=lk.token)

    Attributes:
        key: the locked key.
        token: the fencing token (set once acquired): pass it with every
            write to the resource the lock guards.
        lost: a :class:`threading.Event` set when the lock can no longer be
            trusted: a renewal was answered ``not-found`` (the lock was
            released, expired or forced away), or renewals kept failing
            until the lease ran out on this process's own clock. The lease
            is counted from the start of the last successful call, never
            from its answer, so this side always gives up before the
            cluster would.
        lost_reason: why ``lost`` was set (None while it is not).

    Leaving the block stops the renewals and releases the lock, unless it
    was lost (then nothing is released and nothing is raised: check
    ``lost``). When the block raised, a release that fails is logged (to
    the ``raftlock`` logger) and the block's exception goes on; otherwise
    the release's exception is raised. A lock is entered once.
    """

    def __init__(
        self,
        client: "Client",
        key: str,
        lease: float,
        wait: float = 0,
        owner: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.key = key
        self.lease = lease
        self.token = 0
        self.lost = threading.Event()
        self.lost_reason: Optional[BaseException] = None
        self._client = client
        self._wait = wait
        self._owner = owner
        self._timeout = timeout
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._released = False

    def __enter__(self) -> "Lock":
        if self._thread is not None:
            raise RuntimeError("raftlock: a Lock is entered once")
        start = time.monotonic()
        grant = self._client.acquire(self.key, self.lease, wait=self._wait, owner=self._owner, timeout=self._timeout)
        self.token = grant.token
        self._thread = threading.Thread(
            target=self._renew_loop, args=(start,), name="raftlock-renew-%s" % self.key, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except RaftlockError as e:
            if exc_type is None:
                raise
            _log.warning("raftlock: releasing %r (token %d) after the block failed: %s", self.key, self.token, e)

    def release(self) -> None:
        """Stop renewing and release the lock (nothing when it was lost or
        already released)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self.lost.is_set() or self._released or self.token == 0:
            return
        self._released = True
        self._client.release(self.key, self.token, timeout=self._timeout)

    def _mark_lost(self, reason: BaseException) -> None:
        self.lost_reason = reason
        self.lost.set()

    def _renew_loop(self, valid_from: float) -> None:
        """Renew every lease/3 until stopped or lost. The lease is counted
        from the start of the last successful renewal (or acquire), and the
        lock is lost the moment it runs out, not at the next tick."""
        every = max(self.lease / 3, 0.005)
        tick = valid_from + every
        while True:
            deadline = valid_from + self.lease
            if self._stop.wait(max(min(tick, deadline) - time.monotonic(), 0)):
                return
            now = time.monotonic()
            if now >= deadline:
                self._mark_lost(RaftlockError("lease ran out before a renewal succeeded"))
                return
            if now < tick:
                continue  # woken early
            while tick <= now:  # ticks missed while a renewal ran are dropped
                tick += every
            try:
                self._client.renew(self.key, self.token, self.lease, timeout=deadline - now)
            except NotHolder as e:
                self._mark_lost(e)
                return
            except Exception as e:  # noqa: BLE001 - any failure: try again at the next tick
                if time.monotonic() >= deadline:
                    self._mark_lost(RaftlockError("lease ran out before a renewal succeeded: %s" % e))
                    return
                continue
            valid_from = now
