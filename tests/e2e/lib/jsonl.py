#!/usr/bin/env python3
"""Reads one JSON array (a list command's --json output) on stdin and writes
one compact JSON object per line, for tests that grep a record at a time.
Fails loudly when stdin is not a single JSON array."""
import json
import sys

data = sys.stdin.read()
value = json.loads(data)
if not isinstance(value, list):
    sys.exit("jsonl.py: expected a JSON array, got: " + data[:200])
for item in value:
    print(json.dumps(item, separators=(",", ":"), ensure_ascii=False))
