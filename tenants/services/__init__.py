"""Writes of the tenants app, by sub-domain.

- `organisation`: teams, projects and memberships, the audit trail and the helpers every app's
  services use to check a role, apply validated changes and record them;
- `identity`: accounts and memberships that follow the identity provider's groups;
- `tokens`: personal API tokens with a name and a last-used time;
- `notifications`: the portal's inbox;
- `notification_settings`: each user's choice of topics per channel, and their own webhook;
- `webhooks`: the webhooks every notice is sent to, and the payload of each format.

The organisation's services are re-exported here, so `tenants.services.record_audit_event` is
the name other apps use.
"""

from tenants.services.organisation import (
    DEMO_USERS,
    add_membership,
    apply_changes,
    audit_value,
    change_membership,
    create_project,
    create_team,
    delete_project,
    delete_team,
    delete_unused,
    known_fields,
    record_audit_event,
    remove_membership,
    require_platform_admin,
    save_valid,
    seed_demo_organisation,
    update_project,
    update_team,
    validation_error,
)

__all__ = [
    "DEMO_USERS",
    "add_membership",
    "apply_changes",
    "audit_value",
    "change_membership",
    "create_project",
    "create_team",
    "delete_project",
    "delete_team",
    "delete_unused",
    "known_fields",
    "record_audit_event",
    "remove_membership",
    "require_platform_admin",
    "save_valid",
    "seed_demo_organisation",
    "update_project",
    "update_team",
    "validation_error",
]
