"""The per-sample results viewer (``rayeval view``): a local web page over a results root, or
the same page as a static folder.  Rows are read through :class:`rayeval.report.ResultsReader`
only; everything the agent wrote is shown as text under a strict Content-Security-Policy.
Exports load on first use: the main CLI registers ``rayeval view`` without reading pandas."""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .data import NotFound, UnitQuery, ViewData
    from .server import ViewServer
    from .static import write_static

__getattr__, __all__ = lazy_exports(__name__)
