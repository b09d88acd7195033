"""The snapshot format, pure: no I/O, no threads, nothing of the store.

``keys`` (object names, id checks), ``entries`` (a scan's rows, validated),
``manifest`` (a snapshot's content list and its hash), ``delta`` (a manifest
as a difference from another), ``archive`` (tars to and from a sandbox),
``blobs`` (the stored encoding, packs).
"""

from __future__ import annotations

__all__: list[str] = []
