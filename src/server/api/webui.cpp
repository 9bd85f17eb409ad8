// The chat page: one self-contained HTML file (no external scripts, fonts or styles, so
// it works on a device without network). It keeps the conversation in the page, sends it
// to /v1/chat/completions with streaming, shows the reply as it arrives, stops it with
// the Stop button (the server notices the closed connection and stops generating), shows
// a thinking model's reasoning above its answer, and the speed from the final chunk's
// timings.
#include "server/api/webui.h"

#include "server/http/respond.h"

namespace edgellm::server {

namespace {

const char kPage[] = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>edgellm</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; display: flex; flex-direction: column;
         height: 100vh; background: #f6f6f4; color: #222; }
  header { padding: 8px 14px; background: #263238; color: #eceff1; display: flex;
           gap: 12px; align-items: center; font-size: 14px; }
  header b { font-size: 16px; }
  #model { opacity: .8; }
  #log { flex: 1; overflow-y: auto; padding: 14px; }
  .msg { max-width: 46em; margin: 0 auto 12px auto; padding: 10px 12px; border-radius: 8px;
         white-space: pre-wrap; line-height: 1.4; }
  .user { background: #dcedc8; }
  .assistant { background: #fff; border: 1px solid #ddd; }
  .error { background: #ffcdd2; }
  .thinking { max-width: 46em; margin: 0 auto 6px auto; padding: 6px 12px; font-size: 13px;
              color: #666; border-left: 3px solid #ccc; white-space: pre-wrap; }
  .stats { max-width: 46em; margin: -8px auto 12px auto; font-size: 12px; color: #777; }
  form { display: flex; gap: 8px; padding: 10px 14px; background: #fff; border-top: 1px solid #ddd; }
  textarea { flex: 1; font: inherit; padding: 8px; resize: none; height: 3.2em; }
  button { font: inherit; padding: 0 18px; }
  #key { width: 10em; }
</style>
</head>
<body>
<header><b>edgellm</b><span id="model"></span><span style="flex:1"></span>
  <label>API key <input id="key" type="password" autocomplete="off"></label>
  <button id="clear" type="button">New chat</button></header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<script>
"use strict";
const log = document.getElementById("log");
const input = document.getElementById("input");
const sendBtn = document.getElementById("send");
const stopBtn = document.getElementById("stop");
const keyInput = document.getElementById("key");
keyInput.value = localStorage.getItem("edgellm-key") || "";
keyInput.onchange = () => { localStorage.setItem("edgellm-key", keyInput.value); showModel(); };
let history = [];
let controller = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  if (keyInput.value) h["Authorization"] = "Bearer " + keyInput.value;
  return h;
}
function add(cls, text) {
  const d = document.createElement("div");
  d.className = "msg " + cls;
  d.textContent = text;
  log.appendChild(d);
  log.scrollTop = log.scrollHeight;
  return d;
}
function stats(text) {
  const d = document.createElement("div");
  d.className = "stats";
  d.textContent = text;
  log.appendChild(d);
}
// (the model list needs the key when the server has one: asked again once it is typed)
function showModel() {
  fetch("v1/models", { headers: headers() }).then(r => r.json()).then(j => {
    if (j.data && j.data[0]) document.getElementById("model").textContent = j.data[0].id;
  }).catch(() => {});
}
showModel();

async function send(text) {
  history.push({ role: "user", content: text });
  add("user", text);
  let think = null;  // a thinking model's reasoning, shown above the reply as it comes
  const out = add("assistant", "");
  out.id = "reply-" + history.length;
  controller = new AbortController();
  sendBtn.disabled = true;
  stopBtn.disabled = false;
  const t0 = performance.now();
  let first = 0, reply = "", timings = null;
  try {
    const r = await fetch("v1/chat/completions", {
      method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({ messages: history, stream: true })
    });
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error((j.error && j.error.message) || ("HTTP " + r.status));
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let at;
      while ((at = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, at);
        buf = buf.slice(at + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message);
        if (j.timings) timings = j.timings;
        const r = j.choices && j.choices[0] && j.choices[0].delta &&
                  j.choices[0].delta.reasoning_content;
        if (r) {
          if (!think) {
            think = document.createElement("div");
            think.className = "thinking";
            log.insertBefore(think, out);
          }
          think.textContent += r;
        }
        const c = j.choices && j.choices[0] && j.choices[0].delta && j.choices[0].delta.content;
        if (c) {
          if (!first) first = performance.now();
          reply += c;
          out.textContent = reply;
          log.scrollTop = log.scrollHeight;
        }
      }
    }
    history.push({ role: "assistant", content: reply });
    out.classList.add("done");
    if (timings)
      stats(timings.predicted_n + " tokens, " + timings.predicted_per_second.toFixed(1) +
            " tokens/s; first token after " + Math.round(first - t0) + " ms; prompt " +
            timings.prompt_n + " new + " + timings.cache_n + " cached tokens");
  } catch (e) {
    if (e.name === "AbortError") {
      history.push({ role: "assistant", content: reply });
      stats("stopped");
    } else {
      history.pop();
      out.remove();
      add("error", String(e.message || e));
    }
  } finally {
    controller = null;
    sendBtn.disabled = false;
    stopBtn.disabled = true;
  }
}

document.getElementById("form").onsubmit = ev => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text || controller) return;
  input.value = "";
  send(text);
};
input.onkeydown = ev => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    document.getElementById("form").requestSubmit();
  }
};
stopBtn.onclick = () => { if (controller) controller.abort(); };
document.getElementById("clear").onclick = () => {
  if (controller) controller.abort();
  history = [];
  log.textContent = "";
};
</script>
</body>
</html>
)HTML";

}  // namespace

const std::string& webui_html() {
    static const std::string page(kPage);
    return page;
}

Handler webui_handler(bool enabled) {
    return [enabled](Call& c) {
        if (!enabled)
            return respond_error(c.res, {404, "not_found_error", "the chat page is off (--no-webui)", {}});
        // A model's output is shown as text (textContent), never as HTML; and the page may
        // not be framed by another site (clickjacking), load nothing from elsewhere, nor talk
        // to any server but this one.
        c.res.send(200, "text/html; charset=utf-8", webui_html(),
                   {{"Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                                                "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
                                                "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
                    {"X-Frame-Options", "DENY"},
                    {"X-Content-Type-Options", "nosniff"},
                    {"Referrer-Policy", "no-referrer"}});
    };
}

}  // namespace edgellm::server
