"""The web inbox end to end in headless Debian Chromium (chromedriver + selenium).

A real HTTP server (uvicorn, its own thread and event loop) serves the app with the inbox router,
a Service, a SqlStore on SQLite and a running Dispatcher; a FakeChat registered as ``slack`` and
the SuperPipeline sink pointed at a :class:`~tests.fakes.FakeWebhook` show the rewrite of the
Slack copy and the write-back. The four SuperPipeline examples are posted to ``/v1/events`` and
answered by clicking in the page. Screenshots go to ``test-output/`` (git-ignored) for review.

Needs ``apt-get install chromium chromium-driver``; without them the test fails and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from adapters.sources.superpipeline import CE_TYPE
from adapters.sources.superpipeline.sink import SuperPipelineSink
from adapters.web.identity import IdentityPolicy
from bot.app.config import ServerConfig
from bot.domain.disclosure import SHOWN_WHOLE
from bot.domain.model import Attempt, ElicitationKey, Identity, Status
from bot.domain.records import StoredElicitation
from store.sql import SqlStore
from tests.conftest import REPO, FakeClock
from tests.fakes import FakeChat, FakeWebhook
from tests.integration.web import EXAMPLES, SLACK, Rig, example, intake_elicitation, make_rig
from tests.showcase import DEPLOY_DECISIVE, deploy_elicitation, missing_words

T = TypeVar("T")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
OUTPUT = REPO / "test-output"
LIVE_WITHIN_S = 1.0
"""An answer given elsewhere must show on an open page within this."""
WAIT_S = 10.0
KEYS = {
    "options": ElicitationKey("superpipeline:eli_1a2b3c4d5e6f7081"),
    "free-text": ElicitationKey("superpipeline:eli_2b3c4d5e6f708192"),
    "no-options-no-question": ElicitationKey("superpipeline:eli_3c4d5e6f70819203"),
    "approval-request": ElicitationKey("superpipeline:apr_4d5e6f7081920314"),
}
ALICE = Identity(platform="slack", user="U0ALICE", display_name="Alice")


# --------------------------------------------------------------------------- the server


@contextlib.asynccontextmanager
async def serving(app: Any, sock: socket.socket) -> AsyncIterator[uvicorn.Server]:
    """``app`` served by uvicorn on ``sock`` in this event loop, until the block ends."""
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started and not task.done():  # noqa: ASYNC110 - a flag
        await asyncio.sleep(0.01)
    if task.done():
        await task  # it failed to start: its error
    try:
        yield server
    finally:
        server.should_exit = True
        await task


def loopback_socket() -> socket.socket:
    """A socket bound to a free port on 127.0.0.1."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class LiveServer:
    """The app on 127.0.0.1 in a thread of its own; ``call`` runs a coroutine on its loop."""

    def __init__(self, db_url: str, webhook: str, identity: IdentityPolicy | None) -> None:
        self.db_url = db_url
        self.webhook = webhook
        self.identity = identity
        self.clock = FakeClock()
        self.sock = loopback_socket()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.loop: asyncio.AbstractEventLoop | None = None
        self.rig: Rig | None = None
        self._server: uvicorn.Server | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="inbox-server", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by start()
            self._failed = exc
            self._ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        store = SqlStore.from_url(self.db_url)
        stop = asyncio.Event()
        async with httpx.AsyncClient() as http:
            self.rig = make_rig(
                store, self.clock, SuperPipelineSink(self.webhook, http), identity=self.identity
            )
            dispatcher = asyncio.create_task(self.rig.dispatcher.run(stop, idle_seconds=0.05))
            async with serving(self.rig.app, self.sock) as self._server:
                self._ready.set()
                while not self._server.should_exit:  # noqa: ASYNC110 - set by stop()
                    await asyncio.sleep(0.05)
            stop.set()
            self.rig.dispatcher.wake()
            await dispatcher
        await store.close()

    def start(self) -> LiveServer:
        self._thread.start()
        if not self._ready.wait(20) or self._failed is not None:
            raise RuntimeError(f"the inbox server did not start: {self._failed!r}")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=15)
        self.sock.close()

    def call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        assert self.loop is not None
        future: Future[T] = asyncio.run_coroutine_threadsafe(make(), self.loop)
        return future.result(timeout=WAIT_S)

    @property
    def chat(self) -> FakeChat:
        assert self.rig is not None
        return self.rig.chat

    def stored(self, key: ElicitationKey) -> StoredElicitation:
        assert self.rig is not None
        store = self.rig.store
        found = self.call(lambda: store.get(key))
        assert found is not None, key
        return found

    def answer_in_slack(self, key: ElicitationKey, option: str) -> None:
        assert self.rig is not None
        service = self.rig.service
        attempt = Attempt(shown=SHOWN_WHOLE, respondent=ALICE, option_ids=(option,), via=SLACK)
        outcome = self.call(lambda: service.answer(key, attempt))
        assert outcome.won, outcome

    def post_examples(self) -> None:
        for case in EXAMPLES:
            event = {
                "specversion": "1.0",
                "id": f"ce-{case}",
                "source": "https://superpipeline.example.org",
                "type": CE_TYPE,
                "subject": "evt.acme.superpipeline.elicitation.pending",
                "datacontenttype": "application/json",
                "data": example(case),
            }
            response = httpx.post(
                f"{self.url}/v1/events",
                json=event,
                headers={"Content-Type": "application/cloudevents+json"},
            )
            assert response.status_code == 202, response.text
            self.clock.advance(60)  # each one newer than the one before


