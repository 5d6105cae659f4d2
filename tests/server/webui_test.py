#!/usr/bin/env python3
"""Headless-Chromium test of the WebUI served by a running `anedvd serve`.

  ANEDVD_BASE_URL=http://127.0.0.1:PORT python tests/server/webui_test.py
  WEBUI_SCREENSHOTS=docs/webui ...   # also save screenshots there

Needs Debian's chromium + chromium-driver (/usr/bin/chromedriver) and the
`selenium` package.

Against the real server: settings persist across a reload; a streamed turn
shows text and its stats (tokens, tok/s, context use); a second turn through a
slowed stream is stopped mid-reply (the text stops growing, the reply is
marked stopped) and carried the first turn as history.

With window.fetch stubbed in the page to answer chat requests with a scripted
SSE stream (the tiny test model's text is random): markdown rendering
(headings, emphasis, lists, links, a fenced code block with a language label
and highlight spans), copy buttons (message and code block), an XSS battery
in model output that must not run or leave live elements, regenerate and edit
re-sending the right messages, JSON mode and the other sampling settings in the
request body, and conversations saved in localStorage: listed, renamed,
switched and deleted, across reloads.
"""
import json
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["ANEDVD_BASE_URL"]
DRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = os.environ.get("WEBUI_SCREENSHOTS")

# Records chat request bodies in window.__requests. Chat requests are
# answered from window.__fake (a queue of reply texts) as an SSE stream in
# small chunks, with a usage chunk, when it is not empty; otherwise they go to
# the server, each chunk delayed by window.__slow ms.
FETCH_STUB = """
if (!window.__stubbed) {
  window.__stubbed = true;
  const orig = window.fetch;
  window.__requests = [];
  window.__fake = [];
  window.__slow = 0;
  window.fetch = async (url, init) => {
    if (!String(url).includes('chat/completions')) return orig(url, init);
    window.__requests.push(JSON.parse(init.body));
    if (window.__fake.length) {
      const text = window.__fake.shift();
      const pieces = text.match(/[\\s\\S]{1,7}/g) || [];
      const enc = new TextEncoder();
      const ev = (o) => enc.encode('data: ' + JSON.stringify(o) + '\\n\\n');
      const chunk = (delta, finish) => ({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }], usage: null });
      const events = [ev(chunk({ role: 'assistant', content: '' }, null))]
        .concat(pieces.map((p) => ev(chunk({ content: p }, null))))
        .concat([ev(chunk({}, 'stop')),
                 ev({ object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 20, completion_tokens: pieces.length, total_tokens: 20 + pieces.length } }),
                 enc.encode('data: [DONE]\\n\\n')]);
      const signal = init.signal;
      const body = new ReadableStream({
        async pull(ctrl) {
          await new Promise((r) => setTimeout(r, window.__fakeDelay || 5));
          if (signal && signal.aborted) { ctrl.error(new DOMException('aborted', 'AbortError')); return; }
          if (!events.length) { ctrl.close(); return; }
          ctrl.enqueue(events.shift());
        },
      });
      return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
    }
    const resp = await orig(url, init);
    const reader = resp.body.getReader();
    const slow = new ReadableStream({
      async pull(ctrl) {
        const { value, done } = await reader.read();
        if (done) { ctrl.close(); return; }
        await new Promise((r) => setTimeout(r, window.__slow));
        ctrl.enqueue(value);
      },
      cancel(r) { return reader.cancel(r).catch(() => {}); },
    });
    return new Response(slow, { status: resp.status, headers: resp.headers });
  };
  // Clipboard writes are captured (headless Chromium may refuse them).
  window.__copied = [];
  try {
    Object.defineProperty(navigator, 'clipboard', { configurable: true,
      value: { writeText: async (t) => { window.__copied.push(t); } } });
  } catch (e) {}
}
"""

MARKDOWN_REPLY = """## Reversing a list

Here is **one way** to do it, with *slicing* and `[::-1]`:

```python
def reverse(xs):
    # a new list, the input is unchanged
    return xs[::-1]  # 42
```

- it works on any sequence
- see [the docs](https://docs.python.org/3/library/stdtypes.html)

> Tip: `reversed()` gives an iterator.

| way | copies |
|-----|--------|
| slicing | yes |
"""

