#!/usr/bin/python3
"""CTest tc.client.python: the Python example (tc/client/example/python/
bank.py) against a live `deuteron serve`: a transfer, a scan, a deadlock
retried. Starts the server on a free loopback port in a fresh directory,
runs the example with the generated code on PYTHONPATH, stops the server
with SIGTERM and checks that both exited 0.

    python_example_test.py DEUTERON_BIN GEN_PY_DIR BANK_PY
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile


def main():
    deuteron, gen_py, bank = sys.argv[1:4]
    workdir = tempfile.mkdtemp(prefix="deuteron-python-")
    server = subprocess.Popen(
        [deuteron, "serve", "--dir", os.path.join(workdir, "db"), "--listen", "127.0.0.1:0",
         "--lock-timeout-ms", "2000"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first = server.stdout.readline()
        print(first.strip())
        if "serving" not in first:
            print("the server did not start", file=sys.stderr)
            return 1
        address = first.strip().rsplit(" ", 1)[-1]
        env = dict(os.environ, PYTHONPATH=gen_py)
        example = subprocess.run(["/usr/bin/python3", bank, address], env=env, timeout=120)
        server.send_signal(signal.SIGTERM)
        server_rc = server.wait(timeout=60)
        print("example exited %d, server %d" % (example.returncode, server_rc))
        return 0 if example.returncode == 0 and server_rc == 0 else 1
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
