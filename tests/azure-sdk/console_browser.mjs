// Drives the web console in headless Chromium (puppeteer-core over the installed browser), as
// tests/console.rs starts it: signs in with the account key, creates a table, inserts and edits
// an entity, runs a filter, changes the service's CORS rules and the table's settings (a feed, an index declared and dropped,
// a time to live, access policies added and removed), watches a change arrive in a table's feed tail, reads the dashboard, then the
// negative cases (a bad credential, a read-only token deleting a table or turning a feed off, a
// request without the CSRF token). Prints one JSON object of what the page showed; exits non-zero on the
// first step that did not happen.
import puppeteer from "puppeteer-core";

const url = process.env.CONSOLE_URL;
const key = process.env.CONSOLE_KEY;
const readToken = process.env.CONSOLE_READ_TOKEN;
const screenshot = process.env.CONSOLE_SCREENSHOT;
const seen = {};

let page = null;
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
try {
  page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.setDefaultTimeout(20000);
  const errors = [];
  page.on("pageerror", (error) => errors.push(String(error)));
  await page.goto(url);
  const text = (selector) => page.$eval(selector, (node) => node.textContent);
  const visible = (selector) => page.waitForSelector(selector, { visible: true });
  const messageMatching = (pattern) =>
    page.waitForFunction((p) => new RegExp(p).test(document.getElementById("message").textContent), {}, pattern);
  const typeInto = async (selector, value) => {
    await page.$eval(selector, (node) => { node.value = ""; });
    await page.type(selector, value);
  };

  // Not signed in: the sign-in form, and a bad credential refused.
  await visible("#sign-in-form");
  await typeInto("#credential", "not-a-key");
  await page.click("#sign-in-form button");
  await messageMatching("neither an account key");
  seen.badCredential = await text("#message");

  // Signed in with the account key.
  await typeInto("#credential", key);
  await page.click("#sign-in-form button");
  await visible("#tables");
  seen.who = await text("#who");

  // The service's CORS rules: one added, shown, a second added then removed.
  await page.click("#cors summary");
  await page.waitForFunction(() => /No rules/.test(document.getElementById("cors-rules").textContent));
  const addRule = async (origin) => {
    await typeInto("#cors-origins", origin);
    await typeInto("#cors-methods", "GET,PUT");
    await typeInto("#cors-headers", "x-ms-*");
    await page.click("#cors-form button");
    await messageMatching("CORS rule added");
    await page.waitForFunction((o) => document.getElementById("cors-rules").textContent.includes(o), {}, origin);
  };
  await addRule("https://app.example");
  await addRule("https://other.example");
  await page.click("#cors-rules li:nth-child(2) button");
  await messageMatching("CORS rule removed");
  await page.waitForFunction(() => !/other\.example/.test(document.getElementById("cors-rules").textContent));
  seen.cors = await text("#cors-rules");

  // A request without the session's CSRF token is refused, though the cookie goes with it.
  seen.forgedStatus = await page.evaluate(async () => {
    const answer = await fetch("/api/devstoreaccount1/Tables", {
      method: "POST",
      headers: { "Content-Type": "application/json", "x-ms-version": "2019-02-02" },
      body: JSON.stringify({ TableName: "Forged" }),
    });
    return answer.status;
  });

  // Create a table; the page opens it.
  await typeInto("#new-table", "Console");
  await page.click("#create-table-form button");
  await page.waitForFunction(() => document.getElementById("table-name").textContent === "Console");

  // Insert two entities through the editor.
  const insert = async (entity) => {
    await page.click("#new-entity");
    await visible("#editor-text");
    await page.$eval("#editor-text", (node, json) => { node.value = json; }, JSON.stringify(entity));
    await page.click("#insert-entity");
    await messageMatching(`Inserted \\(${entity.PartitionKey}, ${entity.RowKey}\\)`);
  };
  await insert({ PartitionKey: "p1", RowKey: "ada", Name: "Ada", Age: "36", "Age@odata.type": "Edm.Int64",
    Joined: "2020-01-02T03:04:05Z", "Joined@odata.type": "Edm.DateTime", Profile: JSON.stringify({ tags: ["math", "engines"] }) });
  await insert({ PartitionKey: "p1", RowKey: "bob", Name: "Bob", Age: "20", "Age@odata.type": "Edm.Int64" });
  await page.waitForFunction(() => document.querySelectorAll("#grid tbody tr").length === 2);
  seen.headers = await page.$$eval("#grid thead th", (cells) => cells.map((cell) => cell.textContent));
  seen.adaCells = await page.$$eval("#grid tbody tr[data-row-key='ada'] td", (cells) => cells.map((cell) => cell.textContent));
  seen.documentExpandable = await page.$$eval("#grid tbody tr[data-row-key='ada'] details.doc", (d) => d.length);

  // Edit Ada: Age 37, saved against her ETag.
  await page.click("#grid tbody tr[data-row-key='ada']");
  await visible("#save-entity");
  seen.etagShown = await text("#editor-etag");
  await page.$eval("#editor-text", (node) => {
    const entity = JSON.parse(node.value);
    entity.Age = "37";
    node.value = JSON.stringify(entity);
  });
  await page.click("#save-entity");
  await messageMatching("Saved \\(p1, ada\\)");

  // A filter: only Ada is 30 or over.
  await typeInto("#q-filter", "Age ge 30L");
  await page.click("#query-form button[type=submit]");
  await page.waitForFunction(() => document.querySelectorAll("#grid tbody tr").length === 1);
  seen.filtered = await page.$$eval("#grid tbody tr", (rows) => rows.map((row) => row.dataset.rowKey));
  seen.pageStats = await text("#page-stats");

  // The table's settings changed through the page: a feed, an index declared then dropped (asked
  // twice), a time to live.
  await page.$eval("#feed-on", (node) => { node.checked = true; });
  await typeInto("#feed-retention", "3600");
  await page.$eval("#feed-before", (node) => { node.checked = true; });
  await page.click("#feed-form button");
  await messageMatching("Change feed on");
  seen.feedSet = await text("#settings-facts");
  await typeInto("#index-name", "ByAge");
  await typeInto("#index-paths", "Age");
  await page.select("#index-scope", "table");
  await page.click("#index-form button");
  await messageMatching("Index ByAge declared");
  await page.waitForFunction(() => /ByAge/.test(document.getElementById("settings-body").textContent));
  seen.indexDeclared = await text("#index-table");
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  await page.click("#index-table button[data-index='ByAge']");
  await page.waitForFunction(() => /Confirm/.test(document.querySelector("#index-table button[data-index='ByAge']").textContent));
  await page.click("#index-table button[data-index='ByAge']");
  await messageMatching("Index ByAge dropped");
  seen.indexDropped = await text("#settings-body");
  await page.$eval("#ttl-on", (node) => { node.checked = true; });
  await typeInto("#ttl-default", "0");
  await page.click("#ttl-form button");
  await messageMatching("Time to live on");
  seen.ttlSet = await text("#settings-facts");
  // Stored access policies: two added, one removed.
  const addPolicy = async (id, permissions) => {
    await typeInto("#policy-id", id);
    await typeInto("#policy-permissions", permissions);
    await typeInto("#policy-expiry", "2030-01-01T00:00:00Z");
    await page.click("#policy-form button");
    await messageMatching(`Policy ${id} added`);
    await page.waitForFunction((i) => document.getElementById("policies").textContent.includes(i), {}, id);
  };
  await addPolicy("readers", "r");
  await addPolicy("writers", "raud");
  await page.click("#policies button[data-policy='writers']");
  await messageMatching("Policy writers removed");
  await page.waitForFunction(() => !/writers/.test(document.getElementById("policies").textContent));
  seen.policies = await text("#policies");
  seen.policyFacts = await text("#settings-facts");

  // The feed's tail of Orders (made by the test with a feed and an index): a change arrives.
  await page.click("#go-tables");
  await visible("#table-list button[data-table='Orders']");
  await page.click("#table-list button[data-table='Orders']");
  await page.waitForFunction(() => document.getElementById("table-name").textContent === "Orders");
  await page.waitForFunction(() => /ByAmount/.test(document.getElementById("settings-body").textContent));
  seen.settings = await text("#settings-body");
  await page.click("#tail-start");
  await page.waitForFunction(() => /following from/.test(document.getElementById("tail-state").textContent));
  await insert({ PartitionKey: "s7", RowKey: "o1", Amount: 120 });
  await page.waitForFunction(() => /o1/.test(document.getElementById("tail").textContent));
  seen.tail = await text("#tail li");
  await page.click("#tail-stop");

  // The dashboard draws the server's metrics.
  await page.click("#go-dashboard");
  await page.waitForFunction(() => document.querySelectorAll("#dashboard-numbers tr").length === 3);
  await page.waitForFunction(() => document.querySelectorAll("#chart-rate polyline").length === 2);
  seen.dashboard = await text("#dashboard-numbers");

  // Signed out, then in with a read-only token: deleting a table is refused.
  await page.click("#sign-out");
  await visible("#sign-in-form");
  await typeInto("#credential", readToken);
  await page.click("#sign-in-form button");
  await visible("#table-list button[data-table='Console']");
  seen.readOnlyWho = await text("#who");
  seen.readOnlyCorsHidden = await page.$eval("#cors", (node) => node.hidden);
  await page.click("#table-list button[data-table='Console']");
  await page.waitForFunction(() => document.querySelectorAll("#grid tbody tr").length === 2);
  await page.click("#delete-table");
  await visible("#confirm-delete-table");
  await page.click("#confirm-delete-table");
  await messageMatching("AuthorizationPermissionMismatch");
  seen.readOnlyDelete = await text("#message");
  {
    // Nor may it turn the feed off.
    await page.evaluate(() => { document.getElementById("message").textContent = ""; });
    await page.$eval("#feed-on", (node) => { node.checked = false; });
    await page.click("#feed-form button");
    await messageMatching("AuthorizationPermissionMismatch");
    seen.readOnlyFeed = await text("#message");
  }
  seen.pageErrors = errors;
  console.log(JSON.stringify(seen));
} catch (error) {
  seen.lastMessage = page && await page.$eval("#message", (node) => node.textContent).catch(() => null);
  console.log(JSON.stringify(seen));
  console.error(`console_browser: ${error.stack || error}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
