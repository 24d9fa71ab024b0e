"""The fleet settings pages under /manage/: a list, an edit and a delete route per section."""

from __future__ import annotations

from django.urls import URLPattern, path

from portal import manage
from scheduling.views.mig_plan import mig_plan_page


def _section_routes(section: manage.Section) -> list[URLPattern]:
    given = {"section": section}
    return [
        path(f"{section.slug}/", manage.section_list, given, name=section.list_route),
        path(f"{section.slug}/<int:pk>/", manage.section_edit, given, name=section.edit_route),
        path(
            f"{section.slug}/<int:pk>/delete/",
            manage.section_delete,
            given,
            name=section.delete_route,
        ),
    ]


urlpatterns = [
    path("", manage.index, name="manage"),
    *(route for section in manage.SECTIONS.values() for route in _section_routes(section)),
    path("reclaim-policies/", manage.reclaim_policies, name="manage-reclaim-policies"),
    path(
        "reclaim-policies/<int:pk>/",
        manage.reclaim_policy_edit,
        name="manage-reclaim-policy-edit",
    ),
    path("mig-plan/", mig_plan_page, name="manage-mig-plan"),
]
