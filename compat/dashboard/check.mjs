// The lock dashboard in a real browser: Debian's chromium, headless, driven by
// playwright-core (no browser download). Run by crates/zlock-server/tests/it/dashboard_browser.rs,
// which starts zlock, makes the locks through the protocol and releases the holder
// when this script says it is ready:
//
//   node check.mjs <dashboard url> <signal dir> <holder> <waiter1> <waiter2> <other> <screenshot.png>
//
// <holder>, <waiter1>, <waiter2>: session ids (hex) on /locks/l, in queue order;
// <other>: the session holding /locks/other. The script
// 1. opens <url>?stuck=2 (a queue that has not moved for 2 s is flagged) at a phone's size,
// 2. waits for /locks/l to show <holder> holding and the two waiters in order,
// 3. writes <signal dir>/ready and waits for <signal dir>/released (the test deletes the
//    holder's node),
// 4. checks, without a reload, that <waiter1> now holds, <waiter2> waits, the
//    hand-over is listed, and that the queue gets the stuck flag,
// 5. checks the search box (filters lock paths), saves the screenshot.
// If <signal dir>/expect.json exists, step 2 also checks what it lists:
//   {"queues": [{"path", "holders": [hex], "waiters": [hex], "recipe"?}],
//    "handovers": [{"path", "from": hex, "to": hex}]}
// each queue's holders and waiters in order (and, with "recipe", the card's recipe
// label), and each hand-over listed as soon as the page shows (one that happened
// before the page was opened comes from the member's history).
// Exit status 0: all checks passed.
import { chromium } from "playwright-core";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";

const [url, dir, holder, w1, w2, other, shot] = process.argv.slice(2);
if (!shot) {
  console.error("usage: check.mjs <url> <dir> <holder> <waiter1> <waiter2> <other> <shot.png>");
  process.exit(2);
}
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
const T = 20_000;

function fail(msg) {
  throw new Error(msg);
}

async function waitFile(path, ms) {
  const until = Date.now() + ms;
  while (!existsSync(path)) {
    if (Date.now() > until) fail(`no ${path} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const userDataDir = mkdtempSync(join(tmpdir(), "zlock-dash-chromium-"));
// A fresh profile each run (playwright passes it as --user-data-dir).
const browser = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  viewport: { width: 412, height: 915 },
  deviceScaleFactor: 1,
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
let code = 1;
try {
  const page = browser.pages()[0] || (await browser.newPage());
  page.on("pageerror", (e) => console.error("page error:", e.message));
  await page.goto(`${url}?stuck=2`);
  await page.evaluate(() => { window.__notReloaded = true; });

  const lock = page.locator('section.lock[data-path="/locks/l"]');
  const holders = lock.locator("li.holder");
  const waiters = lock.locator("li.waiter");
  const sessionsOf = (loc) => loc.evaluateAll((els) => els.map((e) => e.dataset.session));
  async function until(what, f) {
    const end = Date.now() + T;
    let last;
    while (Date.now() < end) {
      last = await f();
      if (last === true) return;
      await page.waitForTimeout(200);
    }
    fail(`${what}: ${JSON.stringify(last)}`);
  }
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b) || { got: a, want: b };

  // 2. holder and waiters, in order; the holder's address and fencing token.
  await until("holder of /locks/l", async () => same(await sessionsOf(holders), [holder]));
  await until("waiters of /locks/l", async () => same(await sessionsOf(waiters), [w1, w2]));
  const h = await holders.first().innerText();
  if (!/from 127\.0\.0\.1:\d+/.test(h) || !/fencing token \d+/.test(h)) fail(`holder line: ${h}`);
  await until("/locks/other", async () =>
    same(await sessionsOf(page.locator('section.lock[data-path="/locks/other"] li.holder')), [other]));
  console.log("dashboard shows the holder and the waiters in order");

  const expectFile = join(dir, "expect.json");
  const expected = existsSync(expectFile) ? JSON.parse(readFileSync(expectFile, "utf8")) : {};
  for (const q of expected.queues || []) {
    const card = page.locator(`section.lock[data-path="${q.path}"]`);
    await until(`holders of ${q.path}`, async () => same(await sessionsOf(card.locator("li.holder")), q.holders));
    await until(`waiters of ${q.path}`, async () => same(await sessionsOf(card.locator("li.waiter")), q.waiters));
    if (q.recipe) {
      const label = await card.locator(".note").first().innerText();
      if (!label.includes(`recipe lock (${q.recipe})`)) fail(`${q.path} label: ${label}`);
    }
    console.log(`dashboard shows ${q.path}: holder and waiters in order`);
  }
  for (const h of expected.handovers || []) {
    const t = await page.locator(`#handovers li.handover[data-path="${h.path}"]`).allInnerTexts();
    if (!t.some((x) => x.includes(`${h.from} → ${h.to}`))) fail(`hand-over on ${h.path}: ${JSON.stringify(t)}`);
    console.log(`dashboard lists the hand-over on ${h.path} made before it opened`);
  }

  // 3-4. live update on release.
  writeFileSync(join(dir, "ready"), "");
  await waitFile(join(dir, "released"), 30_000);
  await until("new holder after the release", async () => same(await sessionsOf(holders), [w1]));
  await until("remaining waiter", async () => same(await sessionsOf(waiters), [w2]));
  if (!(await page.evaluate(() => window.__notReloaded === true))) fail("the page was reloaded");
  await until("hand-over listed", async () => {
    const t = await page.locator("#handovers").innerText();
    return (t.includes("/locks/l") && t.includes(`${holder} → ${w1}`)) || t;
  });
  console.log("dashboard updated live: the waiter holds, the hand-over is listed");
  await until("stuck flag", async () => (await lock.locator(".flag.stuck").count()) > 0 || "none");
  console.log("dashboard flags the stuck queue:", await lock.locator(".flag.stuck").first().innerText());

  // 5. search.
  await page.fill("#search", "other");
  await until("search hides /locks/l", async () => (await lock.count()) === 0 || "still shown");
  if ((await page.locator('section.lock[data-path="/locks/other"]').count()) !== 1) fail("search hid /locks/other");
  await page.fill("#search", "");
  await until("search cleared", async () => (await lock.count()) === 1 || "not shown");
  console.log("search box filters lock paths");

  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);
  code = 0;
} catch (e) {
  console.error("FAILED:", e.message);
} finally {
  await browser.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(code);
