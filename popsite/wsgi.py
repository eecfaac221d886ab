"""The WSGI application, loaded once by every web worker (gunicorn imports it after forking).

Before the first request the worker loads its URL configuration (every view, serializer and
model it can reach), collects once and freezes what is left (`gc.freeze`): those objects live
as long as the process, and a full collection no longer walks them. Unfrozen, a web worker's
full collections walked ~125,000 objects and stopped every thread of the worker for 60–99 ms,
three or four times per 800 pull and report requests, which made the pull's p99; frozen, one
walks what requests created since and took 5–8 ms (docs/decisions.md, "Web workers freeze
their loaded heap").
"""

import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "popsite.settings")
application = get_wsgi_application()
get_resolver().url_patterns  # noqa: B018 — imports every view before the heap is frozen
gc.collect()
gc.freeze()
