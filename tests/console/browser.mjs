// browser.mjs - drives the real console in Debian's chromium (through
// playwright-core) against a running `luagent daemon --console` with the
// scripted model. Run by tests/e2e/console_browser.sh, which starts the
// daemon and passes: URL, TOKEN, SHOTS (folder for screenshots), CHROMIUM.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const { URL: BASE, TOKEN, SHOTS, CHROMIUM } = process.env;
mkdirSync(SHOTS, { recursive: true });
let fails = 0;
const ok = (what) => console.log(`ok: ${what}`);
const bad = (what) => { console.log(`FAIL: ${what}`); fails++; };
let page = null;
async function step(what, fn) {
  try { await fn(); ok(what); } catch (e) {
    bad(`${what}: ${e.message.split("\n")[0]}`);
    // what the page showed, for whoever reads the failure
    try { await page.screenshot({ path: `${SHOTS}/failed-${fails}.png` }); } catch (_) { /* closed */ }
  }
}
const T = { timeout: 15000 };

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
context.setDefaultTimeout(10000);
page = await context.newPage();
const errors = [];
page.on("pageerror", (e) => errors.push(String(e)));
const shot = (name) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: false });

async function api(method, path, body) {
  return page.evaluate(async ([m, p, b]) => {
    const s = await (await fetch("/api/session")).json();
    const r = await fetch(p, { method: m, headers: { "Content-Type": "application/json", "X-CSRF-Token": s.csrf }, body: m === "GET" ? undefined : JSON.stringify(b || {}) });
    return r.json();
  }, [method, path, body]);
}
async function pendingCount() {
  return (await api("GET", "/api/approvals")).length;
}
async function waitPending(n) {
  for (let i = 0; i < 100; i++) { if ((await pendingCount()) >= n) return; await page.waitForTimeout(150); }
  throw new Error(`no ${n} pending approval(s)`);
}

