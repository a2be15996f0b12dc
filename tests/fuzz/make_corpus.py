#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/README.md) into
tests/fuzz/corpus/<target>/, replacing what is there.

server_frame_fuzz: byte streams a client might send a Deuteron server
(framed strict-binary Thrift calls, pipelined, and a few broken ones),
written here. Every other target writes its own seeds from real data (calls
built with the generated Thrift code, a real log, a real store) when run
with DEUTERON_FUZZ_WRITE_SEEDS=<dir>: give the directory of the built
targets (scripts/fuzz --seeds does: build/fuzz/bin).

Usage: make_corpus.py [bin_dir]"""
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "server_frame_fuzz")


def s(b):
    return struct.pack(">i", len(b)) + b


def msg(name, seqid, body, mtype=1):
    return struct.pack(">I", 0x80010000 | mtype) + s(name.encode()) + struct.pack(">i", seqid) + body


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def f_string(fid, b):
    return b"\x0b" + struct.pack(">h", fid) + s(b)


def f_i64(fid, v):
    return b"\x0a" + struct.pack(">hq", fid, v)


def f_i32(fid, v):
    return b"\x08" + struct.pack(">hi", fid, v)


STOP = b"\x00"


def record_op(kind, key, value, lsn):
    return f_i32(1, kind) + f_string(2, key) + f_string(3, value) + f_i64(4, lsn) + STOP


def apply_call(seqid, ops, esl=0, inc=0):
    lst = b"\x0f" + struct.pack(">h", 1) + b"\x0c" + struct.pack(">i", len(ops)) + b"".join(ops)
    req = lst + f_i64(2, esl) + f_i64(3, inc) + STOP
    return msg("apply", seqid, b"\x0c" + struct.pack(">h", 1) + req + STOP)


def multiget_call(seqid, keys):
    lst = b"\x0f" + struct.pack(">h", 1) + b"\x0b" + struct.pack(">i", len(keys)) + b"".join(s(k) for k in keys)
    return msg("multiGet", seqid, lst + STOP)


seeds = {
    "get": frame(msg("get", 1, f_string(1, b"key") + STOP)),
    "health": frame(msg("health", 2, STOP)),
    "stats": frame(msg("stats", 3, STOP)),
    "set_esl": frame(msg("setEsl", 4, f_i64(1, 10) + f_i64(2, 0) + STOP)),
    "propose_rssp": frame(msg("proposeRssp", 5, f_i64(1, 5) + f_i64(2, 0) + STOP)),
    "restart_to": frame(msg("restartTo", 6, f_i64(1, 0) + STOP)),
    "apply": frame(apply_call(7, [record_op(1, b"a", b"1", 10), record_op(2, b"b", b"", 11)], esl=9)),
    "multiget": frame(multiget_call(8, [b"a", b"b", b"big", b"big"])),
    "scan": frame(msg("scan", 9, b"\x0c" + struct.pack(">h", 1) + f_i32(6, 10) + STOP + STOP)),
    "authenticate": frame(msg("authenticate", 10, f_string(1, b"token") + STOP)),
    "pipelined": frame(msg("get", 11, f_string(1, b"a") + STOP)) + frame(msg("health", 12, STOP))
    + frame(multiget_call(13, [b"big"] * 8)),
    "unknown_method": frame(msg("noSuchMethod", 14, STOP)),
    "reply_type": frame(msg("get", 15, STOP, mtype=2)),
    "zero_length": frame(msg("health", 16, STOP)) + b"\x00\x00\x00\x00",
    "huge_length": b"\x7f\xff\xff\xff" + b"x" * 16,
    "truncated": frame(msg("get", 17, f_string(1, b"key") + STOP))[:-3],
    "string_over": frame(msg("get", 18, b"\x0b\x00\x01\x7f\xff\xff\xff")),
}



def fresh(path):
    """Empties `path` of seeds, keeping the inputs that found bugs (regress-*)."""
    os.makedirs(path, exist_ok=True)
    for f in os.listdir(path):
        if not f.startswith("regress-"):
            os.remove(os.path.join(path, f))


fresh(OUT)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)

if len(sys.argv) > 1:
    bin_dir = sys.argv[1]
    for src in sorted(os.listdir(HERE)):
        target = src[:-4]
        if not src.endswith("_fuzz.cpp") or target == "server_frame_fuzz":
            continue
        out = os.path.join(HERE, "corpus", target)
        fresh(out)
        env = dict(os.environ, DEUTERON_FUZZ_WRITE_SEEDS=out)
        subprocess.run([os.path.join(bin_dir, target)], env=env, check=True, stdout=subprocess.DEVNULL)
        files = os.listdir(out)
        size = sum(os.path.getsize(os.path.join(out, f)) for f in files)
        print(f"{target}: {len(files)} seeds, {size} bytes")
