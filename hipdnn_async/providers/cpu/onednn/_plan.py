"""``OnednnPlan``: a prebuilt ``runtime._onednn.Program`` with its per-channel host work,
the submit path's launcher and constant weights reordered once."""
from __future__ import annotations

from functools import partial

import numpy as np

from ..._base import ProviderPlan
from ._conv import clip_hooks
from .. import _kernels
from ._program import ProgramSpec, dnnl, staged

__all__ = ["OnednnPlan"]

# compiled passes that never set NumPy's floating-point flags
_QUIET_KERNELS = (_kernels.bias_relu, _kernels.convert, _kernels.bn_rows)


class OnednnPlan(ProviderPlan):
    """A oneDNN plan: a prebuilt ``_onednn.Program`` over the pattern's roles, with
    per-channel host work before / after it where the pattern needs it (batchnorm
    statistics). ``launcher`` gives the submit path's C callable."""

    def __init__(self, match, program, spec, algorithm, *, hooks=None, conv=None, pd=None,
                 variant=None, workspace_size=None):
        self.match, self.program, self.roles = match, program, spec.roles
        self.algorithm = algorithm
        # more than the program's where a hook runs another program on it (a guarded
        # convolution's fallback, ``_conv.conv_hooks``)
        self.workspace_size = (program.workspace_size if workspace_size is None
                               else workspace_size)
        self._conv, self._pd, self._variant = conv, pd, variant
        self._frozen = None
        self._set_hooks(spec, hooks)

    def _set_hooks(self, spec, hooks) -> None:
        """``hooks`` (staged with ``spec``'s host copies), and whether the launches they
        go into may be copied onto another workspace: hooks marked ``reads_workspace =
        False`` and no staged copies (which read and write the workspace)."""
        self._hooks = staged(spec, hooks) if spec.host_copies else hooks
        self._hooks_read_ws = bool(spec.host_copies) or getattr(hooks, "reads_workspace",
                                                                 True)

    def _arrays(self, buffers) -> tuple:
        return tuple([buffers[r] for r in self.roles])

    def _host_work(self, buffers, workspace):
        """(before, after) of one execution, each run with NumPy's floating-point warnings
        off: IEEE results (inf, NaN) are the answer, as on a GPU, never warnings (which
        pytest's -W error, or a user's filter, would turn into exceptions on a worker)."""
        if not self._hooks:
            return None, None
        before, after = self._hooks(buffers, workspace)
        return (None if before is None else quiet(before),
                None if after is None else quiet(after))

    def run(self, buffers, workspace) -> None:
        before, after = self._host_work(buffers, workspace)
        if before is not None:
            before()
        program = self._frozen[1] if self._frozen is not None else self.program
        program.run(self._arrays(buffers), workspace)
        if after is not None:
            after()

    def launcher(self, buffers, workspace, *, counter=None, label=None):
        """The work-item function of one execution: a ``_onednn.Launch`` (a C callable that
        runs the program with the GIL released, counts itself in ``counter`` and names
        ``label`` in its errors)."""
        before, after = self._host_work(buffers, workspace)
        program = self._frozen[1] if self._frozen is not None else self.program
        return dnnl.Launch(program, self._arrays(buffers), workspace, counter, label,
                           before, after, hooks_read_ws=self._hooks_read_ws)

    def reorder_constants(self, buffers) -> bool:
        """Reorder constant weights once into the layout the convolution reads, so later
        executions skip the per-execution reorder (fprop, fprop + bias + ReLU, dgrad).

        Parameters
        ----------
        buffers : mapping
            Role -> bound buffer of the constant inputs; only ``"w"`` (logical dims (K,
            C/groups, ...), the tensor's strides) is used. Its values are read now; later
            changes to it are not seen until this is called again.

        Returns
        -------
        bool
            True when the plan now reads the reordered copy; False where there is nothing
            to reorder (wgrad, or weights already in the layout the implementation reads).
        """
        if self._conv is None or buffers.get(self._conv.roles.w) is None:
            return False
        weights = buffers[self._conv.roles.w]
        w_md = self._conv.weights_layout(self._pd)
        if w_md is None:
            return False
        blocked = np.empty(w_md.size, np.uint8)
        spec = ProgramSpec(["w"])
        src = spec.array("w", self._conv.w_user)
        spec.mems.append((w_md, dnnl.MEM_OWNED, blocked))
        spec.step(dnnl.reorder(self._conv.w_user, w_md), [(dnnl.ARG_SRC, src),
                                                          (dnnl.ARG_DST, len(spec.mems) - 1)])
        once = spec.program()
        ws = np.empty(once.workspace_size, np.uint8) if once.workspace_size else None
        once.run((weights,), ws)
        program, spec = self._conv.program(self._pd, frozen_w=blocked, variant=self._variant)
        self._set_hooks(spec, clip_hooks(self._conv, self._pd))
        self._frozen = (blocked, program)
        self.workspace_size = program.workspace_size
        return True


def quiet(fn):
    """``fn`` run with NumPy's floating-point warnings off; a compiled kernel
    (``_QUIET_KERNELS`` in a ``functools.partial``) or a hook marked ``compiled_only``
    (it calls such kernels alone: the batchnorm rows) as it is: it raises none, and
    ``np.errstate`` costs about 1 us an execution."""
    if (isinstance(fn, partial) and fn.func in _QUIET_KERNELS) or getattr(fn, "compiled_only",
                                                                         False):
        return fn

    def quiet():
        with np.errstate(all="ignore"):
            fn()
    return quiet

