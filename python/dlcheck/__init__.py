"""dlcheck for PyTorch: record a training run into a dlcheck trace file that
the C harness (`dlcheck compare`, `dlcheck env`) reads, with the same names,
digests and layer statistics as the engine's own traces."""
from .installation import version as _version

__version__ = _version()  # one with `dlcheck --version`: installation.py

from .digest import digest  # noqa: E402
from .envinfo import fingerprint  # noqa: E402
from .recorder import Recorder  # noqa: E402
from .state_dict import save_state_dict  # noqa: E402
from .tracefile import (LayerStats, Trace, TraceError, TraceFormatError,  # noqa: E402
                        read_trace, write_trace)

__all__ = ["Recorder", "read_trace", "write_trace", "Trace", "LayerStats", "TraceError",
           "TraceFormatError", "fingerprint", "save_state_dict", "digest", "__version__"]
