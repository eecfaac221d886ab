"""Demo data for `make run` (docs/deploy.md): idempotent, safe to load again."""

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts.models import ApiToken
from accounts.selectors import token_for_key
from accounts.services import token_issue
from agendas.models import Agenda, AgendaTemplate
from agendas.services import agenda_submit
from agendas.template_services import template_run, template_version_record
from core.principals import SYSTEM
from resourcepools.models import Customer, Insight, Membership, ResourcePool
from scheduling.models import Schedule

DEMO_PASSWORD = "pop-demo-password"
DEMO_WORKER_TOKEN_NAME = "demo-worker"
CUSTOMERS = [("acme", "Acme Media", 1), ("globex", "Globex Studios", 2), ("initech", "Initech", 1)]
MEDIA_TEMPLATE = {
    "operations": [
        {"name": "probe", "type": "log", "payload": {"message": "probing @<pop.payload::/url>"}},
        {
            "name": "transcode",
            "type": "sleep",
            "payload": {"seconds": "@<pop.payload::/seconds?2>", "source": "@<probe.out>"},
            "depends_on": ["probe"],
        },
        {
            "name": "package",
            "type": "log",
            "payload": {"message": "packaged", "input": "@<transcode.out>"},
        },
    ],
    "link_id": "@<pop.payload::/link_id?demo>",
}

# Real media work on the transcode insight's worker (ffprobe/ffmpeg): probe, a mezzanine
# transcode, a thumbnail and HLS + DASH packaging, all under the payload's `output_dir`.
PACKAGE_TEMPLATE = {
    "operations": [
        {"name": "probe", "type": "mediainfo", "payload": {"input": "@<pop.payload::/input>"}},
        {
            "name": "transcode",
            "type": "transcode",
            "payload": {
                "input": "@<pop.payload::/input>",
                "output": "@<pop.payload::/output_dir>/mezzanine.mp4",
                "height": 360,
                "video_codec": "libx264",
                "preset": "veryfast",
                "duration": "@<probe.out::/summary/duration>",
            },
        },
        {
            "name": "thumbnail",
            "type": "thumbnail",
            "payload": {
                "input": "@<transcode.out::/output>",
                "output": "@<pop.payload::/output_dir>/thumbnail.png",
                "at_seconds": 1,
                "width": 320,
            },
        },
        {
            "name": "package",
            "type": "package",
            "payload": {
                "input": "@<transcode.out::/output>",
                "output_dir": "@<pop.payload::/output_dir>/stream",
                "segment_seconds": 2,
                "renditions": [{"height": 360}, {"height": 180, "video_bitrate": "300k"}],
            },
        },
    ],
    "link_id": "@<pop.payload::/link_id?packaging>",
}
# A little work every minute for the demo's first minutes, so a first visit sees it moving.
PULSE_TEMPLATE = {
    "operations": [
        {"name": "tick", "type": "log", "payload": {"message": "pulse from the demo schedule"}},
        {
            "name": "work",
            "type": "sleep",
            "payload": {"seconds": "@<pop.payload::/seconds?20>"},
            "depends_on": ["tick"],
        },
    ],
    "link_id": "demo-pulse",
}
PULSE_MINUTES = 10
# Fails at its second operation (a probe of a file that is not there: a permanent failure,
# not retried), so the agenda page's rerun can be tried.
FAILING_OPERATIONS = [
    {"name": "announce", "type": "log", "payload": {"message": "about to probe a missing file"}},
    {
        "name": "probe",
        "type": "mediainfo",
        "payload": {"input": "/nonexistent/demo-missing.mp4"},
        "depends_on": ["announce"],
    },
]
PACKAGE_SCHEMA = {
    "type": "object",
    "required": ["input", "output_dir"],
    "properties": {
        "input": {"type": "string", "description": "A media file the worker can read."},
        "output_dir": {"type": "string", "description": "Where the worker writes the outputs."},
        "link_id": {"type": "string"},
    },
    "examples": [{"input": "run/media/sample.mp4", "output_dir": "run/media/out/example"}],
}


@dataclass
class DemoSummary:
    logins: list[tuple[str, str]] = field(default_factory=list)
    worker_token: str = ""
    agendas_created: int = 0


def _demo_worker_token(worker, previous: str) -> str:
    """The demo worker's key: `previous` while it still works, else a fresh one (the old
    demo tokens revoked). Keys are stored hashed, so a lost key cannot be shown again."""
    token = token_for_key(previous) if previous else None
    if token is not None and token.user_id == worker.pk:
        return previous
    ApiToken.objects.filter(user=worker, name=DEMO_WORKER_TOKEN_NAME).delete()
    return token_issue(
        principal=SYSTEM, user=worker, name=DEMO_WORKER_TOKEN_NAME, lifetime=None
    ).key


