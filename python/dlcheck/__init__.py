"""dlcheck for PyTorch: record a training run into a dlcheck trace file that
the C harness (`dlcheck compare`, `dlcheck env`) reads, with the same names,
digests and layer statistics as the engine's own traces."""
__version__ = "0.1.0"

from .digest import digest  # noqa: E402
from .envinfo import fingerprint  # noqa: E402
from .tracefile import LayerStats, Trace, TraceError, TraceFormatError, read_trace, write_trace  # noqa: E402,E501

__all__ = ["read_trace", "write_trace", "Trace", "LayerStats", "TraceError",
           "TraceFormatError", "fingerprint", "digest", "__version__"]
