"""Convolution problems in cuDNN terms: descriptors, algorithm lists, benchmarking.

A ``ConvSetup`` holds the descriptors of one convolution pattern and which variant-pack
roles feed which C-API slot. Directions follow the C API: forward (x, w -> y), backward
data = dgrad (w, dy -> dx), backward filter = wgrad (x, dy -> dw); which roles those are
comes from ``patterns.conv_roles``, and an algorithm is a ``providers._tuning.Candidate``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..._errors import NotSupportedError
from ..._types import DataType
from ..._layout import packed_strides, strides_match
from ...patterns import ConvDirection, conv_roles
from ...runtime import _cudnn
from .._tuning import Candidate

__all__ = ["ConvSetup", "ALGO_NAMES", "conv_setup", "tensor_descriptor", "CUDNN_DTYPE"]

CUDNN_DTYPE = {DataType.FLOAT: _cudnn.DATA_FLOAT, DataType.HALF: _cudnn.DATA_HALF,
               DataType.BFLOAT16: _cudnn.DATA_BFLOAT16}

# cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t (cudnn_cnn.h, cuDNN 9.28)
ALGO_NAMES = (
    ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
     "WINOGRAD", "WINOGRAD_NONFUSED"),
    ("ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"),
    ("ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"),
)
# The C API's (a, b, c) argument order per direction, as ConvRoles attributes
# (cudnnConvolutionForward: x, w -> y; BackwardData: w, dy -> dx; BackwardFilter: x, dy -> dw).
# ConvDirection's values are cuDNN's direction indices (ALGO_NAMES, _cudnn's calls).
_C_ORDER = {ConvDirection.FPROP: ("x", "w", "y"), ConvDirection.DGRAD: ("w", "y", "x"),
            ConvDirection.WGRAD: ("x", "y", "w")}
_FFT_ALGOS = frozenset({"FFT", "FFT_TILING"})
_WINOGRAD_ALGOS = frozenset({"WINOGRAD", "WINOGRAD_NONFUSED"})


def data_type_code(tensor, where: str) -> int:
    code = CUDNN_DTYPE.get(tensor.data_type)
    if code is None:
        raise NotSupportedError(f"{where}: tensor '{tensor.name}' has data type "
                                f"{tensor.data_type.name}; cuDNN plans take FLOAT, HALF or BFLOAT16")
    return code


def tensor_descriptor(tensor, where: str, dims=None, strides=None):
    """A cudnnTensorDescriptor with the tensor's dims and element strides."""
    return _cudnn.TensorDescriptor(data_type_code(tensor, where),
                                   tuple(tensor.dims if dims is None else dims),
                                   tuple(tensor.strides if strides is None else strides))


def _filter_descriptor(tensor, where: str, channels_last: bool):
    dims, strides = tuple(tensor.dims), tuple(tensor.strides)
    n = len(dims)
    kcrs = packed_strides(dims, tuple(range(n)))
    krsc = packed_strides(dims, (0,) + tuple(range(2, n)) + (1,))   # K, [T,] R, S, C

    def same(want):
        return strides_match(dims, want, strides)

    # Where both read the same (1x1 filters, one channel per group) the data layout
    # decides: cuDNN's channels-last algorithms want an NHWC filter format.
    if same(kcrs) and not (channels_last and same(krsc)):
        fmt = _cudnn.FORMAT_NCHW
    elif same(krsc):
        fmt = _cudnn.FORMAT_NHWC
    else:
        raise NotSupportedError(
            f"{where}: filter tensor '{tensor.name}' has strides {strides}; cuDNN filters must "
            f"be packed KCRS {tuple(kcrs)} or KRSC {tuple(krsc)}")
    return _cudnn.FilterDescriptor(data_type_code(tensor, where), fmt, dims), fmt


def is_channels_last(tensor) -> bool:
    """True when the channel axis has the smallest stride (NHWC / NDHWC)."""
    dims, strides = tuple(tensor.dims), tuple(tensor.strides)
    return dims[1] > 1 and strides[1] == min(s for d, s in zip(dims, strides) if d > 1)


