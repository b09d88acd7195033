"""Reads of a session's manifests: stored on their own, or carried by its pointer.

``ManifestReads`` is the part of ``Catalog`` that reads (and writes) single
manifests: a manifest is stored as its own object, or carried by the
session's pointer until it is folded out (see ``pointer``), and a difference
is read with its base, from either place. Every manifest read is validated
(``Manifest.from_json``), and a carried one is handed back with the carried
blobs it names, checked against their sizes.
"""

from __future__ import annotations

import dataclasses

from sandgrid.errors import NotFound
from sandgrid.wire.objects import keys
from sandgrid.wire.objects.base import ObjectStore
from worker.snapshots import pointer
from worker.snapshots.format.blobs import decode, encode
from worker.snapshots.format.entries import ManifestLimits
from worker.snapshots.format.manifest import MAX_MANIFEST_BYTES, Manifest, corrupt

__all__ = ["ManifestReads"]


class ManifestReads:
    """Reads and writes of single manifests over ``objects`` (``Catalog`` sets both)."""

    objects: ObjectStore
    limits: ManifestLimits

    def read_pointer(self, tenant: str, session_id: str) -> list[tuple[str, str]]:
        """The session's retained snapshots ``(name, hash)``, oldest first."""
        return pointer.read(self.objects, tenant, session_id).history

    def read_manifest(
        self, tenant: str, session_id: str, name: str, *, via_pointer: bool = False
    ) -> Manifest:
        """The manifest ``name`` of a session, validated (and its base, for a difference).

        Args:
            via_pointer: the pointer named it, so its absence is corruption, not
                ``NotFound``.

        Raises:
            NotFound: no such manifest (and not ``via_pointer``).
            SnapshotError: ``snapshot_corrupt``.
            InfrastructureError: ``store_unavailable``.
        """
        stored = self._stored_manifest(tenant, session_id, name)
        if stored is None:  # not folded out (yet): its pointer may carry it
            carried = pointer.read(self.objects, tenant, session_id).carried
            if carried is not None and name in carried.manifests:
                return self._from_carried(tenant, session_id, carried, name)
            stored = self._stored_manifest(tenant, session_id, name)  # folded meanwhile
        if stored is None:
            if via_pointer:
                raise corrupt(name, "the session's pointer names a missing manifest") from None
            raise NotFound(
                f"session {session_id} has no snapshot {name}",
                operation="snapshot.restore",
                context={"session": session_id, "snapshot": name},
            )
        try:
            data = decode(stored, limit=MAX_MANIFEST_BYTES)
        except ValueError as exc:
            raise corrupt(name, str(exc)) from None
        return self._parse(tenant, session_id, name, bytes(data))

    def read_latest(
        self, tenant: str, session_id: str, ptr: pointer.Pointer | None = None
    ) -> Manifest | None:
        """The session's latest manifest (None without a snapshot): the one its
        pointer carries, or the stored one it names.

        Args:
            ptr: the session's pointer, if the caller has just read it.

        Raises:
            SnapshotError: ``snapshot_corrupt``.
            InfrastructureError: ``store_unavailable``.
        """
        ptr = ptr or pointer.read(self.objects, tenant, session_id)
        if not ptr.history:
            return None
        name = ptr.history[-1][0]
        if ptr.carried is not None and name in ptr.carried.manifests:
            return self._from_carried(tenant, session_id, ptr.carried, name)
        return self.read_manifest(tenant, session_id, name, via_pointer=True)

    def _stored_manifest(self, tenant: str, session_id: str, name: str) -> bytes | None:
        try:
            return self.objects.get(keys.manifest_key(tenant, session_id, name))
        except KeyError:
            return None

    def _from_carried(
        self, tenant: str, session_id: str, carried: pointer.Carried, name: str
    ) -> Manifest:
        """A manifest the pointer carries, validated, with the carried blobs it names."""
        manifest = self._parse(tenant, session_id, name, carried.manifests[name], carried)
        blobs = {b: carried.blobs[b] for b in manifest.blobs if b in carried.blobs}
        for blob, data in blobs.items():
            if manifest.blobs[blob] != len(data):
                raise corrupt(name, f"the pointer carries blob {blob} of the wrong size")
        return dataclasses.replace(manifest, carried=blobs)

    def _parse(
        self,
        tenant: str,
        session_id: str,
        name: str,
        data: bytes,
        carried: pointer.Carried | None = None,
    ) -> Manifest:
        def load_base(base: str) -> Manifest:
            if carried is not None and base in carried.manifests:
                return self._from_carried(tenant, session_id, carried, base)
            try:
                return self.read_manifest(tenant, session_id, base)
            except NotFound:
                raise corrupt(name, f"its base {base} is missing") from None

        return Manifest.from_json(
            data,
            tenant=tenant,
            session_id=session_id,
            name=name,
            limits=self.limits,
            load_base=load_base,
        )

    def write_manifest(self, manifest: Manifest) -> None:
        """Store ``manifest`` (not yet a snapshot: the pointer makes it one)."""
        key = keys.manifest_key(manifest.tenant, manifest.session_id, manifest.name)
        self.objects.put(key, encode(manifest.to_json()))
