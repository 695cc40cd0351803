"""Real ``raftlock node`` processes for the tests, on free loopback ports
in a temporary directory.

The binary is ``$RAFTLOCK_BIN`` when set, else ``bin/raftlock`` built once
per test run from the repository's root (``go build``).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from typing import Callable, Dict, List, Optional, Sequence

import raftlock

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

_build_lock = threading.Lock()
_built: List[str] = []


def raftlock_bin() -> str:
    """The raftlock binary: $RAFTLOCK_BIN, or bin/raftlock built once."""
    env = os.environ.get("RAFTLOCK_BIN")
    if env:
        return os.path.abspath(env)
    with _build_lock:
        if not _built:
            out = os.path.join(REPO, "bin", "raftlock")
            subprocess.run(["go", "build", "-o", out, "./cmd/raftlock"], cwd=REPO, check=True)
            _built.append(out)
        return _built[0]


def free_port() -> int:
    """A loopback port free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, cond: Callable[[], bool], timeout: float = 20.0, every: float = 0.02) -> None:
    """Poll cond until it holds; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(every)


class Member:
    """One member process and its addresses."""

    def __init__(self, id: int) -> None:
        self.id = id
        self.peer = "127.0.0.1:%d" % free_port()
        self.client = "127.0.0.1:%d" % free_port()
        self.http = "127.0.0.1:%d" % free_port()
        self.api = "127.0.0.1:%d" % free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.stopped = False


class Cluster:
    """size members of one cluster, started at once; stop() kills them all.

    extra are flags given to every member (TLS, an ACL); scheme is the
    API's (https with TLS); client_args are the Client arguments that
    reach it (cert, key, ca) for the cluster's own polling.
    """

    def __init__(self, size: int, extra: Sequence[str] = (), scheme: str = "http", **client_args: str) -> None:
        self.bin = raftlock_bin()
        self.tmp = tempfile.TemporaryDirectory(prefix="raftlock-py-")
        self.dir = self.tmp.name
        self.extra = list(extra)
        self.scheme = scheme
        self.client_args: Dict[str, str] = client_args
        # A port is free only while it is picked: before a member binds it,
        # another process may take it (on a busy machine, as the local end
        # of some connection), and the member then exits at once. A cluster
        # short of a member fails later and far from the cause (a killed
        # leader leaves no quorum: "no leader known"), so every member must
        # serve before the cluster is handed out, and one that found its
        # port taken starts the cluster again on new ports.
        for attempt in range(1, 5):
            self.members = [Member(i) for i in range(1, size + 1)]
            for m in self.members:
                self.start(m)
            try:
                gone = self._wait_serving()
            except BaseException:
                self.stop()
                raise
            if not gone:
                return
            taken = all("address already in use" in self._log(m) for m in gone)
            for m in self.members:
                self.kill(m)
            if not taken or attempt == 4:
                logs = self.logs()
                self.stop()
                raise RuntimeError("members %s exited at start:\n%s" % ([m.id for m in gone], logs))
            for m in self.members:
                shutil.rmtree(self.data_dir(m), ignore_errors=True)
                os.remove(os.path.join(self.dir, "node-%d.log" % m.id))

    def _wait_serving(self) -> List[Member]:
        """Wait until every member answers or exited; those that exited."""
        gone: List[Member] = []

        def settled() -> bool:
            gone[:] = [m for m in self.members if m.proc is not None and m.proc.poll() is not None]
            return bool(gone) or all(self.role(m) for m in self.members)

        wait_until("the members to serve", settled, timeout=120)
        return gone

    def data_dir(self, m: Member) -> str:
        return os.path.join(self.dir, "data-%d" % m.id)

    def start(self, m: Member) -> None:
        peers = ",".join("%d=%s" % (p.id, p.peer) for p in self.members)
        args = [self.bin, "node", "--id", str(m.id), "--peers", peers, "--listen", m.client, "--http", m.http,
                "--api", m.api, "--advertise-api", m.api, "--data", self.data_dir(m)]
        log = open(os.path.join(self.dir, "node-%d.log" % m.id), "ab")
        m.proc = subprocess.Popen(args + self.extra, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def url(self, m: Member) -> str:
        return "%s://%s" % (self.scheme, m.api)

    def urls(self, members: Optional[Sequence[Member]] = None) -> List[str]:
        return [self.url(m) for m in (members if members is not None else self.members)]

    def client(self, members: Optional[Sequence[Member]] = None, **kw: object) -> raftlock.Client:
        """A Client of members' APIs (default: every member's)."""
        args: Dict[str, object] = dict(self.client_args)
        args.update(kw)
        return raftlock.Client(self.urls(members), **args)  # type: ignore[arg-type]

    def role(self, m: Member) -> str:
        """m's role, or "" when it does not answer."""
        if m.proc is None or m.stopped:
            return ""
        try:
            with self.client([m], timeout=1.0) as c:
                st = c.status(timeout=1.0)
        except raftlock.RaftlockError:
            return ""
        return str(st.get("role", ""))

    def leader(self, timeout: float = 20.0, among: Optional[Sequence[Member]] = None) -> Member:
        """The member that leads (waiting for one), once every member
        asked agrees on it."""
        found: List[Member] = []

        def one() -> bool:
            live = [m for m in (among or self.members) if m.proc is not None]
            leaders = [m for m in live if self.role(m) == "leader"]
            if len(leaders) == 1:
                found[:] = leaders
                return True
            return False

        wait_until("a leader", one, timeout)
        return found[0]

    def followers(self, leader: Member) -> List[Member]:
        return [m for m in self.members if m is not leader and m.proc is not None]

    def kill(self, m: Member) -> None:
        """SIGKILL m and reap it."""
        if m.proc is not None:
            m.proc.kill()
            m.proc.wait()
            m.proc = None
            m.stopped = False

    def pause(self, m: Member) -> None:
        """SIGSTOP m and wait until every thread of it has stopped: the
        signal only asks, and on a loaded machine a member went on
        answering calls for tens of milliseconds after it was sent."""
        assert m.proc is not None
        m.proc.send_signal(signal.SIGSTOP)
        m.stopped = True
        pid = m.proc.pid
        wait_until("member %d to stop" % m.id, lambda: _stopped(pid), timeout=60)

    def resume(self, m: Member) -> None:
        assert m.proc is not None
        m.proc.send_signal(signal.SIGCONT)
        m.stopped = False

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """Run the raftlock CLI against the members' client ports."""
        eps = ",".join(m.client for m in self.members if m.proc is not None)
        return subprocess.run([self.bin, *args, "--endpoints", eps], capture_output=True, text=True, timeout=30)

    def stop(self) -> None:
        for m in self.members:
            if m.proc is not None and m.stopped:
                self.resume(m)
            self.kill(m)
        self.tmp.cleanup()

    def _log(self, m: Member) -> str:
        """What member m's process wrote, "" when nothing."""
        try:
            with open(os.path.join(self.dir, "node-%d.log" % m.id), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def logs(self) -> str:
        return "\n".join("--- member %d\n%s" % (m.id, self._log(m)[-4000:]) for m in self.members)


def _stopped(pid: int) -> bool:
    """Whether every thread of process pid is stopped by a signal, as
    /proc/PID/task/*/stat says (state T); True where there is no /proc to
    ask, which is all a test can do there."""
    task = "/proc/%d/task" % pid
    if not os.path.isdir("/proc/self/task"):
        return True
    try:
        tids = os.listdir(task)
    except OSError:
        return False
    for tid in tids:
        try:
            with open(os.path.join(task, tid, "stat"), "rb") as f:
                stat = f.read()
        except OSError:
            continue  # a thread that ended meanwhile
        # "tid (comm) state ...": the name may hold anything, so the state
        # is the first field after the last ')'.
        state = stat[stat.rindex(b")") + 1 :].split()[0]
        if state not in (b"T", b"t"):
            return False
    return bool(tids)


def write_json(path: str, value: object) -> str:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f)
    return path


class ClusterTest(unittest.TestCase):
    """A test case with one cluster for the whole class (SIZE members)."""

    SIZE = 3
    cluster: Cluster

    @classmethod
    def setUpClass(cls) -> None:
        cls.cluster = Cluster(cls.SIZE)
        try:
            cls.cluster.leader()
        except BaseException:
            cls.cluster.stop()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.cluster.stop()
