"""The per-sample results viewer (``rayeval view``): a local web page over a results root, or
the same page as a static folder.  Rows are read through :class:`rayeval.report.ResultsReader`
only; everything the agent wrote is shown as text under a strict Content-Security-Policy."""

from __future__ import annotations

from .data import NotFound, UnitQuery, ViewData
from .server import ViewServer
from .static import write_static

__all__ = ["NotFound", "UnitQuery", "ViewData", "ViewServer", "write_static"]
