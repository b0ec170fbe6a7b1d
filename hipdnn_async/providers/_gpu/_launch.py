"""Per-stream launch resources of a GPU provider, prepared before any launch.

What a plan's ``run`` needs on its stream (the provider's vendor handle bound to that
stream, and a workspace large enough for every plan built so far) is created when the
stream starts and grown when a plan is built, before the plan can first be launched:
``run`` then only enqueues work. It allocates, frees, synchronises and creates nothing, so
the first execution pays no setup and the work a stream enqueues could be captured into a
CUDA/HIP graph.

A provider declares what its streams need as data, once (``StreamNeeds(context, key,
handle_kind)``; ``reserve(nbytes)`` at build; ``prepare_handles(HandleWork(...))`` for a
plan's per-handle state), and the runtime creates it on every stream
(``runtime._stream_prep``): no provider code runs when a stream opens.
``StreamHandle``, ``StreamResources`` (one stream's handle and workspace, in
``LaunchContext.resources`` under the provider's key; closed with the stream) and
``stream_resources(key, who)`` (the lookup a plan's ``run`` makes) are the runtime's
(``runtime._stream_resources``), where a bound C launch reads them too.
"""
from __future__ import annotations

from ...runtime._stream_prep import HandleWork, StreamNeeds, stream_handle
from ...runtime._stream_resources import StreamHandle, StreamResources, stream_resources

__all__ = ["StreamHandle", "StreamResources", "StreamNeeds", "HandleWork", "stream_handle",
           "stream_resources"]