@pytest.fixture
def webhook() -> Iterator[FakeWebhook]:
    with FakeWebhook() as hook:
        yield hook


@contextlib.contextmanager
def chromium(profile: Path) -> Iterator[WebDriver]:
    """Headless Chromium with its profile in ``profile``, quit afterwards."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            pytest.fail(f"{path} is missing: apt-get install -y chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument("--window-size=1200,900")
    driver = webdriver.Chrome(options=options, service=ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    with chromium(tmp_path / "chromium") as driver:
        yield driver


def as_user(driver: WebDriver, user: str) -> None:
    """The sign-in proxy's user header on every request the page makes (DevTools protocol)."""
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {"X-Forwarded-User": user}})


# --------------------------------------------------------------------------- page helpers


def wait_until(
    driver: WebDriver, check: Callable[[WebDriver], Any], timeout: float = WAIT_S
) -> Any:
    return WebDriverWait(
        driver, timeout, poll_frequency=0.05, ignored_exceptions=(StaleElementReferenceException,)
    ).until(check)


def card(driver: WebDriver, key: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f'[data-key="{key}"]')


def _keys(driver: WebDriver, selector: str) -> list[str]:
    """The data-key of each element, read in one script: a live refresh can replace the list
    between two WebDriver calls (a stale element), never within one script."""
    keys = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.dataset.key)", selector
    )
    return [str(k) for k in keys]


def pending_keys(driver: WebDriver) -> list[str]:
    return _keys(driver, "#pending article.card")


def history_keys(driver: WebDriver) -> list[str]:
    return _keys(driver, "#history li.row")


def click_option(driver: WebDriver, key: str, option: str) -> None:
    card(driver, key).find_element(By.CSS_SELECTOR, f'button[value="{option}"]').click()


def notice(driver: WebDriver, key: str) -> str:
    return card(driver, key).find_element(By.CSS_SELECTOR, ".notice").text


def answered_in_page(driver: WebDriver, key: str) -> Callable[[WebDriver], bool]:
    return lambda d: key in history_keys(d) and key not in pending_keys(d)


def screenshot(driver: WebDriver, name: str, width: int) -> Path:
    """The whole page at ``width`` CSS pixels."""
    driver.set_window_size(width, 900)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(width, min(height + 140, 8000))
    OUTPUT.mkdir(exist_ok=True)
    path = OUTPUT / name
    assert driver.save_screenshot(str(path))
    return path


def measure(driver: WebDriver, started: float, check: Callable[[WebDriver], Any]) -> float:
    wait_until(driver, check)
    return time.monotonic() - started


# --------------------------------------------------------------------------- the tests


@pytest.fixture
def server(sqlite_url: str, webhook: FakeWebhook) -> Iterator[LiveServer]:
    """The embedded default: the browser on this machine is the local admin."""
    live = LiveServer(sqlite_url, webhook.url, None).start()
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture
def proxied_server(sqlite_url: str, webhook: FakeWebhook) -> Iterator[LiveServer]:
    """Behind a sign-in proxy: alice is an admin, bob is not."""
    policy = IdentityPolicy(
        user_header="X-Forwarded-User",
        admins=frozenset({"alice"}),
        trusts=ServerConfig.model_validate({"trusted_proxies": ["127.0.0.1"]}).trusts,
    )
    live = LiveServer(sqlite_url, webhook.url, policy).start()
    try:
        yield live
    finally:
        live.stop()


