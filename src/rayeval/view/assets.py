"""The page's files, shipped in the package (``page/``): no build step, nothing from a CDN."""

from __future__ import annotations

from functools import cache
from importlib import resources

#: The assets served under ``assets/`` (and copied by ``--static``), by exact name.
ASSETS: dict[str, str] = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# Scripts, styles and images from the page's own origin only; nothing inline, no plugins,
# no frames, no forms, no base tag; the API is the only place to connect to.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# The static folder's policy, as a <meta> tag (frame-ancestors is not allowed there).
STATIC_CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'"
)


@cache
def asset_bytes(name: str) -> bytes:
    """One packaged page file (``index.html`` or a name in :data:`ASSETS`)."""
    if name != "index.html" and name not in ASSETS:
        raise KeyError(name)
    return resources.files(__package__).joinpath("page").joinpath(name).read_bytes()


def index_html(*, static: bool) -> bytes:
    """The page for the server (data from its API) or for a static folder (data from
    ``data/*.js`` chunks, policy in a ``<meta>`` tag)."""
    text = asset_bytes("index.html").decode("utf-8")
    meta = f'<meta http-equiv="Content-Security-Policy" content="{STATIC_CONTENT_SECURITY_POLICY}">' if static else ""
    text = text.replace("<!--CSP-->", meta).replace(
        'data-source="SOURCE"', f'data-source="{"static" if static else "api"}"'
    )
    return text.encode("utf-8")


__all__ = [
    "ASSETS",
    "CONTENT_SECURITY_POLICY",
    "STATIC_CONTENT_SECURITY_POLICY",
    "asset_bytes",
    "index_html",
]
