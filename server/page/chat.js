/* cinder's chat page: one conversation view over the server's own /v1/chat/completions
 * (streaming). Conversations live in the browser's localStorage, nothing on the server. Model
 * output is untrusted: markdown goes through marked, then DOMPurify, before it meets the DOM;
 * reasoning, tool calls and every figure go in as text. Served with a Content-Security-Policy
 * that allows this script and the server's own API only (server/api_page.c). */
(function () {
  "use strict";
  const STORE = "cinder.chats", KEY = "cinder.key", SETTINGS = "cinder.settings";
  const $ = (id) => document.getElementById(id);
  let chats = load(STORE, []), current = null, inflight = null;

  function load(name, fallback) {
    try { const v = JSON.parse(localStorage.getItem(name)); return v === null ? fallback : v; }
    catch (e) { return fallback; }
  }
  function save() { localStorage.setItem(STORE, JSON.stringify(chats)); }
  function chat() { return chats.find((c) => c.id === current); }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  /* ---- the conversation list ---- */
  function newChat() {
    const c = {id: String(Date.now()) + Math.random().toString(16).slice(2, 6), title: "New chat", messages: []};
    chats.unshift(c);
    current = c.id;
    save();
    render();
  }
  function renderList() {
    const ul = $("chats");
    ul.replaceChildren();
    for (const c of chats) {
      const li = el("li", c.id === current ? "current" : "");
      li.dataset.id = c.id;
      li.append(el("span", "", c.title));
      const del = el("button", "delete", "×");
      del.type = "button";
      del.title = "Delete";
      del.addEventListener("click", (ev) => {
        ev.stopPropagation();
        chats = chats.filter((x) => x.id !== c.id);
        if (current === c.id) current = chats.length ? chats[0].id : null;
        save();
        if (!current) newChat(); else render();
    window.addEventListener("resize", renderChart);
      });
      li.append(del);
      li.addEventListener("click", () => { if (!inflight) { current = c.id; render(); } });
      ul.append(li);
    }
  }

  /* ---- messages ---- */
  function escapeHtml(t) {
    return t.replace(/[&<>"']/g, (ch) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[ch]);
  }
  /* markup in a reply is shown as the text it is (marked passes raw HTML through otherwise);
   * the sanitizer after it is the second wall, the page's policy the third */
  marked.use({renderer: {html(token) { return escapeHtml(token.text); }}});
  function markdown(text) {
    return DOMPurify.sanitize(marked.parse(text || "", {async: false}), {FORBID_TAGS: ["style", "form"]});
  }
  function statsLine(s) {
    if (!s) return "";
    const pct = s.prompt ? Math.round((100 * s.cached) / s.prompt) : 0;
    const tiers = s.host || s.disk ? `; ${s.host || 0} host, ${s.disk || 0} disk` : "";
    let t = `prompt ${s.prompt} tok · from cache ${s.cached} (${pct}%${tiers}) · TTFT ${s.ttft_ms.toFixed(0)} ms`;
    if (s.tok_s) t += ` · ${s.tok_s.toFixed(1)} tok/s`;
    return t + ` · ${s.completion} tok` + (s.finish ? ` · ${s.finish}` : "");
  }
  function messageView(m, i, last) {
    const box = el("div", "msg " + m.role);
    box.dataset.index = String(i);
    const who = el("div", "who");
    who.append(el("span", "", m.role === "user" ? "You" : "cinder"));
    if (m.role === "user") {
      const edit = el("button", "edit", "Edit");
      edit.type = "button";
      edit.addEventListener("click", () => startEdit(i));
      who.append(edit);
    } else if (last) {
      const again = el("button", "regenerate", "Regenerate");
      again.type = "button";
      again.addEventListener("click", regenerate);
      who.append(again);
    }
    box.append(who);
    if (m.reasoning) {
      const d = el("details", "reasoning");
      d.append(el("summary", "", "Thinking"), el("pre", "", m.reasoning));
      box.append(d);
    }
    const body = el("div", "body");
    if (m.role === "user") body.append(el("p", "", m.content));
    else body.innerHTML = markdown(m.content);
    box.append(body);
    if (m.tool_calls && m.tool_calls.length) {
      const calls = el("div", "calls");
      for (const t of m.tool_calls) calls.append(el("pre", "", `${t.function.name}(${t.function.arguments})`));
      box.append(calls);
    }
    if (m.error) box.append(el("div", "error", m.error));
    box.append(el("div", "stats", statsLine(m.stats)));
    return box;
  }
  function renderLog() {
    const c = chat(), log = $("log");
    log.replaceChildren();
    if (!c) return;
    c.messages.forEach((m, i) => log.append(messageView(m, i, i === c.messages.length - 1)));
    log.scrollTop = log.scrollHeight;
  }
  function renderChart() {
    const svg = $("ttft-chart"), ns = "http://www.w3.org/2000/svg", c = chat();
    svg.replaceChildren();
    const pts = c ? c.messages.filter((m) => m.stats).map((m) => m.stats.ttft_ms) : [];
    if (!pts.length) return;
    /* drawn at the box's own pixel size, so dots stay round at any width */
    const w = Math.max(svg.clientWidth, 100), h = Math.max(svg.clientHeight, 40), max = Math.max(...pts, 1);
    svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
    const step = pts.length > 1 ? (w - 20) / (pts.length - 1) : 0;
    const xy = pts.map((v, i) => [10 + i * step, h - 8 - ((h - 24) * v) / max]);
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", w - 4);
    label.setAttribute("y", h - 4);
    label.setAttribute("text-anchor", "end");
    label.textContent = `TTFT per turn (max ${max.toFixed(0)} ms)`;
    svg.append(label);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", xy.map((p) => p.join(",")).join(" "));
    svg.append(line);
    xy.forEach((p, i) => {
      const dot = document.createElementNS(ns, "circle");
      dot.setAttribute("cx", p[0]);
      dot.setAttribute("cy", p[1]);
      dot.setAttribute("r", 3);
      const tip = document.createElementNS(ns, "title");
      tip.textContent = `turn ${i + 1}: ${pts[i].toFixed(0)} ms`;
      dot.append(tip);
      svg.append(dot);
    });
  }
  function render() { renderList(); renderLog(); renderChart(); }

  /* ---- settings ---- */
  function settings() {
    return {system: $("system").value, temperature: parseFloat($("temperature").value),
            max_tokens: parseInt($("max-tokens").value, 10), thinking: $("thinking").value};
  }
  function keepSettings() {
    localStorage.setItem(SETTINGS, JSON.stringify(settings()));
    localStorage.setItem(KEY, $("api-key").value);
  }
  function restoreSettings() {
    const s = load(SETTINGS, {});
    if (typeof s.system === "string") $("system").value = s.system;
    if (Number.isFinite(s.temperature)) $("temperature").value = s.temperature;
    if (Number.isFinite(s.max_tokens)) $("max-tokens").value = s.max_tokens;
    if (typeof s.thinking === "string") $("thinking").value = s.thinking;
    $("api-key").value = localStorage.getItem(KEY) || "";
  }

  /* ---- a request, streamed ---- */
  function apiMessages(c) {
    const s = settings(), out = [];
    if (s.system.trim()) out.push({role: "system", content: s.system});
    for (const m of c.messages) {
      if (m.role === "user") { out.push({role: "user", content: m.content}); continue; }
      if (m.error && !m.content) continue;
      const a = {role: "assistant", content: m.content || ""};
      if (m.reasoning) a.reasoning_content = m.reasoning; /* as generated: the cache continues */
      if (m.tool_calls && m.tool_calls.length) a.tool_calls = m.tool_calls;
      out.push(a);
    }
    return out;
  }
  function headers() {
    const h = {"Content-Type": "application/json"}, k = $("api-key").value;
    if (k) h.Authorization = "Bearer " + k;
    return h;
  }
  /* Folds one streamed chunk into the reply m. */
  function fold(m, chunk) {
    if (chunk.usage) m.usage = chunk.usage;
    if (chunk.timings) m.timings = chunk.timings;
    const ch = chunk.choices && chunk.choices[0];
    if (ch) {
      const d = ch.delta || {};
      if (d.content) m.content += d.content;
      if (d.reasoning_content) m.reasoning = (m.reasoning || "") + d.reasoning_content;
      for (const t of d.tool_calls || []) {
        m.tool_calls = m.tool_calls || [];
        const x = m.tool_calls[t.index] || (m.tool_calls[t.index] = {id: "", type: "function", function: {name: "", arguments: ""}});
        if (t.id) x.id = t.id;
        if (t.function && t.function.name) x.function.name += t.function.name;
        if (t.function && t.function.arguments) x.function.arguments += t.function.arguments;
      }
      if (ch.finish_reason) m.finish = ch.finish_reason;
      return Boolean(d.content || d.reasoning_content || (d.tool_calls && d.tool_calls.length));
    }
    return false;
  }
  async function send() {
    const c = chat();
    const s = settings();
    const body = {model: $("model").textContent, messages: apiMessages(c), stream: true,
                  stream_options: {include_usage: true}};
    if (Number.isFinite(s.temperature)) body.temperature = s.temperature;
    if (Number.isFinite(s.max_tokens)) body.max_tokens = s.max_tokens;
    if (s.thinking) body.chat_template_kwargs = {enable_thinking: s.thinking === "on"};
    const m = {role: "assistant", content: ""};
    c.messages.push(m);
    const ctl = new AbortController();
    inflight = ctl;
    busy(true);
    renderLog();
    const box = $("log").lastElementChild;
    const t0 = performance.now();
    let first = 0;
    try {
      const r = await fetch("/v1/chat/completions", {method: "POST", headers: headers(), body: JSON.stringify(body),
                                                     signal: ctl.signal});
      if (!r.ok) {
        const e = await r.json().catch(() => ({}));
        throw new Error((e.error && e.error.message) || `HTTP ${r.status}`);
      }
      const reader = r.body.getReader(), dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += dec.decode(value, {stream: true});
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
            if (fold(m, JSON.parse(line.slice(6))) && !first) first = performance.now();
          }
        }
        update(box, m);
      }
    } catch (e) {
      m.error = e.name === "AbortError" ? "stopped" : String(e.message || e);
    }
    const t1 = performance.now();
    if (m.usage) {
      const u = m.usage, cached = (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens) || 0;
      /* decode speed as the server timed it: tokens reach the page in bursts, so the page's own
       * first-to-last interval can be near zero on a small model */
      const tm = m.timings || {};
      m.stats = {prompt: u.prompt_tokens, cached, host: tm.cache_host_n || 0, disk: tm.cache_disk_n || 0,
                 completion: u.completion_tokens, ttft_ms: (first || t1) - t0,
                 tok_s: tm.predicted_per_second || 0, finish: m.finish || ""};
    }
    delete m.usage;
    delete m.timings;
    if (c.title === "New chat" && c.messages.length) c.title = c.messages[0].content.slice(0, 40) || "Chat";
    inflight = null;
    busy(false);
    save();
    render();
  }
  function update(box, m) {
    const fresh = messageView(m, Number(box.dataset.index), false);
    box.replaceChildren(...fresh.childNodes);
    $("log").scrollTop = $("log").scrollHeight;
  }
  function busy(on) {
    $("send").hidden = on;
    $("stop").hidden = !on;
    $("status").textContent = on ? "generating…" : "";
  }

  /* ---- the composer: send, edit a previous message (a branch), regenerate ---- */
  let editing = -1;
  function submit(ev) {
    ev.preventDefault();
    const text = $("input").value;
    if (inflight || !text.trim()) return;
    keepSettings();
    const c = chat();
    if (editing >= 0) c.messages.length = editing; /* the branch: the shared prefix comes from the cache */
    editing = -1;
    c.messages.push({role: "user", content: text});
    $("input").value = "";
    send();
  }
  function startEdit(i) {
    if (inflight) return;
    editing = i;
    $("input").value = chat().messages[i].content;
    $("input").focus();
  }
  function regenerate() {
    const c = chat();
    if (inflight || !c.messages.length || c.messages[c.messages.length - 1].role !== "assistant") return;
    c.messages.pop();
    keepSettings();
    send();
  }

  async function modelName() {
    try {
      const r = await fetch("/v1/models", {headers: headers()});
      const j = await r.json();
      if (j.data && j.data[0]) $("model").textContent = j.data[0].id;
    } catch (e) { /* the name is cosmetic: requests name the model the server has */ }
  }

  document.addEventListener("DOMContentLoaded", () => {
    restoreSettings();
    $("composer").addEventListener("submit", submit);
    $("input").addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey) submit(ev);
    });
    $("stop").addEventListener("click", () => { if (inflight) inflight.abort(); });
    $("new-chat").addEventListener("click", () => { if (!inflight) newChat(); });
    for (const id of ["system", "temperature", "max-tokens", "thinking", "api-key"]) $(id).addEventListener("change", keepSettings);
    $("api-key").addEventListener("change", modelName);
    current = chats.length ? chats[0].id : null;
    if (!current) newChat(); else render();
    window.addEventListener("resize", renderChart);
    modelName();
  });
})();
