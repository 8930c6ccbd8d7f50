"""The dashboard in headless Chromium: three nodes, a kill -9, and a node with a bearer token.

Usage: dashboard_test.py CONVOKE_BINARY SCREENSHOT_PATH
"""

import socket
import subprocess
import sys
import tempfile
import time

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

import nodes

BINARY, SCREENSHOT = sys.argv[1], sys.argv[2]


class Node(nodes.Node):
    """A `convoke run` process."""

    def __init__(self, sets):
        super().__init__([BINARY, "run"], sets)

    def join(self, address, token=None):
        args = [BINARY, "join", address, "--url", self.url] + (["--token", token] if token else [])
        subprocess.run(args, check=True, capture_output=True)


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def wait(driver, what, predicate, timeout=60):
    started = time.monotonic()
    try:
        WebDriverWait(driver, timeout, poll_frequency=0.1).until(lambda d: predicate(d))
    except WebDriverException as e:
        raise SystemExit(f"FAILED waiting for {what}: {e.__class__.__name__}") from e
    print(f"ok  {what} ({time.monotonic() - started:.1f} s)")


def rows(driver, selector):
    return driver.find_elements(By.CSS_SELECTOR, selector)


def click(driver, selector):
    """Clicks what `selector` finds. The page redraws its tables on every membership change, so
    the element may be replaced between finding and clicking it; a click on a replaced element
    does not happen, and the new one is found and clicked instead."""

    def attempt(d):
        try:
            d.find_element(By.CSS_SELECTOR, selector).click()
            return True
        except StaleElementReferenceException:
            return False

    WebDriverWait(driver, 10, poll_frequency=0.1).until(attempt)


def cluster_check(driver, data_dir):
    # Every node runs the replicated store, each on its own directory.
    def store(name):
        return ["data.enabled=true", f'data.dir="{data_dir}/{name}"']

    a = Node(["management.read_only=false"] + store("a"))
    a.join(a.address)
    b = Node([f'cluster.seed_nodes=["{a.address}"]'] + store("b"))
    c = Node([f'cluster.seed_nodes=["{a.address}"]', 'cluster.app_version="1.1.0"'] + store("c"))
    try:
        driver.get(a.url + "/dashboard")
        wait(driver, "three Up rows", lambda d: len(rows(d, '#members tbody tr[data-status="Up"]')) == 3)
        assert not driver.find_element(By.ID, "login").is_displayed(), "no token asked without auth"
        print("ok  no token asked for (no [management.auth])")
        wait(driver, "the store panel with three members on the ring", lambda d: "3 members on the ring" in d.find_element(By.ID, "data-figures").text)
        wait(driver, "an anti-entropy exchange with each of the two peers", lambda d: len(rows(d, "#anti-entropy tbody tr[data-peer]")) == 2)
        wait(driver, "the newer app version of the third node", lambda d: [e.text for e in rows(d, f'#members tr[data-node="{c.address}"] td.version')] == ["1.1.0"])
        print("ok  the third node's app version shown (1.1.0)")
        leaders = [e for e in rows(driver, "#members td.leader") if e.text.strip()]
        assert len(leaders) == 1, f"{len(leaders)} leader marks"
        print("ok  exactly one leader mark")
        wait(driver, "an event in the feed", lambda d: len(rows(d, "#events li[data-type]")) > 0)
        assert rows(driver, "#members button[data-operation=down]"), "write actions shown when writable"
        print("ok  leave and down buttons shown (management.read_only = false)")
        driver.save_screenshot(SCREENSHOT)
        print(f"ok  screenshot saved to {SCREENSHOT}")
        c.kill9()
        print(f"killed {c.address} with kill -9")
        victim = f'[data-node="{c.address}"]'
        wait(driver, "the killed node in the reachability grid", lambda d: len(rows(d, "#reachability tbody tr" + victim)) == 1)
        unreachable_shot = SCREENSHOT.replace(".png", "-unreachable.png")
        driver.save_screenshot(unreachable_shot)
        print(f"ok  screenshot of the grid saved to {unreachable_shot}")
        wait(driver, "the killed node gone from the members table", lambda d: not rows(d, "#members tbody tr" + victim))
        wait(driver, "two Up rows", lambda d: len(rows(d, '#members tbody tr[data-status="Up"]')) == 2)
        # A write action asks for confirmation naming the member, then shows the API's answer.
        click(driver, f'#members tr[data-node="{b.address}"] button[data-operation=leave]')
        alert = WebDriverWait(driver, 10).until(expected_conditions.alert_is_present())
        question = alert.text
        assert b.address in question, f"the confirmation names the member: {question!r}"
        alert.accept()
        print(f"ok  the confirmation names the member: {question!r}")
        wait(driver, "the API's answer to the leave", lambda d: f"200: Leaving {b.address}" in d.find_element(By.ID, "action-result").text)
        wait(driver, "the leaving member gone from the table", lambda d: not rows(d, f'#members tbody tr[data-node="{b.address}"]'))
        # The page says so when its node stops answering.
        a.kill9()
        wait(driver, "the page says the node stopped answering", lambda d: "not answering" in d.find_element(By.ID, "connection").text)
    finally:
        for n in (a, b, c):
            n.stop()


def bootstrap_check(driver):
    # A node whose only discovered contact point is someone else: it probes for ever, and the
    # bootstrap panel says why.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    port = silent.getsockname()[1]
    e = Node(
        [
            "bootstrap.enabled=true",
            'bootstrap.contact_point.probe_timeout="500ms"',
            'discovery.method="config"',
            f'discovery.config.services.convoke.endpoints=[{{host="127.0.0.1", port={port}}}]',
        ]
    )
    try:
        driver.get(e.url + "/dashboard")
        wait(driver, "the bootstrap panel", lambda d: d.find_element(By.ID, "bootstrap-panel").is_displayed())
        wait(driver, "the verdict and its reason", lambda d: "not found among the discovered targets" in d.find_element(By.ID, "bootstrap-verdict").text)
        wait(driver, "the contact point and its probe", lambda d: f"127.0.0.1:{port}" in d.find_element(By.ID, "contact-points").text)
        assert "stable for" in driver.find_element(By.ID, "bootstrap-stable").text
    finally:
        e.stop()
        silent.close()


def auth_check(driver):
    token = "dashboard-s3cret"
    d = Node([f'management.auth.bearer_tokens=["{token}"]', "management.read_only=false"])
    try:
        d.join(d.address, token)
        driver.get(d.url + "/dashboard")
        wait(driver, "the page asks for a token", lambda drv: drv.find_element(By.ID, "login").is_displayed())
        assert not driver.find_element(By.ID, "main").is_displayed(), "no data before the token"
        assert "token" not in driver.current_url
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait(driver, "the members after the token", lambda drv: len(rows(drv, '#members tbody tr[data-status="Up"]')) == 1)
        assert not driver.find_element(By.ID, "login").is_displayed(), "the token form is gone"
        assert token not in driver.current_url, "the token is never in the URL"
        print("ok  the token is not in the URL")
    finally:
        d.stop()


def main():
    driver = browser()
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            cluster_check(driver, data_dir)
        bootstrap_check(driver)
        auth_check(driver)
    finally:
        driver.quit()
    print("dashboard: all browser checks passed")


main()
