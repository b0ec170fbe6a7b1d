"""Pure shape functions: convolution output sizes, groups, batchnorm statistic shapes.

Every function takes plain tuples of ints and returns tuples of ints or raises
``GraphError`` with a message naming the API, the node and the offending value
(``where`` is the prefix, e.g. ``"conv_fprop 'conv1'"``).
"""
from __future__ import annotations

from .._errors import GraphError

__all__ = [
    "SPATIAL_NAMES",
    "KERNEL_LETTERS",
    "INPUT_LETTERS",
    "conv_output_size",
    "conv_output_spatial",
    "conv_groups",
    "check_conv_params",
    "bn_stat_dims",
    "spatial_volume",
]

# Logical spatial dim names, letters of the input (D, H, W) and of the kernel (T, R, S),
# as in cuDNN's convolution formulas.
SPATIAL_NAMES = {2: ("height", "width"), 3: ("depth", "height", "width")}
INPUT_LETTERS = {2: ("H", "W"), 3: ("D", "H", "W")}
KERNEL_LETTERS = {2: ("R", "S"), 3: ("T", "R", "S")}


def conv_output_size(size: int, kernel: int, pre: int, post: int, stride: int,
                     dilation: int) -> int:
    """Return ``(size + pre + post - dilation*(kernel - 1) - 1) // stride + 1``.

    Notes
    -----
    The floor is Python's (towards minus infinity), so a too-small input gives a
    result < 1, which callers reject.
    """
    return (size + pre + post - dilation * (kernel - 1) - 1) // stride + 1


def check_conv_params(where: str, n_spatial: int, pre: tuple, post: tuple,
                      stride: tuple, dilation: tuple) -> None:
    """Raise GraphError for wrong entry counts, negative padding, stride or dilation < 1."""
    names = SPATIAL_NAMES.get(n_spatial, tuple(f"spatial {i}" for i in range(n_spatial)))
    for label, values in (("pre_padding", pre), ("post_padding", post),
                          ("stride", stride), ("dilation", dilation)):
        if len(values) != n_spatial:
            raise GraphError(
                f"{where}: {label} {tuple(values)} has {len(values)} entries; need one per "
                f"spatial dim ({n_spatial}) of the input")
    for label, values, low in (("pre_padding", pre, 0), ("post_padding", post, 0),
                               ("stride", stride, 1), ("dilation", dilation, 1)):
        for i, v in enumerate(values):
            if v < low:
                raise GraphError(
                    f"{where}: {label} {v} for the {names[i]} dim is not allowed; "
                    f"need {label} >= {low}")


def conv_output_spatial(where: str, in_spatial: tuple, kernel: tuple, pre: tuple,
                        post: tuple, stride: tuple, dilation: tuple) -> tuple:
    """Return the output spatial dims of a convolution; GraphError if one is < 1."""
    n = len(in_spatial)
    names = SPATIAL_NAMES.get(n, tuple(f"spatial {i}" for i in range(n)))
    il = INPUT_LETTERS.get(n, tuple(f"I{i}" for i in range(n)))
    kl = KERNEL_LETTERS.get(n, tuple(f"K{i}" for i in range(n)))
    out = []
    for i in range(n):
        o = conv_output_size(in_spatial[i], kernel[i], pre[i], post[i], stride[i], dilation[i])
        if o < 1:
            pad = pre[i] if pre[i] == post[i] else f"{pre[i]}+{post[i]}"
            raise GraphError(
                f"{where}: output {names[i]} {o} for {il[i]}={in_spatial[i]}, "
                f"{kl[i]}={kernel[i]}, padding {pad}, stride {stride[i]}, dilation "
                f"{dilation[i]}; need {il[i]} + pre + post >= dilation*({kl[i]}-1) + 1")
        out.append(o)
    return tuple(out)


def conv_groups(where: str, in_channels: int, w_channels: int, k: int,
                in_label: str = "x", w_label: str = "w", *, declared=None) -> int:
    """Return groups = in_channels // w_channels; GraphError unless it divides evenly, or
    where ``declared`` (the caller's ``groups=``) is another number."""
    # dims are logical whatever the layout: (N, H, W, C) written as dims reads H as C
    order = "dims are (N, C, H, W) or (N, C, D, H, W) whatever the layout"
    if declared is not None and in_channels != declared * w_channels:
        raise GraphError(
            f"{where}: groups={declared} needs {in_label}.C = groups * {w_label}.C = "
            f"{declared * w_channels}; got {in_label}.C={in_channels}, {w_label}.C="
            f"{w_channels} ({order})")
    if w_channels < 1 or in_channels % w_channels != 0:
        raise GraphError(
            f"{where}: {in_label}.C={in_channels} is not a multiple of {w_label}.C="
            f"{w_channels}; groups = {in_label}.C // {w_label}.C must divide evenly ({order})")
    groups = in_channels // w_channels
    if k % groups != 0:
        raise GraphError(
            f"{where}: {w_label}.K={k} is not a multiple of groups={groups} "
            f"({in_label}.C={in_channels} // {w_label}.C={w_channels})")
    return groups


def bn_stat_dims(x_dims: tuple) -> tuple:
    """Return the per-channel statistic dims ``(1, C, 1, 1[, 1])`` for input dims ``x_dims``."""
    return (1, x_dims[1]) + (1,) * (len(x_dims) - 2)


def spatial_volume(dims: tuple) -> int:
    """Return the product of the spatial dims (dims[2:])."""
    v = 1
    for d in dims[2:]:
        v *= d
    return v
