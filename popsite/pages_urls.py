"""Routes of the operator pages (DESIGN §10); every one requires login."""

from django.urls import path

from audit import views as audit_views
from popsite import views

app_name = "pages"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("agendas/", views.agendas, name="agendas"),
    path("agendas/<uuid:agenda_id>/", views.agenda_detail, name="agenda-detail"),
    path("agendas/<uuid:agenda_id>/<slug:action>/", views.agenda_action, name="agenda-action"),
    path("templates/", views.templates, name="templates"),
    path("templates/<uuid:template_id>/", views.template_detail, name="template-detail"),
    path("pools/", views.pools, name="pools"),
    path("schedules/", views.schedules, name="schedules"),
    path("schedules/<uuid:schedule_id>/", views.schedule_detail, name="schedule-detail"),
    path(
        "schedules/<uuid:schedule_id>/<slug:action>/",
        views.schedule_action,
        name="schedule-action",
    ),
    path("progress/", views.progress, name="progress"),
    path("audit/", audit_views.event_list, name="audit"),
]
