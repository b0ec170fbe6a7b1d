"""Writing a matplotlib figure to a file so that a failed write is an error."""
from __future__ import annotations

import io
import os

__all__ = ["save_figure"]


def save_figure(fig, path, *, dpi: int) -> None:
    """Write ``fig`` (a matplotlib ``Figure``) to ``path``, a file name (its suffix picks
    the format, as matplotlib's: PNG, SVG, PDF ...; PNG without one) or a writable binary
    file object.

    ``Figure.savefig`` given a file name returned without error when the write failed
    (matplotlib 3.11, to ``/dev/full``: the bytes were lost), so the figure is rendered
    into memory and written here, where a full disk raises.

    Raises
    ------
    OSError
        The file cannot be opened or written (no such folder, no permission, a full disk).
    ValueError
        The suffix names a format matplotlib cannot write; nothing is written then.
    """
    if hasattr(path, "write"):
        fig.savefig(path, dpi=dpi)
        return
    suffix = os.path.splitext(os.fspath(path))[1][1:].lower()
    buf = io.BytesIO()
    fig.savefig(buf, format=suffix or "png", dpi=dpi)
    with open(path, "wb") as f:
        f.write(buf.getbuffer())
