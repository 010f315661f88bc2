"""python -m dlcheck.audit ADAPTER.py (the same as python -m dlcheck audit)."""
import sys

from .cli import main

if __name__ == "__main__":  # not when a spawned rank process imports it as __mp_main__
    sys.exit(main())