@dataclass
class ConvSetup:
    """Descriptors and roles of one convolution pattern."""

    direction: int
    roles: tuple            # (a, b, c) variant-pack roles
    descs: tuple            # (a, b, c) descriptors, C-API order
    conv: object            # ConvolutionDescriptor
    float_io: bool

    def algorithms(self, handle: int) -> list[Candidate]:
        """Every entry of cuDNN's heuristic list that reports SUCCESS, best first, each
        algorithm once, with this setup's math type (the knob's workspace limit is
        applied by the provider, the numerical policy by :meth:`accepted`);
        ``props["time_ms"]`` is the heuristic's estimate."""
        a, b, c = (d.ptr for d in self.descs)
        out = []
        for algo, status, t, memory, det, _math in _cudnn.get_algorithms(
                self.direction, handle, a, b, self.conv.ptr, c):
            # The descriptor's math type (FMA for FLOAT: no TF32) is what runs, whatever the
            # entry's; the provider's trial run drops an algorithm that refuses it.
            if status != 0 or any(algo == e.id for e in out):
                continue
            try:  # the size under our math type, if cuDNN answers (else the list's)
                memory = max(memory, _cudnn.workspace_size(self.direction, handle, a, b,
                                                           self.conv.ptr, c, algo))
            except _cudnn.CudnnError:
                pass
            out.append(Candidate(self.name(algo), algo, memory, det == _cudnn.DETERMINISTIC,
                                 {"time_ms": t}))
        return out

    def accepted(self, candidates, *, deterministic: bool,
                 allow_fft: bool) -> list[Candidate]:
        """The numerical policy over :meth:`algorithms`' list, in its order: the
        :meth:`accurate` entries when cuDNN has any for the problem; otherwise all,
        deterministic ones first (some 1x1 and depthwise weight gradients have only
        ALGO_0 / ALGO_3), but never FFT where the knob said 0 (``allow_fft`` False)."""
        good = [e for e in candidates if self.accurate(e.id, e.deterministic,
                                                       deterministic=deterministic,
                                                       allow_fft=allow_fft)]
        if good:
            return good
        if not allow_fft:
            candidates = [e for e in candidates if self.name(e.id) not in _FFT_ALGOS]
        return sorted(candidates, key=lambda e: not e.deterministic)

    def accurate(self, algo: int, determinism, *, deterministic: bool = True,
                 allow_fft: bool = False) -> bool:
        """Whether the policy keeps ``algo`` (``determinism``: cuDNN's flag, or a bool).
        The defaults are the strictest policy; the engine's defaults are
        ``deterministic=False, allow_fft=True``.

        - HALF / BFLOAT16 I/O: deterministic algorithms only (cuDNN's atomics-based
          ALGO_0 / ALGO_3 accumulate in HALF there: 20% errors measured on the H200);
          FFT and FFT_TILING (in FLOAT accumulation, taken as before the knob covered
          HALF / BFLOAT16) unless ``allow_fft`` is False (knob ``cudnn_legacy.allow_fft``
          = 0, so that a NaN or Inf input does not spread over an FFT tile; the
          deterministic Winograd algorithms stay, as before).
        - FLOAT I/O: no Winograd (never measured within our bound: PyTorch's FLOAT 3x3
          weight gradients, Winograd nonfused by bench/results/h200_diag_policy.log, were
          at 2.0-3.4x it with U(-1, 1) inputs on the H200, cuDNN 9.19,
          bench/results/h200_diag_wgrad_fft.log); FFT and FFT_TILING in every
          direction when ``allow_fft`` (knob ``cudnn_legacy.allow_fft``, default 1).
          fprop / dgrad: bench/diag_fft.py, H200, cuDNN 9.19, measured cuDNN's FFT engine
          configs, through the graph API that cuDNN 9's legacy calls build on, on the
          ResNet-50 fp32 3x3 fprop/dgrad shapes at batch 32 at most 0.19 of our bound
          (``tests/oracle/_cases.reduction_tol``) against 0.44 for direct summation, and
          2x faster; PyTorch runs them by default. wgrad: ``python3
          bench/diag_wgrad_fft.py`` (and ``--wide --layers 3x3``), H200, cuDNN 9.19,
          this engine on every ResNet-50 fp32 NCHW wgrad shape at batch 32: every FFT
          result at most 0.05 of our bound (``tests/oracle/_cases.gpu_wgrad_tol``; 0.01
          with inputs of magnitudes 2^-8..2^8) against up to 0.33 for ALGO_1 (res4 3x3).
          The first entry of cuDNN's heuristic list this policy keeps is then FFT on
          res3 3x3 (0.161 ms against ALGO_0's 0.357) and res4 3x3 (0.150 against
          ALGO_1's 0.322), workspace ~150 MiB; ALGO_0 / ALGO_1 elsewhere (res2 3x3: FFT
          0.329 against 0.385 only when forced, cudnnFind timed it slower; res5 3x3: FFT
          1.9x slower; 1x1: FFT 1.4-14x slower, workspaces 157 MiB-2.3 GiB; no
          FFT_TILING listed, no FFT at stride 2). ALGO_0 / ALGO_3 (FLOAT atomics: within
          the tolerance, not bitwise reproducible) unless ``deterministic`` (knob
          ``cudnn_legacy.deterministic``), as the graph engine's NONDETERMINISTIC configs
          and PyTorch's default (``deterministic=False``)."""
        det = determinism if isinstance(determinism, bool) else determinism == _cudnn.DETERMINISTIC
        name = self.name(algo)
        if not self.float_io:
            return det and (allow_fft or name not in _FFT_ALGOS)
        if not det and deterministic:
            return False
        if name in _FFT_ALGOS:
            return allow_fft
        return name not in _WINOGRAD_ALGOS

    def math_ok(self, math: int) -> bool:
        # FLOAT I/O runs strict fp32 (no TF32): keep entries that do not need tensor ops.
        return not self.float_io or math in (_cudnn.DEFAULT_MATH, _cudnn.FMA_MATH)

    def name(self, algo: int) -> str:
        names = ALGO_NAMES[self.direction]
        return names[algo] if 0 <= algo < len(names) else f"ALGO_{algo}"

    def algo_of(self, name: str) -> int | None:
        names = ALGO_NAMES[self.direction]
        return names.index(name) if name in names else None


