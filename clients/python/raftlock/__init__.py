"""raftlock: a Python client for raftlock, a Raft-replicated lock service
with fencing tokens, through its members' HTTP/JSON API.

Standard library only; Python 3.9 or later::

    import raftlock

    client = raftlock.Client(["127.0.0.1:10001", "127.0.0.1:10002", "127.0.0.1:10003"])
    with client.lock("job", lease=10, wait=30) as lk:
        write(data, fence=lk.token)   # the resource refuses tokens lower than the highest it saw
        if lk.lost.is_set():
            ...                       # stop: the lock can no longer be trusted

``client.watch(prefix)`` follows the lock events under a prefix (the API's watch).
"""

from .client import (
    DEFAULT_TIMEOUT,
    MAX_KEY_LEN,
    MAX_LEASE,
    MAX_LIST_LIMIT,
    MAX_OWNER_LEN,
    MIN_LEASE,
    Client,
    Grant,
    HeldLock,
    LockInfo,
    LockPage,
    default_owner,
)
from .errors import (
    Compacted,
    Held,
    InvalidArgument,
    NotHolder,
    OutcomeUnknown,
    Overloaded,
    PermissionDenied,
    RaftlockError,
    Unavailable,
)
from .lock import Lock
from .watch import Event, Watch

__version__ = "0.1.0"

__all__ = [
    "Client",
    "DEFAULT_TIMEOUT",
    "Event",
    "Grant",
    "Held",
    "HeldLock",
    "InvalidArgument",
    "Lock",
    "LockInfo",
    "LockPage",
    "MAX_KEY_LEN",
    "MAX_LEASE",
    "MAX_LIST_LIMIT",
    "MAX_OWNER_LEN",
    "MIN_LEASE",
    "NotHolder",
    "OutcomeUnknown",
    "Overloaded",
    "PermissionDenied",
    "RaftlockError",
    "Compacted",
    "Unavailable",
    "Watch",
    "default_owner",
]
