#!/usr/bin/env python3
"""Prints one closing line, 'tests: N passed, N failed, N skipped', over JUnit XML files.

Before it, every failed or errored test is named with the first lines of its message, so that
the tail of a CI log (often all that is kept) says which test failed and why.

Exits 1 when any test failed or errored, or when no test ran at all.
"""
import sys
import xml.etree.ElementTree as ET

MESSAGE_LINES = 6


def failure_text(case):
    for tag in ("failure", "error"):
        node = case.find(tag)
        if node is not None:
            text = (node.get("message") or "") + "\n" + (node.text or "")
            lines = [l for l in text.splitlines() if l.strip()]
            return lines[-MESSAGE_LINES:] if len(lines) > MESSAGE_LINES else lines
    return None


def main(paths):
    passed = failed = skipped = 0
    failures = []
    for path in paths:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"cannot read {path}: {e}")
            failed += 1
            continue
        for case in root.iter("testcase"):
            text = failure_text(case)
            if text is not None:
                failed += 1
                name = case.get("name", "?")
                if case.get("classname"):
                    name = f"{case.get('classname')}::{name}"
                failures.append((path, name, case.get("time", "?"), text))
            elif case.find("skipped") is not None or case.get("status") in ("notrun", "disabled"):
                skipped += 1
            else:
                passed += 1
    for path, name, seconds, text in failures:
        print(f"FAILED {name} ({path}, {seconds} s)")
        for line in text:
            print(f"    {line[:300]}")
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
