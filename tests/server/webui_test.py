#!/usr/bin/env python3
"""Headless-Chromium test of the WebUI served by a running `anedvd serve`.

  ANEDVD_BASE_URL=http://127.0.0.1:PORT python tests/server/webui_test.py

Needs Debian's chromium + chromium-driver (/usr/bin/chromedriver) and the
`selenium` package. Loads the page, sends a message, checks streamed text
appears and the tokens/s line; then slows the stream down in the page (each
chunk delayed) to press Stop mid-reply and checks the reply stops growing and
is marked stopped; checks settings persist across a reload and a second turn
carries the history.
"""
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["ANEDVD_BASE_URL"]
DRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

SLOW_FETCH = """
const orig = window.fetch;
window.__requests = [];
window.fetch = async (url, init) => {
  if (init && init.body) window.__requests.push(JSON.parse(init.body));
  const resp = await orig(url, init);
  if (!String(url).includes('chat/completions')) return resp;
  const reader = resp.body.getReader();
  const slow = new ReadableStream({
    async pull(ctrl) {
      const { value, done } = await reader.read();
      if (done) { ctrl.close(); return; }
      await new Promise((r) => setTimeout(r, 150));
      ctrl.enqueue(value);
    },
    cancel() { reader.cancel(); },
  });
  return new Response(slow, { status: resp.status, headers: resp.headers });
};
"""


def main():
    opts = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]:
        opts.add_argument(a)
    if os.path.exists("/usr/bin/chromium"):
        opts.binary_location = "/usr/bin/chromium"
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    wait = WebDriverWait(d, 30)
    try:
        key = os.environ.get("ANEDVD_API_KEY")
        if key:
            d.get(BASE + "/health")
            d.execute_script("localStorage.setItem('anedvd.settings', JSON.stringify({api_key: arguments[0]}))", key)
        d.get(BASE + "/")
        assert d.title == "anedvd"
        wait.until(lambda d: "context" in d.find_element(By.ID, "model").text)

        # Settings persist in localStorage.
        d.find_element(By.ID, "toggle-settings").click()
        mt = d.find_element(By.ID, "max_tokens")
        mt.clear()
        mt.send_keys("12")
        d.execute_script("document.getElementById('max_tokens').dispatchEvent(new Event('change'))")
        d.refresh()
        assert d.find_element(By.ID, "max_tokens").get_attribute("value") == "12"

        # One streamed turn.
        d.find_element(By.ID, "input").send_keys("Hello there")
        d.find_element(By.ID, "send").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-state=done]"))
        reply = d.execute_script("return document.querySelector('.msg.assistant').textContent")
        stats = d.find_element(By.CSS_SELECTOR, ".stats").text
        assert reply, "no text streamed"
        assert " tokens" in stats and "finish:" in stats, stats

        # A second turn with a slowed stream; Stop mid-reply.
        d.execute_script(SLOW_FETCH)
        mt = d.find_element(By.ID, "max_tokens")
        d.execute_script("arguments[0].value = '200'", mt)
        d.find_element(By.ID, "input").send_keys("Tell me more")
        d.find_element(By.ID, "send").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 2
                   and d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[1].text)
        assert not d.find_element(By.ID, "stop").get_property("disabled")
        d.find_element(By.ID, "stop").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[1].get_attribute("data-state") == "done")
        partial = d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[1].text
        time.sleep(1.0)
        assert d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[1].text == partial, "text grew after Stop"
        assert "stopped" in d.find_elements(By.CSS_SELECTOR, ".stats")[1].text
        assert d.find_element(By.ID, "stop").get_property("disabled")
        # The second request carried the first turn as history.
        msgs = d.execute_script("return window.__requests[window.__requests.length - 1].messages")
        roles = [m["role"] for m in msgs]
        assert roles[-3:] == ["user", "assistant", "user"], roles
        assert msgs[-2]["content"] == reply
        print("webui: ok (streamed, stop, history, settings)")
    finally:
        d.quit()


if __name__ == "__main__":
    sys.exit(main())
