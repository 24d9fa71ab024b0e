"""Writes of the tenants app, by sub-domain.

- `organisation`: teams, projects and memberships, the audit trail and the helpers every app's
  services use to check a role, apply validated changes and record them;
- `identity`: accounts and memberships that follow the identity provider's groups;
- `tokens`: personal API tokens with a name and a last-used time;
- `notifications`: the portal's inbox;
- `notification_settings`: each user's choice of topics per channel, and their own webhook;
- `webhooks`: the webhooks every notice is sent to, and the payload of each format.

Import each name from the module that defines it.
"""
