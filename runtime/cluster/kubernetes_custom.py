"""One namespaced custom resource (an HTTPRoute, a ResourceClaimTemplate) through the client's
CustomObjectsApi, with the create / read / delete signatures of its typed APIs, so the backend's
create-or-adopt and delete paths treat it like a Service or a Job."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


def object_metadata(body: Any) -> Any:
    """A custom-objects answer (a dict) as an object with the `metadata` attributes read here."""
    meta = body.get("metadata", {}) if isinstance(body, dict) else {}
    return SimpleNamespace(
        metadata=SimpleNamespace(
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            labels=meta.get("labels") or {},
            annotations=meta.get("annotations") or {},
            deletion_timestamp=meta.get("deletionTimestamp"),
        )
    )


@dataclass(frozen=True)
class NamespacedCustomResource:
    api: Any  # kubernetes.client.CustomObjectsApi
    group: str
    version: str
    plural: str

    def create(self, namespace: str, body: dict[str, Any], **kwargs: Any) -> Any:
        return self.api.create_namespaced_custom_object(
            self.group, self.version, namespace, self.plural, body, **kwargs
        )

    def read(self, name: str, namespace: str, **kwargs: Any) -> Any:
        """The object as one with `metadata`, like the client's typed models."""
        return object_metadata(
            self.api.get_namespaced_custom_object(
                self.group, self.version, namespace, self.plural, name, **kwargs
            )
        )

    def delete(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return self.api.delete_namespaced_custom_object(
            self.group, self.version, namespace, self.plural, name, **kwargs
        )
