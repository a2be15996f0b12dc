#!/usr/bin/python3
"""Deuteron from Python: the Thrift-generated TransactionService client.

    bank.py HOST:PORT [SECRET]

Against a running `deuteron serve` (or `deuteron tc`): sets up accounts in one
`execute` round trip, moves money between them in transactions (retried on
DEADLOCK and TIMED_OUT), audits them with a paged scan, and provokes a
deadlock between two connections to show it retried. Exits 0 when the total
is unchanged and the deadlock was retried. Needs the code generated from
protocol/deuteron.thrift (`thrift --gen py`, built by CMake into
<build>/gen-py) on PYTHONPATH, and Debian's python3-thrift.
"""
import sys
import threading
import time

from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TTransport

from deuteron import TransactionService
from deuteron.ttypes import (DeuteronError, ErrorCode, ExecuteRequest, ScanRequest, TcOp,
                             TcOpKind)

RETRYABLE = (ErrorCode.DEADLOCK, ErrorCode.TIMED_OUT)
ACCOUNTS = 10
INITIAL = 100


def connect(address, secret=None):
    host, port = address.rsplit(":", 1)
    transport = TTransport.TFramedTransport(TSocket.TSocket(host, int(port)))
    transport.open()
    client = TransactionService.Client(TBinaryProtocol.TBinaryProtocol(transport))
    if secret:
        client.authenticate(secret.encode())
    return client, transport


def account(i):
    return b"account/%03d" % i


def run(client, body, attempts=20):
    """Runs body(txn) in a transaction and commits; retries lock failures."""
    for attempt in range(attempts):
        txn = client.beginTransaction()
        try:
            result = body(txn)
            client.commit(txn)
            return result, attempt
        except DeuteronError as e:
            client.abort(txn)  # drops the server's entry; idempotent
            if e.code not in RETRYABLE:
                raise
            time.sleep(0.001 * (2 ** min(attempt, 6)))
    raise RuntimeError("gave up after %d attempts" % attempts)


def transfer(client, src, dst, amount):
    def body(txn):
        a = int(client.get(txn, account(src)).value)
        b = int(client.get(txn, account(dst)).value)
        if a >= amount:
            client.put(txn, account(src), b"%d" % (a - amount))
            client.put(txn, account(dst), b"%d" % (b + amount))
    return run(client, body)


def audit(client):
    """Sum of every balance, by a scan fetched a few items per page."""
    def body(txn):
        total, count = 0, 0
        request = ScanRequest(lower=account(0), upper=b"account0", limit=3)
        while True:
            page = client.scan(txn, request)
            for item in page.items:
                total += int(item.value)
                count += 1
            if not page.more:
                return total, count
            request.lower = page.resume_key  # the next page starts after it
            request.lower_inclusive = False
    return run(client, body)[0]


def deadlock(address, secret):
    """Two connections lock a and b in opposite orders: one is the victim
    and retries. Returns how many retries they needed in all."""
    retries = []
    barrier = threading.Barrier(2)

    def worker(first, second):
        client, transport = connect(address, secret)
        calls = [0]

        def body(txn):
            client.get(txn, first)
            calls[0] += 1
            if calls[0] == 1:
                barrier.wait(timeout=5)  # both hold one S lock: now cross
            client.put(txn, second, b"written")
        retries.append(run(client, body)[1])
        transport.close()

    threads = [threading.Thread(target=worker, args=(account(0), account(1))),
               threading.Thread(target=worker, args=(account(1), account(0)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(retries)


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    address = sys.argv[1]
    secret = sys.argv[2] if len(sys.argv) == 3 else None
    client, transport = connect(address, secret)

    setup = [TcOp(kind=TcOpKind.PUT, key=account(i), value=b"%d" % INITIAL)
             for i in range(ACCOUNTS)]
    client.execute(ExecuteRequest(ops=setup))  # one transaction, one round trip

    for i in range(50):
        transfer(client, i % ACCOUNTS, (i * 7 + 3) % ACCOUNTS, i % 17)
    total, count = audit(client)
    print("after transfers: %d accounts, total %d" % (count, total))

    # The deadlock test overwrites two balances; restore a valid state first.
    retried = deadlock(address, secret)
    print("deadlock: retried %d time(s)" % retried)
    client.execute(ExecuteRequest(ops=setup))

    transport.close()
    ok = count == ACCOUNTS and total == ACCOUNTS * INITIAL and retried >= 1
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
