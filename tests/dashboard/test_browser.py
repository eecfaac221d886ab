"""The main operator journeys in a real browser: Playwright driving Debian's Chromium.

Chromium comes from the `chromium` package (`/usr/bin/chromium`); nothing is downloaded.
Screenshots land in test-output/dashboard/ (git-ignored) for a human to look at.
"""

import os
import re
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import playwright.sync_api as playwright_sync
import pytest
from django.utils import timezone

from agendas.models import AgendaProgress
from agendas.services import agenda_abort
from core.principals import SYSTEM
from scheduling.models import QueuedAgenda, ReadyAgenda
from scheduling.report import execution_report

expect = playwright_sync.expect
# CI must run these: there a missing browser is a failure, not a skip (.ci/run installs it).
IN_CI = os.environ.get("CI") == "true"

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-output" / "dashboard"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not CHROMIUM.exists() and not IN_CI, reason="needs Debian's chromium package"
    ),
]


@pytest.fixture(scope="module")
def browser():
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        yield browser
        browser.close()


REFUSED_BY_POLICY = {"https://cdn.redoc.ly/redoc/logo-mini.svg"}


@pytest.fixture
def open_page(browser, live_server):
    """A fresh browser context (no cookies) at the given viewport, logged in as `username`.

    Every request the pages make is recorded: none may leave the server (no CDN, no fonts).
    Every Content-Security-Policy violation the browser reports fails the test.
    """
    contexts = []
    outside: list[str] = []
    violations: list[str] = []
    server = urlsplit(live_server.url).netloc

    def record(request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.netloc != server:
            outside.append(request.url)

    def open_as(username: str, viewport: dict = DESKTOP):
        context = browser.new_context(viewport=viewport, base_url=live_server.url)
        context.on("request", record)
        watch_csp(context, violations)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(10_000)
        page.goto("/accounts/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill("secret-password")
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()
        return page

    yield open_as
    for context in contexts:
        context.close()
    # ReDoc's bundle always draws the Redocly logo from its CDN in the docs' footer; the
    # policy (img-src 'self' data: blob:) refuses it, so it never leaves the browser. It is
    # the one exception, and only when the browser reported refusing it.
    refused = [
        url for url in outside if url in REFUSED_BY_POLICY and any(url in v for v in violations)
    ]
    outside = [url for url in outside if url not in refused]
    violations = [v for v in violations if not any(url in v for url in refused)]
    assert outside == [], f"pages loaded assets from outside the server: {outside}"
    assert violations == [], f"Content-Security-Policy violations: {violations}"


def watch_csp(context, violations: list[str]) -> None:
    """Record the CSP violations of every page of `context`: Chromium's console errors
    ("Refused to execute inline script because it violates ... Content Security Policy") and
    the `securitypolicyviolation` events, which an init script (not subject to the CSP) logs."""
    context.add_init_script(
        "document.addEventListener('securitypolicyviolation', function (event) {"
        " console.error('CSP violation: ' + event.violatedDirective + ' ' + event.blockedURI);"
        " });"
    )

    def on_console(message) -> None:
        if "Content Security Policy" in message.text or "CSP violation" in message.text:
            violations.append(f"{message.page.url if message.page else '?'}: {message.text}")

    context.on("console", on_console)


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def number(page, selector: str) -> int:
    return int(page.locator(selector).inner_text().strip())


@pytest.fixture
def farm(submitter, other_submitter, agenda_in_state, submit_agenda):
    """Work in every column of the overview, for two customers."""
    agenda_in_state(submitter, "succeeded", worker="node-a")
    agenda_in_state(submitter, "failed", worker="node-a")
    agenda_in_state(other_submitter, "executing", worker="node-b")
    agenda_in_state(submitter, "executing", worker="node-a", link_id="show-1")
    agenda_in_state(submitter, "queued")
    ready = [
        submit_agenda(submitter, link_id="show-1", external_id=f"clip-{index}")
        for index in range(3)
    ]
    submit_agenda(other_submitter)
    return {"ready": ready}


def test_operator_logs_in_sees_true_numbers_opens_an_agenda_and_aborts_it(
    open_page, staff_user, farm, insight
):
    page = open_page(staff_user.username)

    hour_ago = timezone.now() - timedelta(hours=1)
    finished = AgendaProgress.objects.filter(completed_at__gte=hour_ago)
    row = page.locator(f'tr[data-insight="{insight.name}"]')
    assert number(row, '[data-metric="queued"]') == QueuedAgenda.objects.count() == 1
    assert number(row, '[data-metric="ready"]') == ReadyAgenda.objects.count() == 4
    assert number(row, '[data-metric="executing"]') == 2
    assert number(row, '[data-metric="executing"]') == (
        AgendaProgress.objects.filter(state__in=["executing"]).count()
    )
    assert number(row, '[data-metric="succeeded"]') == (
        finished.filter(state__in=["succeeded"]).count()
    )
    assert number(row, '[data-metric="failed"]') == finished.filter(state__in=["failed"]).count()
    assert number(page, '[data-total="throughput"]') == 2
    # Oldest waiting: the oldest ready or queued agenda, which the farm made seconds ago.
    waiting = row.locator('[data-metric="oldest_waiting"]').inner_text().strip()
    oldest = AgendaProgress.objects.filter(state__in=["ready", "queued"]).earliest(
        "agenda__created_at"
    )
    assert re.fullmatch(r"\d+ s", waiting), waiting
    assert (
        int(waiting.split()[0]) <= (timezone.now() - oldest.agenda.created_at).total_seconds() + 1
    )
    expect(page.locator("#share-chart g")).to_have_count(2)
    screenshot(page, "overview-1280")

    page.get_by_role("link", name="Agendas", exact=True).click()
    expect(page.get_by_role("heading", name="Agendas")).to_be_visible()
    screenshot(page, "agendas-1280")
    target = farm["ready"][0]
    page.locator(f'tr[data-agenda="{target.pk}"] a').first.click()
    expect(page.locator("h1")).to_contain_text(str(target.pk))
    expect(page.locator("#agenda-state")).to_contain_text("ready")
    expect(page.locator("#dag g.node")).to_have_count(2)
    screenshot(page, "agenda-detail-1280")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Abort").click()

    expect(page.locator(".messages")).to_contain_text("Agenda aborted.")
    expect(page.locator("#agenda-state")).to_contain_text("aborted")
    expect(page.get_by_role("button", name="Abort")).to_have_count(0)
    expect(page.get_by_role("button", name="Rerun")).to_be_visible()
    assert AgendaProgress.objects.get(agenda=target).state == "aborted"
    screenshot(page, "agenda-aborted-1280")


def test_operator_aborts_an_executing_agenda_and_the_worker_is_told(
    open_page, staff_user, farm, insight
):
    target = AgendaProgress.objects.get(state="executing", agenda__link_id="show-1")
    page = open_page(staff_user.username)
    page.goto(f"/agendas/{target.agenda_id}/")
    expect(page.locator("#agenda-state")).to_contain_text("executing")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Abort").click()

    expect(page.locator(".messages")).to_contain_text("Abort requested")
    expect(page.get_by_role("button", name="Abort")).to_have_count(0)
    target.refresh_from_db()
    assert target.state == "executing" and target.abort_requested
    execution = target.current_execution
    answer = execution_report(execution_id=execution.pk, lease_token=execution.lease_token)
    assert answer.abort is True
    screenshot(page, "agenda-abort-requested-1280")


def test_agenda_table_refresh_picks_up_a_change_made_behind_its_back(open_page, submitter, farm):
    page = open_page(submitter.user.username)
    page.goto("/agendas/?link_id=show-1")
    target = farm["ready"][1]
    badge = page.locator(f'tr[data-agenda="{target.pk}"] .badge')
    expect(badge).to_have_text("ready")
    page.evaluate("window.__noReload = true")

    agenda_abort(principal=SYSTEM, agenda=target)

    expect(badge).to_have_text("aborted", timeout=12_000)
    assert page.evaluate("window.__noReload") is True  # refreshed in place, not reloaded
    expect(page.get_by_label("Link id")).to_have_value("show-1")


def test_agenda_page_refresh_follows_the_state_until_it_is_final(open_page, submitter, farm):
    page = open_page(submitter.user.username)
    target = farm["ready"][2]
    page.goto(f"/agendas/{target.pk}/")
    expect(page.locator("#agenda-state")).to_contain_text("ready")

    agenda_abort(principal=SYSTEM, agenda=target)

    expect(page.locator("#agenda-state")).to_contain_text("aborted", timeout=12_000)


def test_customer_user_cannot_reach_another_customers_agenda(open_page, other_submitter, farm):
    page = open_page(other_submitter.user.username)
    foreign = farm["ready"][0]

    response = page.goto(f"/agendas/{foreign.pk}/")

    assert response.status == 404
    page.goto("/agendas/")
    expect(page.locator(f'tr[data-agenda="{foreign.pk}"]')).to_have_count(0)
    expect(page.locator("tr[data-agenda]")).to_have_count(2)


def test_anonymous_visitor_is_sent_to_login(browser, live_server):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()

    page.goto("/agendas/")

    assert re.search(r"/accounts/login/\?next=/agendas/$", page.url)
    expect(page.get_by_label("Username")).to_be_visible()
    context.close()


def test_submitter_runs_a_template_from_the_browser(open_page, submitter, insight):
    from tests.factories import AgendaTemplateFactory

    template = AgendaTemplateFactory(
        customer=submitter.customer,
        name="probe-one",
        payload_schema={"type": "object", "required": ["url"]},
    )
    page = open_page(submitter.user.username)
    page.goto(f"/templates/{template.pk}/")

    page.get_by_label("Payload (JSON)").fill("{}")
    page.get_by_role("button", name="Run").click()
    expect(page.locator("#run-form .errorlist")).to_contain_text("'url' is a required property")
    screenshot(page, "template-error-1280")

    page.get_by_label("Payload (JSON)").fill('{"url": "s3://in/clip.mp4"}')
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("#preview pre")).to_contain_text("s3://in/clip.mp4")
    page.get_by_role("button", name="Run").click()

    expect(page.locator(".messages")).to_contain_text("submitted.")
    expect(page.locator("#agenda-state")).to_contain_text("ready")


@pytest.mark.parametrize("viewport,suffix", [(PHONE, "390"), (DESKTOP, "1280")])
def test_pages_fit_the_viewport(open_page, staff_user, farm, viewport, suffix, admin_member):
    from scheduling.schedule_services import schedule_create
    from tests.factories import AgendaTemplateFactory

    template = AgendaTemplateFactory(customer=admin_member.customer, name="nightly-probe")
    schedule_create(
        principal=admin_member.user,
        customer=admin_member.customer,
        template=template,
        name="nightly",
        cron="0 2 * * *",
        payload={"url": "s3://x"},
    )
    page = open_page(staff_user.username, viewport=viewport)
    for path, name in [
        ("/", "overview"),
        ("/agendas/", "agendas"),
        (f"/agendas/{farm['ready'][0].pk}/", "agenda-detail"),
        (f"/templates/{template.pk}/", "template-detail"),
        ("/pools/", "pools"),
        ("/schedules/", "schedules"),
        ("/progress/?link_id=show-1", "progress"),
    ]:
        page.goto(path)
        # Wide tables scroll inside their own box; the page itself never scrolls sideways.
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} is {overflow}px wider than the {suffix}px viewport"
        screenshot(page, f"{name}-{suffix}")


def test_pages_admin_and_api_docs_run_under_the_content_security_policy(
    open_page, staff_user, farm
):
    page = open_page(staff_user.username)
    for path in ["/", "/agendas/", f"/agendas/{farm['ready'][0].pk}/", "/pools/", "/schedules/"]:
        response = page.goto(path)
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.wait_for_load_state("networkidle")
    page.goto("/admin/")
    expect(page.get_by_role("link", name="Agendas").first).to_be_visible()
    page.goto("/admin/agendas/agenda/")
    expect(page.locator("#result_list")).to_be_visible()
    page.locator("#action-toggle").check()  # the admin's own script selects every row
    expect(page.locator(".action-counter")).to_contain_text("selected")

    page.goto("/api/v1/docs/")  # Swagger UI: settings from the split view's ?script URL
    expect(page.locator("#swagger-ui .info .title")).to_contain_text("POP")
    page.goto("/api/v1/redoc/")
    expect(page.locator("#redoc-container, redoc").first).to_contain_text("POP", timeout=20_000)
    page.wait_for_load_state("networkidle")
