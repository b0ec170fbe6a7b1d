"""The trained digits CNN as a file (``demo --save FILE``) and as a ready model to serve.

``save_weights`` writes the parameters and running statistics of a trained ``Network``,
with the training split's pixel mean and standard deviation, to one ``.npz`` file;
``load_weights`` reads and checks it; ``digits_model(path)`` is the model factory that
``hipdnn_async.ray.deployment`` and ``Predictor`` take: ``await factory(dev)`` returns a
``DigitsModel`` on that device, whose ``await model(images)`` gives the logits.

The served model is the folded network of the demo's evaluation (b) and serving stage:
batchnorm folded into each convolution, one dynamic batcher per layer (``_serve``'s
chain), every bucket's plan built at start-up (``warmup``).
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict

import numpy as np

from ._common import DemoError
from ._model import IMAGE_SIZE, LAYERS

__all__ = ["FORMAT", "save_weights", "load_weights", "digits_model", "DigitsFactory",
           "DigitsModel"]

FORMAT = "hipdnn_async.demo.digits/1"     # the file's "format" entry; bump on any change
_CLASSES = 10


def _expected_shapes() -> dict[str, tuple]:
    """Every params/running entry of the architecture and its dims."""
    out = {}
    for layer in LAYERS:
        out[f"params/{layer.name}.w"] = layer.w_dims
        if layer.bn is not None:
            c = (1, layer.out_channels, 1, 1)
            for name in ("scale", "bias"):
                out[f"params/{layer.name}.{name}"] = c
            for name in ("running_mean", "running_var"):
                out[f"running/{layer.name}.{name}"] = c
    return out


def save_weights(path: str, net, data) -> str:
    """Write the trained network `net` and the pixel statistics of `data` to `path`.

    Parameters
    ----------
    path : str
        Destination, written as given (no ``.npz`` is appended); replaced atomically.
    net : Network
        The trained network: ``params`` and ``running`` (float32 host arrays).
    data : Digits
        Its ``pixel_mean`` and ``pixel_std`` (the normalisation the network was trained on).

    Returns
    -------
    str
        The absolute path written.

    Raises
    ------
    OSError
        The folder is missing or not writable, or the disk is full (nothing is left
        behind at `path`).
    """
    arrays = {"format": np.array(FORMAT),
              "layers": np.array(json.dumps([asdict(layer) for layer in net.layers])),
              "pixel_mean": np.float64(data.pixel_mean),
              "pixel_std": np.float64(data.pixel_std)}
    arrays.update({f"params/{k}": np.asarray(v, np.float32) for k, v in net.params.items()})
    arrays.update({f"running/{k}": np.asarray(v, np.float32) for k, v in net.running.items()})
    target = os.path.abspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".digits-", suffix=".npz.tmp",
                               dir=os.path.dirname(target))
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def load_weights(path: str) -> dict:
    """Read and check a file that ``demo --save`` wrote.

    Returns
    -------
    dict
        ``params`` and ``running`` (dicts of float32 arrays, the names of
        ``Network.params`` / ``Network.running``), ``pixel_mean`` and ``pixel_std``
        (float), ``path``.

    Raises
    ------
    DemoError
        The file is missing or unreadable, is not an ``.npz`` of this format, was saved for
        another architecture, or an entry has the wrong dims or a non-finite value; the
        message names the file and the entry.
    """
    where = f"digits model {path!r}"
    try:
        with np.load(path, allow_pickle=False) as z:
            entries = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise DemoError(f"{where}: no such file; write one with 'hipdnn-async demo --save "
                        f"{path}'") from None
    except (OSError, ValueError, EOFError) as exc:
        raise DemoError(f"{where}: not a readable .npz file ({type(exc).__name__}: "
                        f"{exc})") from None
    fmt = str(entries.get("format", ""))
    if fmt != FORMAT:
        raise DemoError(f"{where}: format {fmt or '(none)'!r}; expected {FORMAT!r} (a file "
                        "written by 'hipdnn-async demo --save')")
    layers = json.dumps([asdict(layer) for layer in LAYERS])
    if str(entries.get("layers", "")) != layers:
        raise DemoError(f"{where}: saved for architecture {str(entries.get('layers'))}; this "
                        f"release serves {layers}")
    out = {"params": {}, "running": {}, "path": os.path.abspath(path)}
    for key, dims in _expected_shapes().items():
        if key not in entries:
            raise DemoError(f"{where}: entry {key!r} is missing")
        a = entries[key]
        if a.shape != dims or a.dtype != np.float32 or not np.isfinite(a).all():
            raise DemoError(f"{where}: entry {key!r} must be finite float32 of dims {dims}; "
                            f"got {a.dtype} {a.shape}")
        group, name = key.split("/", 1)
        out[group][name] = a
    for key in ("pixel_mean", "pixel_std"):
        v = entries.get(key)
        if v is None or v.shape != () or not np.isfinite(v) or (key == "pixel_std" and v <= 0):
            raise DemoError(f"{where}: entry {key!r} must be a finite scalar"
                            + (" > 0" if key == "pixel_std" else "") + f"; got {v!r}")
        out[key] = float(v)
    return out


class DigitsModel:
    """The trained digits CNN on one device: raw 8x8 images in, logits out.

    Made by ``await digits_model(path)(dev)``; use as ``async with model:`` (which
    ``hipdnn_async.ray`` does for you), then ``await model(images)``.

    Attributes
    ----------
    sample_shape : tuple of int
        ``(1, 8, 8)``: one image, channel first. A request is (N, 1, 8, 8).
    dtype : numpy.dtype
        float32; integer and other float inputs are converted.
    output_shape : tuple of int
        ``(10,)``: the logits of one image (argmax is the digit).
    """

    sample_shape = (1, IMAGE_SIZE, IMAGE_SIZE)
    dtype = np.dtype(np.float32)
    output_shape = (_CLASSES,)

    def __init__(self, device, weights: dict, *, max_batch_size: int = 64, knobs=None):
        self.device = device
        self.max_batch_size = int(max_batch_size)
        self._weights = weights
        self._knobs = knobs
        self._stack: contextlib.AsyncExitStack | None = None
        self._stages: list = []
        self._names: list[str] = []
        self._logit_bias = None

    async def __aenter__(self) -> "DigitsModel":
        import hipdnn_async as hd

        from . import _graphs
        from ._model import Network

        net = Network(self.device, knobs=self._knobs)
        for group in ("params", "running"):
            for k, v in self._weights[group].items():
                np.copyto(getattr(net, group)[k], v)
        folded = await net.fold()
        self._logit_bias = folded.logit_bias
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            for i, f in enumerate(folded.layers):
                if f.op == "folded":
                    graph = _graphs.conv_bias_act(f.layer, self.max_batch_size, net.sizes[i])
                    constants = {"w": f.w, "bias": f.bias}
                else:
                    graph = _graphs.conv_fprop(f.layer, self.max_batch_size, net.sizes[i])
                    constants = {"w": f.w}
                # max_delay_ms=0: the caller (a Serve replica, a Ray Data batch) has
                # already formed the batch; waiting here would only add latency per layer.
                batcher = hd.DynamicBatcher(
                    self.device, graph, inputs=["x"], outputs=["y"], constants=constants,
                    max_batch_size=self.max_batch_size, max_delay_ms=0.0, buckets="pow2",
                    knobs=self._knobs)
                self._stages.append(await stack.enter_async_context(batcher))
                self._names.append(f.layer.name)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    async def warmup(self) -> None:
        """Build every bucket's plan of every layer (1, 2, 4, ..., max_batch_size)."""
        for batcher in self._stages:
            await batcher.warmup()

    def normalise(self, images) -> np.ndarray:
        """Raw pixel values (0..16) to the network's float32 input (the demo's ``prep``)."""
        x = np.asarray(images, np.float64)
        return ((x - self._weights["pixel_mean"]) / self._weights["pixel_std"]).astype(
            np.float32)

    async def __call__(self, images) -> np.ndarray:
        """Logits of a batch of raw digit images.

        Parameters
        ----------
        images : array_like
            Dims (N, 1, 8, 8), pixel intensities 0..16 as in scikit-learn's
            ``load_digits().images``; any integer or float dtype.

        Returns
        -------
        numpy.ndarray
            Logits, float32, dims (N, 10).

        Raises
        ------
        hipdnn_async.VariantPackError
            `images` is not (N, 1, 8, 8) with N >= 1.
        hipdnn_async.DeviceError
            The model is not open (use ``async with``).
        """
        import hipdnn_async as hd
        if self._stack is None:
            raise hd.DeviceError("DigitsModel: not open; use 'async with model:'")
        raw = np.asarray(images)
        if raw.dtype.kind not in "iuf" or raw.ndim != 4 or raw.shape[1:] != self.sample_shape \
                or len(raw) < 1:
            raise hd.VariantPackError(f"DigitsModel: images need dims (N, 1, 8, 8) with "
                                      f"N >= 1, ints or floats; got {raw.dtype} {raw.shape}")
        h = self.normalise(raw)
        for batcher in self._stages:
            h = await batcher(h)
        logits = h.reshape(len(h), _CLASSES)
        return logits if self._logit_bias is None else logits + self._logit_bias

    def metrics(self) -> dict:
        """Each layer's ``DynamicBatcher.metrics()``, by layer name."""
        return {name: b.metrics() for name, b in zip(self._names, self._stages)}


