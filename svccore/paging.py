"""Page sizes the service and ``svcctl`` agree on.

``FLEET_PAGE_MAX``: the most activated units one call of the fleet (``GET
/v1/admin/fleet``, the portal's fleet API, ``svcctl fleet --limit``) answers, and the
page the CSV export streams by. The service refuses a larger ``limit``; ``svcctl``
refuses it before asking. (How pages follow each other is :mod:`config.api.paging`'s.)
"""

from __future__ import annotations

FLEET_PAGE_MAX = 1000
