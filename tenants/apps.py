from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Teams, projects and roles"

    def ready(self) -> None:
        from tenants import signals  # noqa: F401 — connects the audit and deactivation receivers