@transaction.atomic
def demo_load(worker_token: str = "", sample_media: str = "") -> DemoSummary:
    """Create the demo pool, insights, customers, users, templates, a schedule and agendas.

    `worker_token` is the demo worker's key from an earlier run, kept while it still works;
    `sample_media`, a clip on this machine, gets one real transcode-and-package agenda.
    """
    summary = DemoSummary()
    users = get_user_model()
    operator_customer, _ = Customer.objects.get_or_create(
        slug="farmco", defaults={"name": "FarmCo (pool operator)"}
    )
    pool, _ = ResourcePool.objects.get_or_create(
        name="farm", defaults={"owner": operator_customer, "description": "Demo media farm"}
    )
    Insight.objects.get_or_create(
        resource_pool=pool,
        name="mediainfo",
        defaults={
            "mappers": {"operation_type": ["mediainfo", "log"]},
            "order": 1,
            "is_global": True,
            "queue_size": 10,
            "lease_seconds": 30,
        },
    )
    Insight.objects.get_or_create(
        resource_pool=pool,
        name="transcode",
        defaults={
            "mappers": {"operation_type": ["transcode", "thumbnail", "sleep", "package"]},
            "order": 0,
            "is_global": True,
            "queue_size": 5,
            "lease_seconds": 30,
            "scheduling_algorithm": Insight.Algorithm.WEIGHTED_FAIR,
        },
    )
    operator, created = users.objects.get_or_create(
        username="operator", defaults={"is_staff": True, "is_superuser": True}
    )
    if created:
        operator.set_password(DEMO_PASSWORD)
        operator.save()
    summary.logins.append(("operator", DEMO_PASSWORD))
    worker, created = users.objects.get_or_create(username="farm-worker")
    if created:
        worker.set_unusable_password()
        worker.save()
    Membership.objects.get_or_create(
        user=worker, customer=operator_customer, defaults={"role": Membership.Role.WORKER}
    )
    summary.worker_token = _demo_worker_token(worker, worker_token)
    operator_customer.resource_pool = pool
    operator_customer.save(update_fields=["resource_pool"])
    for slug, name, weight in CUSTOMERS:
        customer, _ = Customer.objects.get_or_create(
            slug=slug,
            defaults={"name": name, "resource_pool": pool, "weight": weight},
        )
        user, created = users.objects.get_or_create(username=slug)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        Membership.objects.get_or_create(
            user=user, customer=customer, defaults={"role": Membership.Role.ADMIN}
        )
        summary.logins.append((slug, DEMO_PASSWORD))
    acme = Customer.objects.get(slug="acme")
    media, _ = AgendaTemplate.objects.get_or_create(
        customer=acme,
        name="probe-transcode-package",
        defaults={
            "description": "Probe a source, transcode it, package the result.",
            "agenda": MEDIA_TEMPLATE,
            "payload_schema": {
                "type": "object",
                "required": ["url"],
                "properties": {"url": {"type": "string"}, "seconds": {"type": "number"}},
            },
            "is_global": True,
        },
    )
    packaging, _ = AgendaTemplate.objects.get_or_create(
        customer=acme,
        name="transcode-and-package",
        defaults={
            "description": "Probe a clip, transcode it, take a thumbnail, package it for HLS "
            "and DASH (real ffmpeg on the transcode insight's worker).",
            "agenda": PACKAGE_TEMPLATE,
            "payload_schema": PACKAGE_SCHEMA,
            "is_global": True,
        },
    )
    log_only, _ = AgendaTemplate.objects.get_or_create(
        customer=acme,
        name="log-only",
        defaults={
            "description": "One log operation; the smallest agenda there is.",
            "agenda": {
                "operations": [{"name": "hello", "type": "log", "payload": "@<pop.payload>"}]
            },
        },
    )
    pulse, _ = AgendaTemplate.objects.get_or_create(
        customer=acme,
        name="demo-pulse",
        defaults={
            "description": "A log line and a short sleep: the demo's every-minute schedule.",
            "agenda": PULSE_TEMPLATE,
            "is_global": True,
        },
    )
    for template in (media, packaging, log_only, pulse):
        # Version 1 (none again when it is there): the demo's agendas name their version.
        template_version_record(principal=SYSTEM, template=template, note="demo")
    # Each load restarts the pulse for its first minutes (then the schedule expires).
    Schedule.objects.update_or_create(
        customer=acme,
        name="demo-pulse-every-minute",
        defaults={
            "template": pulse,
            "payload": {"seconds": 20},
            "cron": "* * * * *",
            "timezone": "UTC",
            "state": Schedule.State.ACTIVE,
            "end_at": timezone.now() + timedelta(minutes=PULSE_MINUTES),
            "next_run_at": None,
        },
    )
    Schedule.objects.get_or_create(
        customer=acme,
        name="nightly-probe",
        defaults={
            "template": media,
            "payload": {"url": "https://example.invalid/nightly.mp4", "seconds": 1},
            "cron": "0 2 * * *",
            "timezone": "Europe/Amsterdam",
        },
    )
    if not Agenda.objects.exists():
        for slug, _, _ in CUSTOMERS:
            customer = Customer.objects.get(slug=slug)
            for number in range(3):
                template_run(
                    principal=SYSTEM,
                    template=media,
                    customer=customer,
                    payload={"url": f"https://example.invalid/{slug}-{number}.mp4", "seconds": 1},
                    link_id=f"{slug}-demo",
                )
                summary.agendas_created += 1
            agenda_submit(
                principal=SYSTEM,
                customer=customer,
                operations=[{"name": "hello", "type": "log", "payload": {"message": "hi"}}],
                link_id=f"{slug}-demo",
            )
            summary.agendas_created += 1
        for (slug, _, _), seconds in zip(CUSTOMERS, (60, 90, 120), strict=True):
            agenda_submit(  # long enough to be seen executing on a first visit
                principal=SYSTEM,
                customer=Customer.objects.get(slug=slug),
                operations=[{"name": "long-job", "type": "sleep", "payload": {"seconds": seconds}}],
                link_id=f"{slug}-demo",
                labels={"demo": "long"},
            )
            summary.agendas_created += 1
        agenda_submit(
            principal=SYSTEM,
            customer=acme,
            operations=FAILING_OPERATIONS,
            link_id="acme-demo",
            labels={"demo": "fails"},
            max_attempts=2,
        )
        summary.agendas_created += 1
        if sample_media:
            output_dir = str(Path(sample_media).resolve().parent / "out" / "acme-sample")
            template_run(
                principal=SYSTEM,
                template=packaging,
                customer=acme,
                payload={"input": str(Path(sample_media).resolve()), "output_dir": output_dir},
            )
            summary.agendas_created += 1
    return summary
