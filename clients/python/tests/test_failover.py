"""A leader killed under calls in flight, and a lock lost when the member
the client talks to is paused past the lease."""

import threading
import time
import unittest
from typing import Callable, List, Tuple

import raftlock
from tests.cluster import Cluster, wait_until


class _SentSignal(raftlock.Client):
    """A Client that says when a request has been written to a member, and
    when each was."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.sent = threading.Event()
        self.sends: List[float] = []

    def _send(self, conn, path, payload):  # type: ignore[no-untyped-def]
        super()._send(conn, path, payload)
        self.sends.append(time.monotonic())
        self.sent.set()


def _run(target, out: List[object]) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Run target in a thread; out gets its result or its exception."""

    def body() -> None:
        try:
            out.append(target())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t


class LeaderKillTest(unittest.TestCase):
    def setUp(self) -> None:
        self.cluster = Cluster(3)
        self.addCleanup(self.cluster.stop)
        self.leader = self.cluster.leader()
        self.admin = self.cluster.client()
        self.addCleanup(self.admin.close)

    def test_lock_changing_call_in_flight_is_never_retried(self) -> None:
        holder = self.admin.acquire("kill/job", lease=60)
        c = _SentSignal(self.cluster.urls(), timeout=10)
        self.addCleanup(c.close)
        c.get("kill/job")  # finds the leader
        c.sent.clear()
        out: List[object] = []
        start = time.monotonic()
        # A waiting acquire sits at the leader, queued behind the holder.
        t = _run(lambda: c.acquire("kill/job", lease=10, wait=8), out)
        self.assertTrue(c.sent.wait(5))
        self.cluster.kill(self.leader)
        t.join(15)
        self.assertEqual(len(out), 1)
        # Resent to the next leader it would have queued again until its
        # wait ran out (Held) or taken the lock: it ended at once instead.
        self.assertIsInstance(out[0], raftlock.OutcomeUnknown, out[0])
        self.assertLess(time.monotonic() - start, 6)
        # The lock is still the holder's, on the new leader.
        info = self.admin.get("kill/job")
        self.assertEqual((info.held, info.token), (True, holder.token))

    def test_read_in_flight_is_retried(self) -> None:
        holder = self.admin.acquire("kill/read", lease=60)
        c = _SentSignal(self.cluster.urls(), timeout=15)
        self.addCleanup(c.close)
        c.get("kill/read")
        self.assertEqual(c.leader, self.cluster.url(self.leader))
        # The leader stops answering, a read is sent to it, and then it dies.
        self.cluster.pause(self.leader)
        c.sent.clear()
        out: List[object] = []
        t = _run(lambda: c.get("kill/read"), out)
        self.assertTrue(c.sent.wait(5))
        self.cluster.kill(self.leader)
        t.join(20)
        self.assertEqual(len(out), 1)
        self.assertIsInstance(out[0], raftlock.LockInfo, out[0])
        info = out[0]
        assert isinstance(info, raftlock.LockInfo)
        self.assertEqual((info.held, info.token), (True, holder.token))
        # It found the new leader, and calls go on.
        self.assertNotEqual(c.leader, self.cluster.url(self.leader))
        g = c.acquire("kill/after", lease=5)
        c.release("kill/after", g.token)


    def test_no_leader_is_retried_after_retry_after(self) -> None:
        survivor = self.cluster.followers(self.leader)[0]
        for m in self.cluster.members:
            if m is not survivor:
                self.cluster.kill(m)

        # Until its election timeout the survivor still redirects to the
        # dead leader, and a redirect is followed and retried at once; on a
        # loaded machine that can be the first attempt. Once it knows no
        # leader, every answer is 503 with Retry-After.
        def leaderless() -> bool:
            try:
                with self.cluster.client([survivor], timeout=1.0) as a:
                    return not a.status(timeout=1.0).get("leader")
            except raftlock.RaftlockError:
                return False

        wait_until("the survivor to know no leader", leaderless)
        c = _SentSignal([self.cluster.url(survivor)], timeout=2.5)
        self.addCleanup(c.close)
        start = time.monotonic()
        with self.assertRaises(raftlock.Unavailable) as cm:
            c.get("kill/none")
        elapsed = time.monotonic() - start
        self.assertNotIsInstance(cm.exception, raftlock.OutcomeUnknown)
        self.assertIn("gave up after 2.5s", cm.exception.message)
        self.assertGreaterEqual(elapsed, 2.4)
        # The survivor answers 503 with Retry-After: 1, and the client
        # waits that long between attempts, not its 10-200 ms backoff.
        sends = c.sends
        self.assertTrue(2 <= len(sends) <= 4, sends)
        self.assertTrue(all(b - a >= 0.9 for a, b in zip(sends, sends[1:])), sends)


