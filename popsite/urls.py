from csp.decorators import csp_update
from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

# The API docs run third-party bundles (served from our static files by the sidecar): Swagger UI
# and ReDoc inject <style> elements and ReDoc starts a worker from a blob: URL. Their pages
# alone get that, and still no inline or foreign script: Swagger's settings come from the
# `?script` URL of the split view instead of an inline <script>.
_docs_csp = csp_update(
    {"style-src": ["'unsafe-inline'"], "worker-src": ["'self'", "blob:"], "img-src": ["blob:"]}
)

api_patterns = [
    path("", include("scheduling.api.puller_urls")),
    path("", include("popsite.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "docs/",
        _docs_csp(SpectacularSwaggerSplitView.as_view(url_name="schema")),
        name="swagger-ui",
    ),
    path("redoc/", _docs_csp(SpectacularRedocView.as_view(url_name="schema")), name="redoc"),
    path("redoc/", include("popsite.redoc")),  # the ReDoc bundle without its CDN logo
]

# An unhandled error: JSON on the API, 503 + Retry-After when the database is unreachable.
handler500 = "popsite.server_errors.server_error"

urlpatterns = [
    # Pages that are not ours (the admin, the API docs) still make browsers ask for this.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include(api_patterns)),
    path("", include("scheduling.observability")),  # /metrics, /healthz, /readyz
    path("", include("popsite.pages_urls")),
]