XSS_REPLY = """Payloads: <img src=x onerror="window.__xss='img'"> and <script>window.__xss='script'</script>
<a href="javascript:window.__xss='a'">raw link</a> [md link](javascript:window.__xss='md') [md2]( JaVaScRiPt:window.__xss='md2')
[data](data:text/html,<script>window.__xss='data'</script>) <iframe src="javascript:window.__xss='iframe'"></iframe>
<svg onload="window.__xss='svg'"></svg>

```html
<img src=x onerror="window.__xss='code'">
```
"""


def main():
    opts = webdriver.ChromeOptions()
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1100,760"]:
        opts.add_argument(a)
    if os.path.exists("/usr/bin/chromium"):
        opts.binary_location = "/usr/bin/chromium"
    d = webdriver.Chrome(service=Service(DRIVER), options=opts)
    d.set_window_size(1100, 820)
    wait = WebDriverWait(d, 30, ignored_exceptions=(StaleElementReferenceException,))
    css = lambda sel: d.find_elements(By.CSS_SELECTOR, sel)
    js = d.execute_script

    def shot(name):
        if SHOTS:
            os.makedirs(SHOTS, exist_ok=True)
            time.sleep(0.3)
            d.save_screenshot(os.path.join(SHOTS, name))

    def convs():
        return json.loads(js("return localStorage.getItem('anedvd.conversations') || '[]'"))

    def idle():
        wait.until(lambda d: js("return document.getElementById('send').disabled") is False
                   and not css(".msg.assistant[data-state=streaming]"))

    def send(text, fake=None):
        if fake is not None:
            js("window.__fake.push(arguments[0])", fake)
        n = len(js("return window.__requests || []"))
        box = d.find_element(By.ID, "input")
        box.send_keys(text)
        d.find_element(By.ID, "send").click()
        wait.until(lambda d: len(js("return window.__requests || []")) > n)
        idle()
        return js("return window.__requests[window.__requests.length - 1]")

    def last_assistant():
        return css(".msg.assistant")[-1]

    try:
        key = os.environ.get("ANEDVD_API_KEY")
        d.get(BASE + "/health")
        d.execute_script("localStorage.clear()")
        if key:
            d.execute_script("localStorage.setItem('anedvd.settings', JSON.stringify({api_key: arguments[0]}))", key)
        d.get(BASE + "/")
        assert d.title == "anedvd"
        wait.until(lambda d: "context" in d.find_element(By.ID, "model").text)
        assert "No saved conversations" in d.find_element(By.ID, "conversations").text

        # Settings persist in localStorage.
        d.find_element(By.ID, "toggle-settings").click()
        mt = d.find_element(By.ID, "max_tokens")
        mt.clear()
        mt.send_keys("12")
        d.execute_script("document.getElementById('max_tokens').dispatchEvent(new Event('change'))")
        d.find_element(By.ID, "top_k").send_keys("40")
        d.find_element(By.ID, "stop_strings").send_keys("STOP1\nSTOP2")
        d.refresh()
        assert d.find_element(By.ID, "max_tokens").get_attribute("value") == "12"
        assert d.find_element(By.ID, "top_k").get_attribute("value") == "40"
        assert d.find_element(By.ID, "stop_strings").get_attribute("value") == "STOP1\nSTOP2"
        # The server's defaults show as placeholders (from GET /props).
        wait.until(lambda d: d.find_element(By.ID, "min_p").get_attribute("placeholder"))
        js(FETCH_STUB)

        # One streamed turn against the model.
        req = send("Hello there")
        assert req["max_tokens"] == 12 and req["top_k"] == 40 and req["stop"] == ["STOP1", "STOP2"], req
        assert req["stream_options"] == {"include_usage": True}, req
        assert "response_format" not in req and "seed" not in req, req
        msg = last_assistant()
        assert msg.get_attribute("data-state") == "done"
        reply = convs()[0]["messages"][1]["content"]
        assert reply and msg.find_element(By.CSS_SELECTOR, ".body").text, "no text streamed"
        stats = msg.find_element(By.CSS_SELECTOR, ".stats").text
        assert " tokens" in stats and "finish:" in stats, stats
        n_tok = int(stats.split(" tokens")[0].split()[-1])
        assert n_tok <= 1 or "tok/s" in stats, stats  # a rate needs two tokens
        assert "context " in stats and "/" in stats, stats  # prompt+completion vs n_ctx
        assert css(".msg.assistant .ctxbar")

        # A second turn with a slowed stream; Stop mid-reply.
        js("window.__slow = 150")
        d.execute_script("arguments[0].value = '200'", d.find_element(By.ID, "max_tokens"))
        d.find_element(By.ID, "input").send_keys("Tell me more")
        d.find_element(By.ID, "send").click()
        wait.until(lambda d: js("const m = document.querySelectorAll('.msg.assistant .body')[1]; return !!(m && m.textContent)"))
        assert not d.find_element(By.ID, "stop").get_property("disabled")
        d.find_element(By.ID, "stop").click()
        wait.until(lambda d: js("return document.querySelectorAll('.msg.assistant')[1].dataset.state") == "done")
        partial = css(".msg.assistant .body")[1].text
        time.sleep(1.0)
        assert css(".msg.assistant .body")[1].text == partial, "text grew after Stop"
        assert "stopped" in css(".msg.assistant .stats")[1].text
        assert d.find_element(By.ID, "stop").get_property("disabled")
        js("window.__slow = 0")
        # The second request carried the first turn as history.
        msgs = js("return window.__requests[window.__requests.length - 1].messages")
        roles = [m["role"] for m in msgs]
        assert roles[-3:] == ["user", "assistant", "user"], roles
        assert msgs[-2]["content"] == reply
        print("webui: streamed, stats, stop, history, settings ok")

        # --- scripted replies from here on ---
        d.find_element(By.ID, "new-chat").click()
        assert not css(".msg")
        assert len(css("#conversations .conv")) == 1
        # Slowed, to see the code block rendered (and highlighted) mid-stream.
        js("window.__fakeDelay = 40; window.__fake.push(arguments[0])", MARKDOWN_REPLY)
        d.find_element(By.ID, "input").send_keys("How do I reverse a list in Python?")
        d.find_element(By.ID, "send").click()
        wait.until(lambda d: css(".msg.assistant[data-state=streaming] pre code span.tok-kw"))
        assert "tok/s" in last_assistant().find_element(By.CSS_SELECTOR, ".stats").text
        idle()
        js("window.__fakeDelay = 0")
        body = last_assistant().find_element(By.CSS_SELECTOR, ".body")
        assert body.find_element(By.CSS_SELECTOR, "h2").text == "Reversing a list"
        assert body.find_element(By.CSS_SELECTOR, "p strong").text == "one way"
        assert body.find_element(By.CSS_SELECTOR, "p em").text == "slicing"
        assert body.find_element(By.CSS_SELECTOR, "p code").text == "[::-1]"
        assert len(body.find_elements(By.CSS_SELECTOR, "ul > li")) == 2
        assert body.find_element(By.CSS_SELECTOR, "blockquote code").text == "reversed()"
        assert body.find_element(By.CSS_SELECTOR, "table td").text == "slicing"
        a = body.find_element(By.CSS_SELECTOR, "li a")
        assert a.get_attribute("href") == "https://docs.python.org/3/library/stdtypes.html"
        assert set(a.get_attribute("rel").split()) >= {"noopener", "noreferrer"}
        assert body.find_element(By.CSS_SELECTOR, ".codeblock .lang").text == "python"
        code = body.find_element(By.CSS_SELECTOR, "pre > code")
        assert code.text.startswith("def reverse(xs):")
        kinds = {s.get_attribute("class"): s.text for s in code.find_elements(By.CSS_SELECTOR, "span")}
        assert kinds.get("tok-kw") in ("def", "return") and "tok-com" in kinds and "tok-num" in kinds, kinds
        kws = [s.text for s in code.find_elements(By.CSS_SELECTOR, "span.tok-kw")]
        assert kws == ["def", "return"], kws
        stats = last_assistant().find_element(By.CSS_SELECTOR, ".stats").text
        n = (len(MARKDOWN_REPLY) + 6) // 7  # the stub streams 7-character pieces
        assert f"{n} tokens" in stats and "tok/s" in stats and "prompt 20" in stats, stats
        assert "context %d/" % (20 + n) in stats, stats
        shot("markdown.png")

        # Copy buttons: the code block's copies the code, the message's the markdown.
        body.find_element(By.CSS_SELECTOR, ".copy-code").click()
        wait.until(lambda d: js("return window.__copied.length") == 1)
        assert js("return window.__copied[0]").startswith("def reverse(xs):\n    # a new")
        last_assistant().find_element(By.CSS_SELECTOR, ".meta .copy").click()
        wait.until(lambda d: js("return window.__copied.length") == 2)
        assert js("return window.__copied[1]") == MARKDOWN_REPLY
        assert all(m.find_elements(By.CSS_SELECTOR, ".meta .copy") for m in css(".msg"))

        # XSS attempts in model output must not run nor become live elements.
        send("Show me some HTML", XSS_REPLY)
        time.sleep(0.5)
        assert js("return window.__xss") is None, js("return window.__xss")
        for sel in ["script", "img", "iframe", "svg", "[onerror]", "[onload]", "a[href^='javascript' i]", "a[href^='data' i]"]:
            assert not css(".msg " + sel), sel
        hrefs = [x.get_attribute("href") for x in css(".msg a")]
        assert all(h.startswith("http://") or h.startswith("https://") for h in hrefs), hrefs
        xbody = last_assistant().find_element(By.CSS_SELECTOR, ".body").text
        assert "<script>window.__xss='script'</script>" in xbody and "md link" in xbody, xbody
        print("webui: markdown, highlighting, copy, xss ok")

        # Regenerate: the same messages again, the old reply replaced.
        before = js("return window.__requests[window.__requests.length - 1].messages")
        js("window.__fake.push('A **second** answer.')")
        assert len(css(".msg .regen")) == 1
        n_req = len(js("return window.__requests"))
        last_assistant().find_element(By.CSS_SELECTOR, ".regen").click()
        wait.until(lambda d: len(js("return window.__requests")) > n_req)
        idle()
        again = js("return window.__requests[window.__requests.length - 1].messages")
        assert again == before, (again, before)
        assert last_assistant().find_element(By.CSS_SELECTOR, ".body strong").text == "second"
        assert len(css(".msg")) == 4
        stored = [c for c in convs() if c["title"].startswith("How do I reverse")][0]["messages"]
        assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
        assert stored[-1]["content"] == "A **second** answer."

        # Edit the first user message: re-runs from there, dropping what followed.
        css(".msg.user")[0].find_element(By.CSS_SELECTOR, ".edit").click()
        box = d.find_element(By.CSS_SELECTOR, ".msg.user .edit-box")
        box.clear()
        box.send_keys("How do I sort a list in Python?")
        js("window.__fake.push('Use `sorted(xs)`.')")
        n_req = len(js("return window.__requests"))
        d.find_element(By.CSS_SELECTOR, ".msg.user .edit-send").click()
        wait.until(lambda d: len(js("return window.__requests")) > n_req)
        idle()
        edited = js("return window.__requests[window.__requests.length - 1].messages")
        assert edited == [{"role": "user", "content": "How do I sort a list in Python?"}], edited
        assert len(css(".msg")) == 2
        assert last_assistant().find_element(By.CSS_SELECTOR, ".body code").text == "sorted(xs)"
        print("webui: regenerate, edit ok")

        # JSON mode and the other sampling settings reach the request.
        d.find_element(By.ID, "toggle-settings").click()
        d.find_element(By.ID, "json_mode").click()
        for k, v in [("seed", "7"), ("min_p", "0.05"), ("presence_penalty", "0.5"), ("frequency_penalty", "0.25"),
                     ("temperature", "0.3"), ("top_p", "0.9"), ("repetition_penalty", "1.1"), ("system", "Be brief.")]:
            el = d.find_element(By.ID, k)
            el.clear()
            el.send_keys(v)
        req = send("Answer in JSON", '{"answer": 42, "ok": true}')
        assert req["response_format"] == {"type": "json_object"}, req
        assert req["seed"] == 7 and req["min_p"] == 0.05 and req["presence_penalty"] == 0.5, req
        assert req["frequency_penalty"] == 0.25 and req["temperature"] == 0.3 and req["top_p"] == 0.9, req
        assert req["repetition_penalty"] == 1.1 and req["top_k"] == 40, req
        assert req["messages"][0] == {"role": "system", "content": "Be brief."}, req["messages"]
        # A JSON-mode reply that parses shows as a highlighted json block.
        jb = last_assistant().find_element(By.CSS_SELECTOR, ".body .codeblock")
        assert jb.find_element(By.CSS_SELECTOR, ".lang").text == "json"
        assert [k.text for k in jb.find_elements(By.CSS_SELECTOR, ".tok-key")] == ['"answer"', '"ok"']
        d.refresh()
        js(FETCH_STUB)
        assert d.find_element(By.ID, "json_mode").is_selected()
        assert d.find_element(By.ID, "seed").get_attribute("value") == "7"
        d.find_element(By.ID, "toggle-settings").click()
        shot("settings.png")
        d.find_element(By.ID, "json_mode").click()
        d.find_element(By.ID, "system").clear()
        d.find_element(By.ID, "toggle-settings").click()
        print("webui: json mode, sampling settings ok")

        # Conversations after the reload: both listed, the current one shown
        # with its stats; switch, rename, delete.
        rows = css("#conversations .conv")
        titles = [r.find_element(By.CSS_SELECTOR, ".title").text for r in rows]
        assert titles == ["How do I sort a list in Python?", "Hello there"], titles
        assert "active" in rows[0].get_attribute("class")
        assert css(".msg.user")[0].find_element(By.CSS_SELECTOR, ".body").text == "How do I sort a list in Python?"
        assert "tokens" in last_assistant().find_element(By.CSS_SELECTOR, ".stats").text
        # The conversation saved before the last turn, shown on a switch.
        rows[1].find_element(By.CSS_SELECTOR, ".title").click()
        wait.until(lambda d: "active" in css("#conversations .conv")[1].get_attribute("class"))
        assert [m.find_element(By.CSS_SELECTOR, ".body").text for m in css(".msg.user")] == ["Hello there", "Tell me more"]
        assert "stopped" in css(".msg.assistant .stats")[1].text
        assert css(".msg.assistant .body")[0].text
        # Rename the first one (a custom title is kept over the first message's).
        row = css("#conversations .conv")[0]
        js("arguments[0].querySelector('.rename').click()", row)
        ren = d.find_element(By.CSS_SELECTOR, "#conversations .rename-input")
        ren.send_keys(Keys.CONTROL, "a")
        ren.send_keys("Sorting lists" + Keys.ENTER)
        wait.until(lambda d: css("#conversations .conv .title")[0].text == "Sorting lists")
        d.refresh()
        js(FETCH_STUB)
        titles = [t.text for t in css("#conversations .conv .title")]
        assert titles == ["Sorting lists", "Hello there"], titles
        assert "active" in css("#conversations .conv")[1].get_attribute("class")
        assert css(".msg.user")[0].find_element(By.CSS_SELECTOR, ".body").text == "Hello there"
        css("#conversations .conv .title")[0].click()
        wait.until(lambda d: css(".msg.user") and css(".msg.user")[0].find_element(By.CSS_SELECTOR, ".body").text.startswith("How do I sort"))
        shot("sidebar.png")
        # A third conversation, then deleted.
        d.find_element(By.ID, "new-chat").click()
        send("Throwaway question", "Throwaway answer.")
        assert len(css("#conversations .conv")) == 3
        assert css("#conversations .conv .title")[0].text == "Throwaway question"
        js("arguments[0].querySelector('.delete').click()", css("#conversations .conv")[0])
        wait.until(lambda d: len(css("#conversations .conv")) == 2)
        assert not css(".msg")
        d.refresh()
        assert [t.text for t in css("#conversations .conv .title")] == ["Sorting lists", "Hello there"]
        assert len(convs()) == 2
        logs = [l for l in d.get_log("browser") if l.get("level") == "SEVERE" and "favicon" not in l["message"]]
        assert not logs, logs
        print("webui: conversations saved, listed, switched, renamed, deleted ok")
        print("webui: ok")
    finally:
        d.quit()


if __name__ == "__main__":
    sys.exit(main())
