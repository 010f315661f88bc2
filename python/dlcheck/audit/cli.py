"""python -m dlcheck audit ADAPTER.py: the command line of the audit."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .audit import FAMILIES, run_audit


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dlcheck audit",
        description="Audit a team's PyTorch training code for the catalogue's pitfalls: "
                    "runs its adapter's pieces in paired variants, records each run, and "
                    "lets the dlcheck harness judge them (docs/audit.md).",
        epilog="exit codes: 0 no finding; 1 findings; 2 malformed adapter or bad usage "
               "(nothing written); 3 no dlcheck binary (set DLCHECK_BIN)")
    p.add_argument("adapter", help="the adapter: a .py file or an importable module name")
    p.add_argument("--out", default="audit-report",
                   help="folder for report.html, report.json, junit.xml, summary.txt and the "
                        "traces (default audit-report; an earlier audit's is replaced)")
    p.add_argument("--only", action="append", choices=sorted(FAMILIES), metavar="FAMILY",
                   help=f"run only this family (repeatable): {', '.join(FAMILIES)}")
    p.add_argument("--bin", help="the dlcheck executable (default $DLCHECK_BIN, the one "
                                 "installed with the package, PATH, build/release/cli/dlcheck)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print the summary also when there is no finding (silent by default)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    result = run_audit(args.adapter, args.out, families=args.only, binary=args.bin)
    if result.message:
        print(f"dlcheck audit: {result.message}", file=sys.stderr)
        return result.exit_code
    if result.exit_code or args.verbose:
        sys.stdout.write(result.text)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
