"""A profiler of plan executions, capture replays, batcher batches and builds.

Modelled on ``torch.profiler``::

    with dev.profile() as prof:          # or: async with hd.profile(dev0, dev1) as prof:
        ...
    prof.export_chrome_trace("trace.json")   # Perfetto / chrome://tracing
    print(prof.table())                      # per plan and per pattern
    prof.overlap()                           # fraction of time with >= 2 streams busy

``hipdnn-async trace trace.json --png timeline.png`` draws the timeline. With no profile
open the hooks in the library test one module flag (``_state.ON``) and do nothing else.
"""
from ._chrome import check_trace
from ._session import Profile, profile
from ._timeline import draw_timeline

__all__ = ["Profile", "profile", "check_trace", "draw_timeline"]