@pytest.mark.slow
def test_the_four_examples_are_answered_in_a_real_browser(
    browser: WebDriver, server: LiveServer, webhook: FakeWebhook
) -> None:
    browser.get(server.url + "/")
    assert "Nothing is waiting for an answer." in browser.page_source

    # Posted while the page is open: they appear without a reload, newest first.
    server.post_examples()
    wait_until(browser, lambda d: len(pending_keys(d)) == len(EXAMPLES), timeout=3)
    assert pending_keys(browser) == [KEYS[case] for case in reversed(EXAMPLES)]
    approval = card(browser, KEYS["approval-request"]).text
    for shown in ("We shipped the decision envelope.", "@example", "sha256:4f2a0c1e"):
        assert shown in approval
    always = card(browser, KEYS["options"]).find_element(
        By.CSS_SELECTOR, 'button[value="allow_always"]'
    )
    assert "ADMIN ONLY" in always.text.upper()
    _screenshots(browser)

    _refused_over_the_limit_then_answered(browser, server, KEYS["free-text"])
    click_option(browser, KEYS["approval-request"], "allow_once")
    wait_until(browser, answered_in_page(browser, KEYS["approval-request"]))
    _answered_in_slack_shows_within_a_second(browser, server, KEYS["options"])
    quiet = KEYS["no-options-no-question"]
    card(browser, quiet).find_element(By.TAG_NAME, "textarea").send_keys("done")
    card(browser, quiet).find_element(By.CSS_SELECTOR, 'button[name="send"]').click()
    wait_until(browser, answered_in_page(browser, quiet))
    assert pending_keys(browser) == []
    screenshot(browser, "inbox-answered.png", 1200)

    # A message's link to a question the page no longer lists opens that question alone.
    browser.get(server.url + "/#superpipeline:eli_gone")
    wait_until(browser, lambda d: "?key=superpipeline%3Aeli_gone" in d.current_url)
    assert "No such elicitation." in browser.page_source
    browser.get(server.url + "/")

    _recorded_written_back_and_rewritten(browser, server, webhook)


def _screenshots(browser: WebDriver) -> None:
    """The inbox for a reviewer, on a desktop and on a phone (which must not scroll sideways)."""
    desktop = screenshot(browser, "inbox.png", 1200)
    phone = screenshot(browser, "inbox-phone.png", 390)
    assert desktop.stat().st_size > 10_000
    assert phone.stat().st_size > 10_000
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - window.innerWidth"
    )
    assert overflow <= 0, f"the phone layout scrolls sideways by {overflow}px"
    browser.set_window_size(1200, 1400)


def _refused_over_the_limit_then_answered(
    browser: WebDriver, server: LiveServer, key: ElicitationKey
) -> None:
    box = card(browser, key).find_element(By.TAG_NAME, "textarea")
    typed = "é" * 2001
    box.send_keys(typed)
    counter = card(browser, key).find_element(By.CSS_SELECTOR, ".counter")
    assert counter.text == "2,001 / 2,000"
    assert "over" in str(counter.get_attribute("class"))
    card(browser, key).find_element(By.CSS_SELECTOR, 'button[name="send"]').click()
    wait_until(browser, lambda d: "limit is 2,000" in notice(d, key))
    assert notice(browser, key) == "Your answer is 2,001 characters; the limit is 2,000."
    box = card(browser, key).find_element(By.TAG_NAME, "textarea")
    assert box.get_attribute("value") == typed
    assert server.stored(key).status is Status.PENDING
    box.clear()
    box.send_keys("base it on main")
    card(browser, key).find_element(By.CSS_SELECTOR, 'button[name="send"]').click()
    wait_until(browser, answered_in_page(browser, key))
    assert "Recorded:" in browser.find_element(By.ID, "flash").text


def _answered_in_slack_shows_within_a_second(
    browser: WebDriver, server: LiveServer, key: ElicitationKey
) -> None:
    started = time.monotonic()
    server.answer_in_slack(key, "deny")
    took = measure(browser, started, answered_in_page(browser, key))
    assert took < LIVE_WITHIN_S, f"the page showed the Slack answer after {took:.2f} s"
    row = card(browser, key).text
    assert "Alice" in row
    assert "via Slack" in row


