"""The per-sample results viewer (``rayeval view``): a local web page over a results root, or
the same page as a static folder.  Rows are read through :class:`rayeval.report.ResultsReader`
only; everything the agent wrote is shown as text under a strict Content-Security-Policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .data import NotFound, UnitQuery, ViewData
    from .server import ViewServer
    from .static import write_static

# Exports load on first use: the main CLI registers ``rayeval view`` without reading pandas.
_EXPORTS = {
    "NotFound": ".data",
    "UnitQuery": ".data",
    "ViewData": ".data",
    "ViewServer": ".server",
    "write_static": ".static",
}

__all__ = ["NotFound", "UnitQuery", "ViewData", "ViewServer", "write_static"]

__getattr__ = lazy_exports(__name__, _EXPORTS)
