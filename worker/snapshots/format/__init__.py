"""The snapshot format, pure: no I/O, no threads, nothing of the store.

``entries`` (a scan's rows, validated), ``manifest`` (a snapshot's content
list and its hash), ``delta`` (a manifest as a difference from another),
``archive`` (tars to and from a sandbox), ``blobs`` (the stored encoding,
packs). Object names and id checks are the store's layout, shared with the
control plane: ``sandgrid.wire.objects.keys``.
"""

from __future__ import annotations

__all__: list[str] = []