class DigitsFactory:
    """Picklable model factory: ``await factory(dev)`` is a ``DigitsModel`` on `dev`.

    Carries the weights themselves (about 40 KB), not the path, so a replica on another
    node needs no copy of the file.
    """

    def __init__(self, weights: dict, *, max_batch_size: int = 64, knobs=None):
        self.weights = weights
        self.max_batch_size = int(max_batch_size)
        self.knobs = knobs

    async def __call__(self, device) -> DigitsModel:
        return DigitsModel(device, self.weights, max_batch_size=self.max_batch_size,
                           knobs=self.knobs)

    def __repr__(self) -> str:
        return (f"digits_model({self.weights.get('path')!r}, "
                f"max_batch_size={self.max_batch_size})")


def digits_model(path: str, *, max_batch_size: int = 64, knobs=None) -> DigitsFactory:
    """The demo's trained digits CNN as a model factory for ``hipdnn_async.ray``.

    Parameters
    ----------
    path : str
        A file written by ``hipdnn-async demo --save FILE``; read and checked now.
    max_batch_size : int, optional
        Largest batch one plan runs (larger calls are split). Default 64.
    knobs : mapping, optional
        Knob settings for every plan build (e.g. ``{"global.benchmarking": 1}``).

    Returns
    -------
    DigitsFactory
        ``await factory(dev)`` gives a ``DigitsModel`` (enter it with ``async with``):
        raw images (N, 1, 8, 8), pixel values 0..16, to logits (N, 10) float32.

    Raises
    ------
    DemoError
        The file is missing, unreadable or not a saved digits model (see
        ``load_weights``).
    """
    if type(max_batch_size) is not int or max_batch_size < 1:
        raise DemoError(f"digits_model: max_batch_size={max_batch_size!r} must be an int >= 1")
    return DigitsFactory(load_weights(path), max_batch_size=max_batch_size, knobs=knobs)
