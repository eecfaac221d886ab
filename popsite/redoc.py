"""ReDoc's standalone bundle, served without its one request to the outside.

The sidecar's `redoc.standalone.js` always draws the Redocly logo in the docs' sidebar footer
from `https://cdn.redoc.ly/redoc/logo-mini.svg`, and no ReDoc option turns that footer off. The
API docs promise that nothing leaves the server, so this view serves the same bundle with that
one URL replaced by an inline (data:) image; templates/drf_spectacular/redoc.html loads it.
The bundle is patched once per process and answered with an ETag, gzipped when the browser
accepts it.
"""

import functools
import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified
from django.urls import path
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_safe

BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
LOGO_URL = "https://cdn.redoc.ly/redoc/logo-mini.svg"
# A small neutral document mark in place of the Redocly logo (the link text still names it).
# No double quotes: it goes inside a double-quoted JavaScript string.
LOGO_DATA_URI = (
    "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E"
    "%3Crect x='3' y='1.5' width='10' height='13' rx='1.5' fill='none' stroke='%23888'/%3E"
    "%3Cpath d='M5.5 5.5h5M5.5 8h5M5.5 10.5h3' stroke='%23888'/%3E%3C/svg%3E"
)


@dataclass(frozen=True)
class Bundle:
    body: bytes
    gzipped: bytes
    etag: str


@functools.cache
def patched_bundle() -> Bundle:
    found = finders.find(BUNDLE)
    if not found:
        raise ImproperlyConfigured(f"{BUNDLE} not found: is drf_spectacular_sidecar installed?")
    text = Path(found).read_text(encoding="utf-8")
    # A sidecar upgrade may move the logo; the browser test then sees the request leave.
    body = text.replace(LOGO_URL, LOGO_DATA_URI).encode("utf-8")
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    return Bundle(body=body, gzipped=gzip.compress(body, mtime=0), etag=etag)


@require_safe
def redoc_bundle(request: HttpRequest) -> HttpResponse:
    bundle = patched_bundle()
    if bundle.etag in request.headers.get("If-None-Match", ""):
        response = HttpResponseNotModified()
    elif "gzip" in request.headers.get("Accept-Encoding", ""):
        response = HttpResponse(bundle.gzipped, content_type="text/javascript; charset=utf-8")
        response["Content-Encoding"] = "gzip"
    else:
        response = HttpResponse(bundle.body, content_type="text/javascript; charset=utf-8")
    response["ETag"] = bundle.etag
    response["Cache-Control"] = "public, max-age=3600"
    patch_vary_headers(response, ["Accept-Encoding"])
    return response


urlpatterns = [path("redoc.standalone.js", redoc_bundle, name="redoc-bundle")]
