"""The main operator journeys in a real browser: Playwright driving Debian's Chromium.

Chromium comes from the `chromium` package (`/usr/bin/chromium`); nothing is downloaded.
Screenshots land in test-output/dashboard/ (git-ignored) for a human to look at.
"""

import json
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


# A 400-character message with a 120-character unbroken word, and a ffprobe-like result of
# several KB: what overflowed tables before (issue 21).
LONG_WORD = "s3://media-archive/" + "x" * 101
LONG_MESSAGE = (
    "transcoding finished with warnings: the source stream declared a variable frame rate "
    f"and was conformed; output written to {LONG_WORD} after two retries of the segment "
    "uploader; "
)
LONG_MESSAGE += "see diagnostics for the per-segment timings " * 6
LONG_MESSAGE = LONG_MESSAGE[:400]


def ffprobe_result() -> dict:
    stream = {
        "codec_name": "h264",
        "codec_long_name": "H.264 / AVC / MPEG-4 AVC / MPEG-4 part 10",
        "profile": "High",
        "width": 1920,
        "height": 1080,
        "pix_fmt": "yuv420p",
        "r_frame_rate": "25/1",
        "tags": {"handler_name": "VideoHandler " + "v" * 150, "language": "und"},
        "disposition": {"default": 1, "dub": 0, "original": 0, "comment": 0},
    }
    return {
        "streams": [{**stream, "index": index} for index in range(12)],
        "format": {
            "filename": LONG_WORD + "/clip.mp4",
            "format_long_name": "QuickTime / MOV",
            "duration": "5400.040000",
            "size": "5368709120",
            "bit_rate": "7953516",
        },
    }


@pytest.fixture
def long_story(farm):
    """The executing show-1 agenda, with a long message and a large JSON result reported."""
    progress = AgendaProgress.objects.get(state="executing", agenda__link_id="show-1")
    execution = progress.current_execution
    execution_report(
        execution_id=execution.pk,
        lease_token=execution.lease_token,
        message=LONG_MESSAGE,
        operations=[
            {
                "name": "probe",
                "state": "succeeded",
                "message": LONG_MESSAGE,
                "result": ffprobe_result(),
            }
        ],
    )
    assert len(json.dumps(ffprobe_result())) > 4000
    return progress.agenda


# Tables, badges and JSON boxes that do not fit: wider than their card (the table scrolls inside
# it), a badge taller than one line, a result box without its own scrollbars.
LAYOUT_PROBLEMS = """() => {
  const problems = [];
  for (const wrap of document.querySelectorAll(".table-wrap")) {
    const table = wrap.querySelector("table");
    if (!table || table.offsetWidth <= wrap.clientWidth + 1) continue;
    const columns = [...table.rows[0].cells].map((c) => `${c.textContent.trim()} ${c.offsetWidth}`);
    problems.push(`table ${table.id || "?"} is ${table.offsetWidth}px in a ${wrap.clientWidth}px`
      + ` card; columns: ${columns.join(", ")}`);
  }
  for (const badge of document.querySelectorAll(".badge")) {
    const style = getComputedStyle(badge);
    const oneLine = parseFloat(style.lineHeight) + parseFloat(style.paddingTop)
      + parseFloat(style.paddingBottom) + parseFloat(style.borderTopWidth)
      + parseFloat(style.borderBottomWidth);
    if (badge.offsetParent && badge.getBoundingClientRect().height > oneLine + 1)
      problems.push(`badge "${badge.textContent}" wraps`);
  }
  for (const pre of document.querySelectorAll("details[open] > pre")) {
    const style = getComputedStyle(pre);
    if (style.overflowX !== "auto" || style.maxHeight === "none")
      problems.push(`${pre.parentElement.textContent.slice(0, 20)} box does not scroll`);
  }
  return problems;
}"""


