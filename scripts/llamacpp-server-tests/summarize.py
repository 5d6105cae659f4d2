#!/usr/bin/env python3
"""Summarize run.sh's junit files: a per-file table and every failing test with
the first line of its failure message (the raw material for README.md's table).

Usage: summarize.py [RESULTS_DIR]   (default /tmp/lcpp-tests/results)
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET

res = sys.argv[1] if len(sys.argv) > 1 else "/tmp/lcpp-tests/results"
rows, fails = [], []
for path in sorted(glob.glob(os.path.join(res, "junit-*.xml"))):
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for case in suite.iter("testcase"):
        kind = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                kind = {"failure": "failed"}.get(child.tag, child.tag)
                if child.tag != "skipped":
                    msg = (child.get("message") or child.text or "").strip().splitlines()
                    fails.append((case.get("classname"), case.get("name"), kind, msg[0][:300] if msg else ""))
                break
        counts[kind] += 1
    name = os.path.basename(path)[len("junit-"):-len(".xml")] + ".py"
    rows.append((name, counts))
print("| file | passed | failed | errors | skipped |")
print("|---|---|---|---|---|")
tot = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
for name, c in rows:
    print(f"| {name} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
    for k in tot:
        tot[k] += c[k]
print(f"| **total** | {tot['passed']} | {tot['failed']} | {tot['error']} | {tot['skipped']} |")
print()
for cls, name, kind, msg in fails:
    print(f"- {cls.split('.')[-1]}::{name} [{kind}] {msg}")
