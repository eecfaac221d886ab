"""`manage.py pop_demo` loads the demo data once; running it again changes nothing."""

from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command

from agendas.models import Agenda, AgendaProgress

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _test_settings(settings):
    settings.POP_FILL_NUDGE = "off"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _row_counts() -> dict[str, int]:
    return {
        model._meta.label: model._default_manager.count()
        for model in apps.get_models()
        if not model._meta.proxy
    }


def _run(token_file) -> str:
    out = StringIO()
    call_command("pop_demo", "--token-file", str(token_file), stdout=out)
    return out.getvalue()


def test_pop_demo_run_twice_is_idempotent(tmp_path):
    token_file = tmp_path / "demo" / "worker-token"

    first = _run(token_file)
    counts, token = _row_counts(), token_file.read_text()
    progress = sorted(AgendaProgress.objects.values_list("agenda_id", "state"))
    second = _run(token_file)

    assert "Demo data ready (16 new agendas)." in first
    assert "Demo data ready (0 new agendas)." in second
    assert counts["agendas.Agenda"] == 16
    assert counts["resourcepools.Customer"] == 4
    assert counts["agendas.AgendaTemplateVersion"] == counts["agendas.AgendaTemplate"] == 4
    from_templates = Agenda.objects.filter(template__isnull=False)
    assert from_templates.exists()
    assert not from_templates.filter(template_version__isnull=True).exists()
    assert _row_counts() == counts
    assert token_file.read_text() == token != ""
    assert sorted(AgendaProgress.objects.values_list("agenda_id", "state")) == progress
    assert "login: operator / " in second


def test_the_demo_keeps_work_moving_for_its_first_minutes(tmp_path):
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import Schedule

    _run(tmp_path / "token")

    pulse = Schedule.objects.get(name="demo-pulse-every-minute")
    assert (pulse.cron, pulse.state) == ("* * * * *", "active")
    assert timezone.now() < pulse.end_at <= timezone.now() + timedelta(minutes=10)
    long_jobs = AgendaProgress.objects.filter(agenda__labels__demo="long")
    assert long_jobs.count() == 3
    failing = AgendaProgress.objects.get(agenda__labels__demo="fails").agenda
    assert [op["type"] for op in failing.operations] == ["log", "mediainfo"]


def test_a_sample_clip_gets_one_transcode_and_package_agenda(tmp_path):
    sample = tmp_path / "media" / "sample.mp4"
    sample.parent.mkdir()
    sample.write_bytes(b"not really a clip: the worker would find out")
    out = StringIO()

    call_command(
        "pop_demo", "--token-file", str(tmp_path / "token"), "--sample-media", str(sample),
        stdout=out,
    )  # fmt: skip

    assert "Demo data ready (17 new agendas)." in out.getvalue()
    agenda = AgendaProgress.objects.get(agenda__template__name="transcode-and-package").agenda
    assert [operation["type"] for operation in agenda.operations] == [
        "mediainfo",
        "transcode",
        "thumbnail",
        "package",
    ]
    assert agenda.operations[0]["payload"] == {"input": str(sample)}
    assert agenda.operations[3]["payload"]["output_dir"] == str(
        tmp_path / "media" / "out" / "acme-sample" / "stream"
    )
