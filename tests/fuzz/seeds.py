#!/usr/bin/env python3
"""tests/fuzz/seeds.py SRC_DIR OUT_DIR — turns the profiles and folded files
the tests wrote (FLAMME_FUZZ_SEEDS, see tests/files/test_files.py) into inputs of
tests/fuzz/harness.c: a profile becomes mode byte, options byte, then its
chunks' payloads concatenated (the harness re-chunks them), and a small
one also 0x4d + the file as is; a folded file becomes 0x80 + its text.
Inputs over 64 KiB are skipped (afl wants small, fast seeds)."""
import os
import struct
import sys
import zlib


def payload(data):
    off, out = struct.unpack_from("<I", data, 12)[0], b""
    while off + 16 <= len(data):
        magic, raw, zlen, _ = struct.unpack_from("<IIII", data, off)
        if magic != 0x434D4C46 or off + 16 + zlen > len(data):
            break
        try:
            out += zlib.decompress(data[off + 16:off + 16 + zlen])
        except zlib.error:
            break
        off += 16 + zlen
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    n = 0
    for root, _, files in os.walk(src):
        for name in sorted(files):
            data = open(os.path.join(root, name), "rb").read()
            if data[:8] == b"FLAMMEPF":
                minor = struct.unpack_from("<H", data, 10)[0] & 0x0f
                old = 0x20 if struct.unpack_from("<H", data, 8)[0] == 1 else 0  # harness: a 1.x file
                body = payload(data)
                seeds = [bytes([old, minor]) + body, bytes([13 | old, minor | 0x10]) + body]
                if len(data) <= 2048:  # raw: header and chunk checks (bombs are too slow)
                    seeds.append(b"\x4d" + data)
            else:
                seeds = [b"\x80" + data, b"\x81" + data]
            for k, sd in enumerate(seeds):
                if len(sd) <= 65536:
                    open(os.path.join(dst, "%s.%d" % (name, k)), "wb").write(sd)
                    n += 1
    print("seeds: %d inputs in %s" % (n, dst))


if __name__ == "__main__":
    main()
