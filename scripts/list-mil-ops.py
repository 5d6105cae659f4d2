#!/usr/bin/env python3
"""Writes the MIL op names of coremltools' iOS18 opset, one a line.

The ANE capability registry (crates/mil/src/registry.rs) keeps only evidence
about names that are MIL ops by Apple's own definitions; this list is that
set. Regenerate with the pinned coremltools (scripts/requirements-coremltools.txt):

    python scripts/list-mil-ops.py > crates/mil/evidence/mil-ops-ios18.txt
"""
import logging
import sys

logging.disable(logging.WARNING)  # libcoremlpython is absent off macOS; harmless here

import coremltools as ct
import coremltools.converters.mil.mil.ops.defs  # noqa: F401  (registers every op)
from coremltools.converters.mil.mil.ops.registry import SSAOpRegistry


def main() -> None:
    ios18 = ct.target.iOS18
    names = sorted(
        name
        for name, by_target in SSAOpRegistry.core_ops.items()
        if not name.startswith("_") and ios18 in by_target
    )
    print(f"# MIL ops of the iOS18 opset, coremltools {ct.__version__} (scripts/list-mil-ops.py)")
    for name in names:
        print(name)


if __name__ == "__main__":
    sys.exit(main())
