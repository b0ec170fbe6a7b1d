"""What every GPU provider (cuDNN, MIOpen) shares; the vendor enters as arguments.

- ``_bind``: variant-pack binding of device buffers (``GpuArray``,
  ``__cuda_array_interface__``, int pointers) with device and pointer checks.
- ``_launch``: per-stream launch resources (a vendor handle bound to the stream, the
  stream's workspace), looked up by a plan's ``run``.
- ``_trial``: the build stream: heuristics queries, benchmarks and the trial run of each
  plan on zero-filled scratch buffers.
- ``_vendor``: the vendor libraries and the device, loaded and checked (``open_vendor``).
- ``_workspace``: workspace sizing (aligned segments carved from one allocation).
"""