def _recorded_written_back_and_rewritten(
    browser: WebDriver, server: LiveServer, webhook: FakeWebhook
) -> None:
    """Each answer recorded once, written back once, and every Slack copy rewritten."""
    expected = {
        KEYS["free-text"]: ("web:local", (), "base it on main"),
        KEYS["approval-request"]: ("web:local", ("allow_once",), None),
        KEYS["options"]: ("slack:U0ALICE", ("deny",), None),
        KEYS["no-options-no-question"]: ("web:local", (), "done"),
    }
    for key, (who, chosen, text) in expected.items():
        answer = server.stored(key).answer
        assert answer is not None
        assert (answer.respondent, answer.option_ids, answer.text) == (who, chosen, text)
    webhook.wait_for(lambda got: len(got) >= len(EXAMPLES))
    time.sleep(0.3)  # nothing more may follow
    hooks = webhook.recorded()
    assert sorted(h.body["elicitationId"] for h in hooks) == sorted(
        k.split(":", 1)[1] for k in KEYS.values()
    )
    via = {h.body["elicitationId"]: h.body["answeredVia"] for h in hooks}
    assert via["eli_1a2b3c4d5e6f7081"] == SLACK
    assert via["apr_4d5e6f7081920314"] == "web"
    wait_until(browser, lambda _: len(server.chat.updated) >= len(EXAMPLES))
    rewritten = {u.view.elicitation.key: u.view.status for u in server.chat.updated}
    assert rewritten == dict.fromkeys(KEYS.values(), Status.ANSWERED)
    assert len(server.chat.posted) == len(EXAMPLES)


def test_refusals_and_a_stale_click_in_a_real_browser(
    browser: WebDriver, proxied_server: LiveServer
) -> None:
    """Behind a sign-in proxy (the header set through the DevTools protocol): a non-admin's
    admin-only choice and the asker's own answer are refused with the typed text kept; a click on
    a page that missed an answer (scripts off, a plain form post) is told who answered."""
    server = proxied_server

    server.post_examples()
    options = KEYS["options"]
    free = KEYS["free-text"]

    as_user(browser, "bob")
    browser.get(server.url + "/")
    assert "bob" in browser.find_element(By.CSS_SELECTOR, ".top .me").text
    click_option(browser, options, "allow_always")
    wait_until(browser, lambda d: "Only a workspace admin" in notice(d, options))
    assert server.stored(options).status is Status.PENDING

    as_user(browser, "agt_9e8d7c6b5a493827")
    browser.get(server.url + "/")
    box = card(browser, free).find_element(By.TAG_NAME, "textarea")
    box.send_keys("approving my own work")
    card(browser, free).find_element(By.CSS_SELECTOR, 'button[name="send"]').click()
    wait_until(browser, lambda d: "You asked this question" in notice(d, free))
    box = card(browser, free).find_element(By.TAG_NAME, "textarea")
    assert box.get_attribute("value") == "approving my own work"

    # A stale page: no script, so no live update; Alice answers in Slack meanwhile.
    as_user(browser, "bob")
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    browser.get(server.url + "/")
    server.answer_in_slack(options, "deny")
    time.sleep(0.6)  # a scripted page would have updated by now
    click_option(browser, options, "allow_once")
    wait_until(browser, lambda d: "Already answered by Alice" in d.page_source)
    assert "(Deny)" in browser.page_source
    assert "via Slack" in browser.page_source
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})

    # The admin's choice of an admin-only option is recorded.
    as_user(browser, "alice")
    browser.get(server.url + "/")
    approval = KEYS["approval-request"]
    click_option(browser, approval, "allow_always")
    wait_until(browser, answered_in_page(browser, approval))
    answer = server.stored(approval).answer
    assert answer is not None
    assert (answer.respondent, answer.option_ids) == ("web:alice", ("allow_always",))
    stored = server.stored(options).answer
    assert stored is not None
    assert stored.respondent == "slack:U0ALICE"


def test_the_deploy_request_shows_everything_it_would_approve(
    browser: WebDriver, server: LiveServer
) -> None:
    """The web inbox is the reference the chat surfaces are tested against: the issue's handup
    deploy request shows its SQL, its diff and its command whole, with Approve offered."""
    e = deploy_elicitation(now=server.clock.now())

    async def post() -> ElicitationKey:
        assert server.rig is not None
        return await intake_elicitation(server.rig, e)

    key = server.call(post)
    browser.get(server.url + "/")
    wait_until(browser, lambda d: key in pending_keys(d), timeout=3)
    shown = card(browser, key).text
    for decisive in DEPLOY_DECISIVE:
        assert decisive.strip() in shown, decisive
    assert missing_words(shown, e) == []
    assert "**" not in shown  # the Markdown is rendered, not shown as markers
    approve = card(browser, key).find_element(By.CSS_SELECTOR, 'button[value="approve"]')
    assert approve.is_enabled()
    path = screenshot(browser, "inbox-deploy-request.png", 1200)
    assert path.stat().st_size > 10_000