try {
  // --- login ---
  await step("a wrong token is refused", async () => {
    await page.goto(`${BASE}/`);
    await page.fill("#token", "f".repeat(64));
    await page.keyboard.press("Enter");
    await page.getByText("Wrong token.").waitFor(T);
    if (await page.locator("#nav").isVisible()) throw new Error("the nav is shown");
  });
  await shot("login");
  await step("the token URL logs in and leaves the address bar", async () => {
    await page.goto(`${BASE}/#token=${TOKEN}`);
    await page.locator("#nav").waitFor({ state: "visible", ...T });
    if (page.url().includes(TOKEN)) throw new Error(`token still in ${page.url()}`);
    await page.getByRole("heading", { name: "Runs" }).waitFor(T);
  });
  await step("the session cookie is not readable from script", async () => {
    const c = await page.evaluate(() => document.cookie);
    if (c.includes("luagent_console")) throw new Error(`document.cookie = ${c}`);
  });

  // --- chat + watch a run live + approve ---
  await step("chat: send a message and see the answer stream", async () => {
    await page.goto(`${BASE}/#/chat`);
    await page.fill("#chat-message", "hello there");
    await page.keyboard.press("Enter");
    await page.getByTestId("answer").filter({ hasText: "Hello from the script." }).waitFor(T);
  });
  await step("markup from the model is shown as text, never run", async () => {
    await page.fill("#chat-message", "show markup");
    await page.keyboard.press("Enter");
    await page.getByTestId("answer").filter({ hasText: '<img src=x onerror="window.__pwned=1"><b>bold?</b>' }).waitFor(T);
    if (await page.evaluate(() => window.__pwned)) throw new Error("the model's markup ran");
    if (await page.locator("#chat-events img, #chat-events b").count()) throw new Error("the model's markup became elements");
  });
  await step("watch a run stream live, approve its escalation, see it continue", async () => {
    await page.fill("#chat-message", "publish live");
    await page.keyboard.press("Enter");
    await waitPending(1);
    await page.goto(`${BASE}/#/runs`);
    const link = page.locator("tr", { hasText: "running" }).locator("a").first();
    await link.waitFor(T);
    await link.click();
    await page.getByTestId("approval-requested").waitFor(T);
    await page.getByTestId("run-status").filter({ hasText: "running" }).waitFor(T);
    await shot("run-waiting");
    const ap = await context.newPage();
    await ap.goto(`${BASE}/#/approvals`);
    const card = ap.getByTestId("approval").first();
    await card.waitFor(T);
    await card.getByTestId("approval-args").filter({ hasText: "\"title\": \"hello\"" }).waitFor(T);
    await ap.screenshot({ path: `${SHOTS}/approvals.png` });
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    await ap.getByText(/approval \d+ approved/).waitFor(T);
    await ap.close();
    // the run page, still open, gets the rest live
    await page.getByTestId("tool-result").filter({ hasText: "\"published\":\"hello\"" }).waitFor(T);
    await page.getByTestId("run-end").filter({ hasText: "run ok" }).waitFor(T);
    await page.getByTestId("stream-state").filter({ hasText: "finished (ok)" }).waitFor(T);
    await shot("run");
  });

  await step("back on the chat page, the open chat is there again", async () => {
    await page.goto(`${BASE}/#/chat`);
    await page.getByTestId("tool-result").filter({ hasText: "\"published\":\"hello\"" }).waitFor(T);
    await page.getByTestId("chat-state").filter({ hasText: "idle" }).waitFor(T);
  });

  // --- modify arguments through the editor (schema checked first) ---
  await step("modified arguments: the editor refuses what breaks the schema, then the modified call runs", async () => {
    await page.fill("#chat-message", "publish modified");
    await page.keyboard.press("Enter");
    await waitPending(1);
    const ap = await context.newPage();
    await ap.goto(`${BASE}/#/approvals`);
    const card = ap.getByTestId("approval").first();
    await card.waitFor(T);
    await card.getByRole("button", { name: "Edit arguments…" }).click();
    const ed = card.getByTestId("args-editor");
    await ed.fill('{"title": "this title is far too long for the board"}');
    await card.getByRole("button", { name: "Approve modified" }).click();
    await card.getByTestId("schema-problems").filter({ hasText: "longer than 20" }).waitFor(T);
    await ed.fill('{"title": "x", "extra": 1}');
    await card.getByRole("button", { name: "Approve modified" }).click();
    await card.getByTestId("schema-problems").filter({ hasText: 'unknown property "extra"' }).waitFor(T);
    await ap.screenshot({ path: `${SHOTS}/approvals-editor.png` });
    if ((await pendingCount()) !== 1) throw new Error("an invalid modification was sent");
    await ed.fill('{"title": "from the editor"}');
    await card.getByRole("button", { name: "Approve modified" }).click();
    await ap.getByText(/approval \d+ modified/).waitFor(T);
    await ap.close();
    await page.getByTestId("tool-result").filter({ hasText: "\"published\":\"from the editor\"" }).waitFor(T);
  });

  // --- deny with a reason ---
  await step("deny with a reason: the caller sees it", async () => {
    await page.fill("#chat-message", "publish deny");
    await page.keyboard.press("Enter");
    await waitPending(1);
    const ap = await context.newPage();
    await ap.goto(`${BASE}/#/approvals`);
    const card = ap.getByTestId("approval").first();
    await card.waitFor(T);
    await card.getByLabel("Reason for denying").fill("not before the review");
    await card.getByRole("button", { name: "Deny" }).click();
    await ap.getByText(/approval \d+ denied/).waitFor(T);
    await ap.close();
    await page.getByTestId("tool-result").filter({ hasText: "not before the review" }).waitFor(T);
  });

  // --- steer and stop ---
  await step("steer a chat while it works", async () => {
    await page.fill("#chat-message", "publish steer");
    await page.keyboard.press("Enter");
    await waitPending(1);
    await page.getByTestId("chat-state").filter({ hasText: "working" }).waitFor(T);
    await page.fill("#chat-steer", "steered: keep it short");
    await page.getByRole("button", { name: "Steer" }).click();
    await page.waitForTimeout(500);
    const a = await api("GET", "/api/approvals");
    await api("POST", `/api/approvals/${a[0].id}/approve`);
    await page.getByTestId("steer").waitFor(T);
    await page.getByTestId("answer").filter({ hasText: "Steered answer: steered: keep it short" }).waitFor(T);
    await shot("chat");
  });
  await step("stop a chat's turn", async () => {
    await page.fill("#chat-message", "publish stop");
    await page.keyboard.press("Enter");
    await waitPending(1);
    await page.getByRole("button", { name: "Stop" }).click();
    await page.getByTestId("run-end").filter({ hasText: "run stopped" }).waitFor(T);
    await page.getByTestId("chat-state").filter({ hasText: "idle" }).waitFor(T);
    if ((await pendingCount()) !== 0) throw new Error("the stopped turn's approval is still pending");
  });

  // --- automations ---
  await step("run an automation now", async () => {
    await page.goto(`${BASE}/#/automations`);
    const row = page.locator('[data-testid="automation"][data-name="tick"]');
    await row.waitFor(T);
    await row.getByRole("button", { name: "Run now" }).click();
    await page.getByText("tick: ok").waitFor(T);
  });
  await step("disable an automation", async () => {
    const row = page.locator('[data-testid="automation"][data-name="tick"]');
    await row.getByRole("button", { name: "Disable" }).click();
    await row.getByTestId("enabled").filter({ hasText: "no" }).waitFor(T);
    const list = await api("GET", "/api/automations");
    if (list.find((a) => a.name === "tick").enabled) throw new Error("still enabled on the server");
    await shot("automations");
  });

  // --- the other pages, by keyboard ---
  await step("keyboard: Alt+5 opens Skills, problems shown in place", async () => {
    await page.keyboard.press("Alt+5");
    await page.getByRole("heading", { name: "Skills", exact: true }).waitFor(T);
    await page.getByText("board.publish").first().waitFor(T);
    await page.getByText("skills/broken").first().waitFor(T);
    await shot("skills");
  });
  await step("keyboard: Alt+6 opens the audit chain, intact", async () => {
    await page.keyboard.press("Alt+6");
    await page.getByTestId("audit-state").filter({ hasText: "intact" }).waitFor(T);
    await page.getByRole("cell", { name: "console" }).first().waitFor(T);
    await shot("audit");
  });
  await step("keyboard: Alt+1 back to runs", async () => {
    await page.keyboard.press("Alt+1");
    await page.getByRole("heading", { name: "Runs" }).waitFor(T);
    await page.locator("tbody tr").nth(3).waitFor(T);
    await shot("runs");
  });
  await step("no script errors on any page", async () => {
    if (errors.length) throw new Error(errors.join(" | "));
  });
} finally {
  await browser.close();
}
process.exit(fails ? 1 : 0);
