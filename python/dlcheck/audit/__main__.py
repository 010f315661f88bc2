"""python -m dlcheck.audit ADAPTER.py (the same as python -m dlcheck audit)."""
import sys

from .cli import main

sys.exit(main())
