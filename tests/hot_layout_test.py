#!/usr/bin/env python3
"""The hot functions of a start sit together at the front of luagent's .text.

CMake links luagent with lld and cmake/hot_functions.txt as its symbol
ordering file (LUAGENT_HOT_ORDER): this test fails when that did not take
effect (another linker, a flag lost, a file lld could not read), and when
the file has gone stale (most of its names no longer in the binary: rerun
bench/hot_order.sh BUILD_DIR and commit the file).

Usage: hot_layout_test.py LUAGENT_BINARY HOT_FUNCTIONS_FILE
"""
import subprocess
import sys


def main():
    binary, hot_file = sys.argv[1], sys.argv[2]
    hot = [l.strip() for l in open(hot_file) if l.strip()]
    if len(hot) < 100:
        sys.exit(f"FAIL: {hot_file} names only {len(hot)} functions")
    comment = subprocess.run(["readelf", "-p", ".comment", binary], capture_output=True,
                             text=True).stdout
    if "LLD" not in comment:
        sys.exit(f"FAIL: {binary} was not linked by lld (.comment: {comment.strip()[:200]})")
    out = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True,
                         check=True).stdout
    text = None
    for line in out.splitlines():
        p = line.replace("[ ", "[").split()
        if len(p) > 5 and p[1] == ".text":
            text = (int(p[3], 16), int(p[5], 16))
    if not text:
        sys.exit(f"FAIL: no .text section in {binary}")
    syms = {}
    out = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tT":
            syms.setdefault(p[3], []).append((int(p[0], 16), int(p[1], 16)))
    found = [s for n in hot if n in syms for s in syms[n]]
    share = len([n for n in hot if n in syms]) / len(hot)
    print(f"{share:.0%} of the {len(hot)} hot names are in the binary")
    if share < 0.75:
        sys.exit("FAIL: cmake/hot_functions.txt is stale: run bench/hot_order.sh BUILD_DIR")
    # All of them within the front of .text (about half of it today, with
    # the whole objects of the static archives that hold hot code): in a
    # binary linked without the order they are spread over all of it.
    start, size = text
    end = max(a + n for a, n in found)
    used = (end - start) / size
    print(f"the hot functions end {end - start} bytes into .text ({used:.0%} of {size})")
    if used > 0.65:
        sys.exit("FAIL: the hot functions are spread over .text: the order file did not apply")
    # and what `version` and `ask` never run lies beyond them
    cold = [n for n in ("cli_console", "cli_daemon") if n in syms]
    if not cold:
        sys.exit("FAIL: neither cli_console nor cli_daemon is in the binary (renamed? pick another)")
    for n in cold:
        if min(a for a, _ in syms[n]) < end:
            sys.exit(f"FAIL: {n}, which no start runs, lies among the hot functions")
    print("ok")


if __name__ == "__main__":
    main()
