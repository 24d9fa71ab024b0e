from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Teams, projects and roles"

    def ready(self) -> None:
        from django.db import models
        from rest_framework import serializers

        from tenants import signals  # noqa: F401 — connects the audit and deactivation receivers
        from tenants.api.base import JsonBooleanField

        # The API's booleans take JSON's true and false only (DRF also takes 0, 1, "yes", ...).
        serializers.ModelSerializer.serializer_field_mapping[models.BooleanField] = JsonBooleanField
