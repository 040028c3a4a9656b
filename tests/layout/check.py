#!/usr/bin/env python3
"""tests/layout/check.py — the folders say who may call whom.

Reads every `#include "dir/..."` of the C sources and headers directly in a
top-level folder (agent/x.c, writer/x.h, ...; what `grep '#include' */*.c`
shows), and fails with one line per offence when:
  - writer/ includes agent/ or runtime_hooks/ (the writer gets what it needs
    of the agent through writer/writer_host.h);
  - common/ includes anything but common/;
  - the folder-to-folder includes differ from the "Who calls whom" list in
    doc/design.md (so that list stays what the code does).
Run from the repository root: `make layout-test` (mk/layout.mk).
"""
import glob
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z_]+)/[^"]+"', re.M)
# Folders whose C files are the product (tests/ and bench/ may include anything).
PRODUCT = ["agent", "common", "ocaml_stubs", "runtime_hooks", "tools", "writer"]
FORBIDDEN = {"writer": {"agent", "runtime_hooks"}}
ONLY = {"common": {"common"}}
DOC = "doc/design.md"
DOC_LINE = re.compile(r"^\* `(\w+)/` includes (.*)$")


def includes():
    """{folder: {included folder: [file, ...]}} over the product folders."""
    seen = {}
    for d in PRODUCT:
        seen[d] = {}
        for path in sorted(glob.glob(f"{d}/*.c") + glob.glob(f"{d}/*.h")):
            with open(path, encoding="utf-8") as f:
                for inc in INCLUDE.findall(f.read()):
                    if inc == "build":  # generated at build time (tools/fg_svg.c)
                        continue
                    seen[d].setdefault(inc, []).append(path)
    return seen


def documented():
    """{folder: set of folders} from the doc's "Who calls whom" list (lines
    '* `dir/` includes `a/`, `b/` — why'; its own folder may be left out)."""
    doc = {}
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            m = DOC_LINE.match(line.rstrip())
            if m:
                doc[m.group(1)] = set(re.findall(r"`(\w+)/`", m.group(2)))
    return doc


def main():
    if not os.path.isdir("writer") or not os.path.exists(DOC):
        print("layout: run from the repository root", file=sys.stderr)
        return 2
    seen = includes()
    errors = []
    for d, bad in FORBIDDEN.items():
        for inc in sorted(bad & set(seen[d])):
            errors.append(f"{d}/ includes {inc}/ ({', '.join(sorted(set(seen[d][inc])))}): "
                          f"the writer reaches the agent only through writer/writer_host.h")
    for d, ok in ONLY.items():
        for inc in sorted(set(seen[d]) - ok):
            errors.append(f"{d}/ includes {inc}/ ({', '.join(sorted(set(seen[d][inc])))}): "
                          f"{d}/ may include only {', '.join(sorted(ok))}/")
    doc = documented()
    if not doc:
        errors.append(f"{DOC}: no \"Who calls whom\" list (lines '* `dir/` includes `a/`, ...')")
    for d in PRODUCT:
        have = set(seen[d]) - {d}  # a folder's files include each other freely
        said = doc.get(d)
        if said is None:
            if doc:
                errors.append(f"{DOC}: the who-calls-whom list has no line for {d}/")
            continue
        said = said - {d}
        for inc in sorted(have - said):
            errors.append(f"{DOC}: {d}/ includes {inc}/ ({', '.join(sorted(set(seen[d][inc])))}) "
                          f"but the who-calls-whom list does not say so")
        for inc in sorted(said - have):
            errors.append(f"{DOC}: the who-calls-whom list says {d}/ includes {inc}/, it does not")
    for e in errors:
        print("layout: " + e)
    if errors:
        return 1
    print(f"layout: {len(PRODUCT)} folders, includes as doc/design.md says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
