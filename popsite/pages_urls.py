"""Routes of the operator pages (the README's Web pages); every one requires login."""

from django.urls import path

from agendas import action_pages
from agendas import views as agenda_views
from audit import views as audit_views
from popsite import views
from scheduling import views as scheduling_views
from triggers import views as trigger_views

app_name = "pages"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("agendas/", agenda_views.agendas, name="agendas"),
    path("agendas/actions/", action_pages.agendas_act, name="agendas-act"),
    path(
        "agendas/actions/<uuid:job_id>/", action_pages.agenda_action_job, name="agenda-action-job"
    ),
    path("agendas/<uuid:agenda_id>/", agenda_views.agenda_detail, name="agenda-detail"),
    path(
        "agendas/<uuid:agenda_id>/<slug:action>/", agenda_views.agenda_action, name="agenda-action"
    ),
    path("templates/", agenda_views.templates, name="templates"),
    path("templates/<uuid:template_id>/", agenda_views.template_detail, name="template-detail"),
    path("pools/", scheduling_views.pools, name="pools"),
    path("schedules/", scheduling_views.schedules, name="schedules"),
    path("schedules/<uuid:schedule_id>/", scheduling_views.schedule_detail, name="schedule-detail"),
    path(
        "schedules/<uuid:schedule_id>/<slug:action>/",
        scheduling_views.schedule_action,
        name="schedule-action",
    ),
    path("triggers/", trigger_views.triggers, name="triggers"),
    path("triggers/<uuid:trigger_id>/", trigger_views.trigger_detail, name="trigger-detail"),
    path("progress/", agenda_views.progress, name="progress"),
    path("audit/", audit_views.event_list, name="audit"),
]
