// The chat page (server/page/) against cinder serve: tests/chat_page.sh starts the servers and
// passes their addresses. Plain HTTP first, then Debian's Chromium through playwright-core.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { join } from "node:path";

const root = process.env.CINDER_SOURCE_DIR;
const require = createRequire(join(root, "third_party/npm/package.json"));
const { chromium } = require("playwright-core");
const url = process.env.CINDER_PAGE_URL, hostileUrl = process.env.CINDER_HOSTILE_URL, showUrl = process.env.CINDER_SHOW_URL;
const key = process.env.CINDER_PAGE_KEY, shot = process.env.CINDER_PAGE_SHOT;
const auth = { Authorization: `Bearer ${key}` };

test("GET / is the page, open without the key, under a strict policy", async () => {
  const r = await fetch(`${url}/`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type"), /^text\/html/);
  const csp = r.headers.get("content-security-policy");
  for (const d of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"])
    assert.ok(csp.includes(d), `${d} in ${csp}`);
  assert.ok(!/unsafe-(inline|eval)/.test(csp));
  assert.equal(r.headers.get("x-content-type-options"), "nosniff");
  const html = await r.text();
  assert.deepEqual([...html.matchAll(/(?:src|href)="([^"]*)"/g)].map((m) => m[1]).sort(), ["/page/chat.css", "/page/chat.js", "data:,"]);
  assert.equal((await fetch(`${url}/v1/models`)).status, 401); // the API still wants the key
  assert.equal((await fetch(`${url}/`, { method: "POST" })).status, 405);
});

test("the page's script and style are served, and the script names no other origin", async () => {
  const js = await fetch(`${url}/page/chat.js`);
  assert.match(js.headers.get("content-type"), /^text\/javascript/);
  const text = await js.text();
  assert.ok(text.includes("DOMPurify") && text.includes("marked"));
  // absolute addresses in the bundled libraries are XML namespaces and their license comments,
  // none fetched (and the policy's connect-src 'self' would refuse them)
  const hosts = new Set([...text.matchAll(/https?:\/\/([A-Za-z0-9.-]*)/g)].map((m) => m[1]));
  for (const h of hosts) assert.ok(["", "www.w3.org", "github.com"].includes(h), `address on ${h}`);
  const own = readFileSync(join(root, "server/page/chat.js"), "utf8");
  assert.deepEqual([...own.matchAll(/https?:\/\/[^"'`\s]*/g)].map((m) => m[0]), ["http://www.w3.org/2000/svg"]);
  const css = await fetch(`${url}/page/chat.css`);
  assert.match(css.headers.get("content-type"), /^text\/css/);
  assert.ok(!/url\(|@import/.test(await css.text()));
});

async function browser() {
  return chromium.launch({ executablePath: "/usr/bin/chromium", headless: true, args: ["--no-sandbox"] });
}

async function open(b, at) {
  const page = await b.newPage();
  page.setDefaultTimeout(180000);
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
  page.on("pageerror", (e) => problems.push(String(e)));
  await page.goto(at);
  await page.waitForSelector("#input");
  await page.click("#settings summary"); // the fields live in a folded panel
  return { page, problems };
}

const cacheHits = async () => (await (await fetch(`${url}/v1/cache`, { headers: auth })).json()).hit_tokens;
const lastStats = (page) => page.locator("#log .msg.assistant").last().locator(".stats");
async function replyDone(page) {
  await page.waitForFunction(() => {
    const m = [...document.querySelectorAll("#log .msg.assistant")].pop();
    return m && (m.querySelector(".stats").textContent || m.querySelector(".error")) && document.querySelector("#stop").hidden;
  });
}
function fromCache(text) {
  const m = /prompt (\d+) tok · from cache (\d+)/.exec(text);
  assert.ok(m, `a cache figure in "${text}"`);
  return { prompt: Number(m[1]), cached: Number(m[2]) };
}
async function say(page, text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}

test("a conversation in the browser: the key, streaming, the cache figure, stop, edit, regenerate", async () => {
  const b = await browser();
  try {
    const { page, problems } = await open(b, `${url}/`);
    await page.fill("#max-tokens", "24");
    await page.fill("#temperature", "0");
    // no key: the server refuses the page's request, and the page says why
    await say(page, "Tell me about the history of the city of Paris and of its bridges over the river, in detail.");
    await replyDone(page);
    assert.match(await page.locator("#log .msg.assistant .error").last().textContent(), /API key/);
    await page.fill("#api-key", key);
    await page.dispatchEvent("#api-key", "change");

    // with the key, regenerating the failed reply runs
    let before = await cacheHits();
    await page.click("#log .msg.assistant .regenerate");
    await replyDone(page);
    let fig = fromCache(await lastStats(page).textContent());
    assert.equal(fig.cached, (await cacheHits()) - before, "turn 1: the page's figure is the server's");

    // the second turn continues the first: its prompt comes from the cache up to the new message
    before = await cacheHits();
    await say(page, "And what about the bridges today?");
    await replyDone(page);
    fig = fromCache(await lastStats(page).textContent());
    assert.equal(fig.cached, (await cacheHits()) - before, "turn 2: the page's figure is the server's");
    assert.ok(fig.cached >= 16, `turn 2: ${fig.cached} of ${fig.prompt} prompt tokens from the cache`);
    assert.equal(await page.locator("#ttft-chart circle").count(), 2);

    // stop a long reply: the server lets go of it at once
    await page.fill("#max-tokens", "3000");
    await page.dispatchEvent("#max-tokens", "change");
    // ... and streams: its text is seen growing, three times, while the request still runs
    await page.evaluate(() => {
      window.seen = [];
      new MutationObserver(() => {
        const m = [...document.querySelectorAll("#log .msg.assistant")].pop();
        const r = m && m.querySelector(".reasoning pre"); // thinking on (the template's default) streams there first
        const t = m ? (r ? r.textContent : "") + m.querySelector(".body").textContent : "";
        if (t && window.seen[window.seen.length - 1] !== t && !document.querySelector("#stop").hidden) window.seen.push(t);
      }).observe(document.querySelector("#log"), { childList: true, subtree: true, characterData: true });
    });
    await say(page, "Now write a very long story about a dragon.");
    await page.waitForFunction(() => window.seen.length >= 3);
    const seen = await page.evaluate(() => window.seen);
    // (markdown may re-render earlier text as more arrives: longer, not always a prefix)
    assert.ok(seen[2].length > seen[0].length, JSON.stringify(seen.slice(0, 3)));
    await page.click("#stop");
    await replyDone(page);
    assert.equal(await page.locator("#log .msg.assistant .error").last().textContent(), "stopped");
    let running = 1;
    for (let i = 0; i < 50 && running; i++) {
      running = (await (await fetch(`${url}/v1/cache`, { headers: auth })).json()).running;
      if (running) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(running, 0, "nothing runs after the stop");

    // edit the first message: a branch of two messages; regenerating it is served from the cache
    await page.fill("#max-tokens", "24");
    await page.dispatchEvent("#max-tokens", "change");
    await page.click("#log .msg.user .edit >> nth=0");
    const edited = "Tell me instead about the history of the city of Lyon and of its two rivers, in some detail please.";
    assert.match(await page.inputValue("#input"), /Paris/);
    await say(page, edited);
    await replyDone(page);
    assert.equal(await page.locator("#log .msg").count(), 2);
    assert.equal(await page.locator("#log .msg.user .body").textContent(), edited);
    before = await cacheHits();
    await page.click("#log .msg.assistant .regenerate");
    await replyDone(page);
    fig = fromCache(await lastStats(page).textContent());
    assert.equal(fig.cached, (await cacheHits()) - before);
    assert.ok(fig.cached >= 16, `regenerate: ${fig.cached} of ${fig.prompt} prompt tokens from the cache`);

    // kept in the browser: a reload shows the same conversation, and a new chat is empty
    await page.reload();
    await page.waitForSelector("#log .msg");
    assert.equal(await page.locator("#log .msg").count(), 2);
    await page.click("#new-chat");
    assert.equal(await page.locator("#log .msg").count(), 0);
    assert.equal(await page.locator("#chats li").count(), 2);
    // the two requests made before the key was given are the only failures the browser saw
    const refused = problems.filter((p) => p.includes("status of 401"));
    assert.equal(refused.length, 2);
    assert.deepEqual(problems.filter((p) => !refused.includes(p)), [], "no script error and no policy violation");
  } finally {
    await b.close();
  }
});

test("a reply's markup is shown as text: no element, no script", async () => {
  const b = await browser();
  try {
    const { page, problems } = await open(b, `${hostileUrl}/`);
    await say(page, "hi");
    await replyDone(page);
    const body = page.locator("#log .msg.assistant .body").last();
    const text = await body.textContent();
    assert.ok(text.includes("<img src=x onerror=alert(1)>") && text.includes("<script>go()"), text);
    assert.equal(await body.locator("img, script").count(), 0);
    assert.equal(await body.locator("strong").textContent(), "bold"); // markdown still renders
    assert.equal(await page.evaluate(() => document.querySelectorAll("img, script:not([src])").length), 0);
    assert.deepEqual(problems, []);
  } finally {
    await b.close();
  }
});

test("four turns: each continues the cache through the last reply, one chart dot per turn", async () => {
  const b = await browser();
  try {
    const { page, problems } = await open(b, `${showUrl}/`);
    await page.click("#settings summary"); // folded again for the screenshot
    const asks = ["Where does Lyon stand?", "Which river is the larger?", "And the old Roman town?", "Thanks! One more fact?"];
    let prev = 0;
    for (const [i, ask] of asks.entries()) {
      await say(page, ask);
      await replyDone(page);
      const stats = await lastStats(page).textContent();
      const fig = fromCache(stats);
      assert.match(stats, /TTFT \d+ ms .* tok\/s/, stats);
      // the previous turn's prompt and its reply (as generated) are cached: only the new message is prefilled
      if (i) assert.ok(fig.cached >= prev, `turn ${i + 1}: ${fig.cached} cached, the previous prompt was ${prev}`);
      prev = fig.prompt;
      assert.equal(await page.locator("#ttft-chart circle").count(), i + 1);
    }
    assert.equal(await page.locator("#log .msg.assistant .body strong").first().textContent(), "Rhone");
    assert.equal(await page.locator("#log .msg.assistant .body pre code").count(), asks.length);
    await page.screenshot({ path: shot, fullPage: true });
    assert.deepEqual(problems, []);
  } finally {
    await b.close();
  }
});