class LostTest(unittest.TestCase):
    """A lock whose renewals stop getting through is lost once its lease
    has run out on the client's clock."""

    LEASE = 0.9

    def setUp(self) -> None:
        self.cluster = Cluster(1)
        self.addCleanup(self.cluster.stop)
        self.member = self.cluster.leader()
        self.client = self.cluster.client(timeout=5)
        self.addCleanup(self.client.close)

    def hold_until_cut_off(self, cut_off: Callable[[], None]) -> Tuple[float, raftlock.Lock]:
        """Hold a lock, cut_off() its renewals once one went through, and
        return how long after that the lock was lost, and the lock."""
        c, lease = self.client, self.LEASE
        start = time.monotonic()
        with c.lock("lost/job", lease=lease) as lk:
            # A renewal goes through first: more of the lease is left than
            # the acquire alone would leave.
            wait_until("a renewal", lambda: c.get("lost/job").remaining > lease - (time.monotonic() - start) + 0.1, timeout=5)
            self.assertFalse(lk.lost.is_set())
            cut_at = time.monotonic()
            cut_off()
            self.assertTrue(lk.lost.wait(lease * 3), "lost not set while renewals were cut off")
            lost_after = time.monotonic() - cut_at
        self.assertIn("lease ran out", str(lk.lost_reason))
        return lost_after, lk

    def test_lock_lost_when_the_member_is_paused_past_the_lease(self) -> None:
        def pause() -> None:
            self.cluster.pause(self.member)
            self.addCleanup(self.cluster.resume, self.member)

        lost_after, _ = self.hold_until_cut_off(pause)
        # Within a lease of the pause: the lease counts from the start of
        # the last good renewal, which came before it.
        self.assertLessEqual(lost_after, self.LEASE + 0.5)

    def test_lock_lost_when_the_member_is_gone(self) -> None:
        # Renewals now fail at once (the connection is refused): the lock
        # is lost when the lease runs out, not at a later tick.
        lost_after, _ = self.hold_until_cut_off(lambda: self.cluster.kill(self.member))
        self.assertLessEqual(lost_after, self.LEASE + 0.2)


if __name__ == "__main__":
    unittest.main()


class WatchEndsTest(unittest.TestCase):
    def test_a_watch_on_a_killed_member_ends_unavailable(self) -> None:
        cluster = Cluster(3)
        self.addCleanup(cluster.stop)
        follower = cluster.followers(cluster.leader())[0]
        c = cluster.client()
        self.addCleanup(c.close)
        w = c.watch("gone/", endpoint=cluster.url(follower))
        self.addCleanup(w.close)
        out: List[object] = []
        reader = _run(lambda: list(w), out)
        c.acquire("gone/a", lease=30)
        cluster.kill(follower)
        reader.join(10)
        self.assertFalse(reader.is_alive(), "the watch did not end when its member was killed")
        self.assertIsInstance(w.error, raftlock.Unavailable)
        self.assertIsInstance(out[0], list)  # the iteration ended; it raised nothing