@pytest.mark.parametrize("width", [390, 1024, 1400, 1920])
def test_pages_fit_the_viewport(open_page, staff_user, long_story, width, admin_member):
    from scheduling.schedule_services import schedule_create
    from tests.factories import AgendaTemplateFactory

    template = AgendaTemplateFactory(customer=admin_member.customer, name="nightly-probe")
    schedule = schedule_create(
        principal=admin_member.user,
        customer=admin_member.customer,
        template=template,
        name="nightly",
        cron="0 2 * * *",
        payload={"url": "s3://x"},
    )
    page = open_page(staff_user.username, viewport={"width": width, "height": 900})
    for path, name in [
        ("/", "overview"),
        ("/agendas/", "agendas"),
        (f"/agendas/{long_story.pk}/", "agenda-detail"),
        ("/templates/", "templates"),
        (f"/templates/{template.pk}/", "template-detail"),
        ("/pools/", "pools"),
        ("/schedules/", "schedules"),
        (f"/schedules/{schedule.pk}/", "schedule-detail"),
        ("/progress/?link_id=show-1", "progress"),
        ("/audit/", "audit"),
    ]:
        page.goto(path)
        if name == "agenda-detail":
            # Every collapsible JSON box open: the widest the page gets.
            for summary in page.locator("#operations details > summary").all():
                summary.click()
            result = page.locator('#operations tr[data-operation="probe"] details pre')
            expect(result).to_be_visible()
            box = result.evaluate("pre => [pre.scrollHeight, pre.clientHeight]")
            assert box[0] > box[1], "a large result scrolls inside its own box"
        # The page itself never scrolls sideways; on a phone wide tables scroll in their card.
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{path} is {overflow}px wider than the {width}px viewport"
        if width >= 1024:
            assert page.evaluate(LAYOUT_PROBLEMS) == [], f"{path} at {width}px"
        screenshot(page, f"{name}-{width}")

    # Long messages are cut, with the whole text on hover.
    page.goto("/agendas/")
    message = page.locator(f'tr[data-agenda="{long_story.pk}"] [title]').filter(
        has_text="transcoding finished"
    )
    if width >= 1024:
        assert message.get_attribute("title") == LONG_MESSAGE
        assert message.evaluate("el => el.scrollHeight > el.clientHeight")  # cut, not wrapped
    page.goto(f"/agendas/{long_story.pk}/")
    message = page.locator('#operations tr[data-operation="probe"] [title]').filter(
        has_text="transcoding finished"
    )
    assert message.get_attribute("title") == LONG_MESSAGE


def test_submitter_aborts_every_matching_agenda_after_a_confirmation_and_watches_it_finish(
    open_page, submitter, submit_agenda
):
    from agendas.bulk_actions import agenda_action_jobs_run
    from agendas.models import AgendaActionJob

    batch = [submit_agenda(submitter, link_id="batch-b") for _ in range(4)]
    submit_agenda(submitter, link_id="not-this-one")
    page = open_page(submitter.user.username)
    page.goto("/agendas/?link_id=batch-b")

    page.get_by_label("all 4 matching").check()
    page.get_by_label("Action").select_option("abort")
    page.get_by_role("button", name="Apply…").click()
    expect(page.get_by_role("heading", name="Abort 4 agendas?")).to_be_visible()
    screenshot(page, "agendas-action-confirm-1280")
    page.get_by_role("button", name="Abort 4 agendas").click()

    expect(page.locator("#job-count")).to_have_text("0 of 4")
    agenda_action_jobs_run(job_id=AgendaActionJob.objects.get().pk)  # the cluster's part
    expect(page.locator("#job-count")).to_have_text("4 of 4", timeout=12_000)  # refreshed
    expect(page.locator("#job-status")).to_contain_text("done")
    expect(page.locator("#job-changed")).to_have_text("4")
    screenshot(page, "agendas-action-job-1280")
    assert {AgendaProgress.objects.get(agenda=agenda).state for agenda in batch} == {"aborted"}
    assert AgendaProgress.objects.filter(agenda__link_id="not-this-one", state="ready").exists()


def test_ticking_rows_and_the_page_box_selects_them_for_an_action(
    open_page, submitter, submit_agenda
):
    batch = [submit_agenda(submitter, link_id="tick") for _ in range(3)]
    page = open_page(submitter.user.username)
    page.goto("/agendas/?link_id=tick")

    page.get_by_label("Tick every agenda on this page").check()
    page.get_by_label(f"Tick agenda {str(batch[0].pk)[:8]}").uncheck()
    page.get_by_label("Action").select_option("pause")
    page.get_by_role("button", name="Apply…").click()

    expect(page.get_by_role("heading", name="Pause 2 agendas?")).to_be_visible()
    assert {AgendaProgress.objects.get(agenda=agenda).state for agenda in batch} == {"ready"}


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
    # ReDoc draws its footer logo from the server too (open_page fails on any outside request).
    page.goto("/api/v1/redoc/")
    expect(page.locator("#redoc-container, redoc").first).to_contain_text("POP", timeout=20_000)
    logo = page.locator('img[alt="redocly logo"]')
    expect(logo).to_have_count(1)
    assert logo.get_attribute("src").startswith("data:image/svg+xml,")
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(SCREENSHOTS / "redoc.png"))