def conv_setup(match, where: str) -> ConvSetup:
    """Descriptors for a convolution pattern; NotSupportedError for what cuDNN lacks."""
    t, conv, roles = match.tensors, match.params["conv"], conv_roles(match.pattern)
    direction = int(roles.direction)
    order = tuple(getattr(roles, a) for a in _C_ORDER[roles.direction])
    if tuple(conv.pre_padding) != tuple(conv.post_padding):
        raise NotSupportedError(f"{where}: cuDNN convolutions take symmetric padding; got "
                                f"pre {tuple(conv.pre_padding)}, post {tuple(conv.post_padding)}")
    io = t[roles.output]
    float_io = io.data_type == DataType.FLOAT
    math = _cudnn.FMA_MATH if float_io else _cudnn.TENSOR_OP_MATH
    cdesc = _cudnn.ConvolutionDescriptor(tuple(conv.pre_padding), tuple(conv.stride),
                                         tuple(conv.dilation), int(conv.groups),
                                         _cudnn.DATA_FLOAT, math)
    # the data tensor (never the filter: a 1x1 KCRS filter reads as channels-last) decides
    channels_last = is_channels_last(t[roles.x])
    descs = []
    for role in order:
        if role == roles.w:
            descs.append(_filter_descriptor(t[role], where, channels_last)[0])
        else:
            descs.append(tensor_descriptor(t[role], where))
    return ConvSetup(direction, order, tuple(descs), cdesc, float_io)
