"""The audit table refuses UPDATE and DELETE in PostgreSQL itself, not only in the model.

`AuditEvent.save()`/`.delete()` already refuse, but a queryset `.update()`/`.delete()`, raw SQL
or a console bypasses the model. The one UPDATE allowed is the referential clean-up Django does
for `on_delete=SET_NULL` (actor, team, project set to NULL when that row is deleted): every
recorded fact stays as written. TRUNCATE stays possible for the table owner (test flushes,
a deliberate retention job). SQLite (the demo) has no such trigger.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from tenants.migration_operations import run_sql_on_postgresql

CREATE = """
CREATE OR REPLACE FUNCTION portal_audit_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'audit events are append-only: DELETE refused' USING ERRCODE = '42501';
    END IF;
    IF NEW.id = OLD.id
       AND NEW.occurred_at = OLD.occurred_at
       AND NEW.action = OLD.action
       AND NEW.target_type = OLD.target_type
       AND NEW.target_id = OLD.target_id
       AND NEW.message = OLD.message
       AND NEW.data::text = OLD.data::text
       AND (NEW.actor_id IS NOT DISTINCT FROM OLD.actor_id OR NEW.actor_id IS NULL)
       AND (NEW.team_id IS NOT DISTINCT FROM OLD.team_id OR NEW.team_id IS NULL)
       AND (NEW.project_id IS NOT DISTINCT FROM OLD.project_id OR NEW.project_id IS NULL)
    THEN
        RETURN NEW;  -- on_delete=SET_NULL clean-up only
    END IF;
    RAISE EXCEPTION 'audit events are append-only: UPDATE refused' USING ERRCODE = '42501';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER tenants_auditevent_append_only
    BEFORE UPDATE OR DELETE ON tenants_auditevent
    FOR EACH ROW EXECUTE FUNCTION portal_audit_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS tenants_auditevent_append_only ON tenants_auditevent;
DROP FUNCTION IF EXISTS portal_audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]

    operations = [run_sql_on_postgresql(CREATE, DROP)]
