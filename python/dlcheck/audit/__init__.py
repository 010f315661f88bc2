"""dlcheck audit: the catalogue's pitfalls looked for in a team's own
PyTorch training code, through a small adapter module (docs/audit.md).

    python -m dlcheck audit my_pipeline_adapter.py --out audit-report
    result = dlcheck.audit.run_audit("my_pipeline_adapter.py", tmp_path)
"""
from .adapter import Adapter, AdapterError, load_adapter
from .audit import FAMILIES, run_audit
from .cli import main
from .families.scaler import CpuGradScaler
from .summary import AuditResult

__all__ = ["main", "run_audit", "load_adapter", "Adapter", "AdapterError", "AuditResult",
           "CpuGradScaler", "FAMILIES"]
