from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Teams, projects and roles"

    def ready(self) -> None:
        from django.db import models
        from rest_framework import serializers

        from tenants import signals  # noqa: F401 — connects the audit and deactivation receivers
        from tenants.api.base import JsonBooleanField, JsonCharField, JsonSlugField

        # The API takes JSON's types as the schema says them: DRF's model serializers would also
        # take 0, 1 and "yes" for a boolean and a number for text.
        mapping = serializers.ModelSerializer.serializer_field_mapping
        mapping[models.BooleanField] = JsonBooleanField
        mapping[models.CharField] = mapping[models.TextField] = JsonCharField
        mapping[models.SlugField] = JsonSlugField
