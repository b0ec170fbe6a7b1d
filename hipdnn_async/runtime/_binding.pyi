"""Stubs of the submit path's binding cache (``src_pyx/_binding.pyx``): a binding of one
plan's variant pack, reused while the same buffers come again, compared in C."""
from typing import Any, Callable

__all__: list[str]

CACHE_SIZE: int
HOST_CACHE_BYTES: int

class Binding:
    """One bound variant pack of one plan."""

    keys: tuple
    refs: tuple | None
    checks: tuple | None
    prints: tuple | None
    descrs: tuple | None
    n: int
    plain: bool
    fresh_ws: bool
    recipe: tuple | None
    template: Callable[[], None] | None
    buffers: dict
    workspace: Any
    fn: Callable[[], Any]
    ws_obj: Any
    ws_print: Any

    @property
    def cacheable(self) -> bool:
        """Whether it may be reused (its buffers can be fingerprinted)."""

class BindingCache:
    """The last few bindings of one plan, most recent first."""

    enabled: bool
    host: bool
    hits: int
    misses: int

    def __init__(self, bind: Callable[[Any, Any], tuple], make_fn: Callable[[dict, Any], Any],
                 *, enabled: bool, host: bool = False,
                 take_workspace: Callable[[], Any] | None = None) -> None:
        """A cache over ``bind`` (the full binding) and ``make_fn`` (the work item)."""
    def get(self, variant_pack: Any, workspace: Any) -> Binding:
        """The binding of ``variant_pack`` / ``workspace``, cached or new."""
    def lookup(self, variant_pack: Any, workspace: Any) -> Binding:
        """``get`` (C callers call this directly)."""
    def clear(self) -> None:
        """Drop every cached binding."""
