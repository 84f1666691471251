"""An eval's data: staging it into a unit's work folder from the machine's cache, fetching it
(``s3://``, ``http(s)://``) and the resolvers of other URI schemes.

Exports load on first use (see rayeval._lazy).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:  # the exports (see rayeval._lazy)
    from .resolvers import Resolved, register_resolver, unregister_resolver
    from .staging import StagedNode, StagingError, stage_data

__getattr__, __all__ = lazy_exports(__name__)
