// The Trestle console: plain JavaScript over the REST endpoint (under /api, with the session's
// credential attached by the server) and the console's own calls (under /console). Every value
// from the server is put in the page as text (textContent), never as markup.
"use strict";

const ACCOUNT = "/api/devstoreaccount1";
const $ = (id) => document.getElementById(id);
let csrf = null;
let access = null;
let current = null; // the open table's name
let pageToken = null; // the query's next page
let editing = null; // {partitionKey, rowKey, etag} of the entity in the editor
let tailTimer = null;
let dashboardTimer = null;

function show(section) {
  for (const id of ["sign-in", "tables", "table", "dashboard"]) $(id).hidden = id !== section && !(section === "table" && id === "tables");
  $("nav").hidden = section === "sign-in";
}

function say(text, isError) {
  $("message").textContent = text || "";
  $("message").className = isError ? "error" : "";
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

// A call of the console's server: JSON out, the answer's JSON (or text) and headers back; an
// error answer (Azure's body, or the console's) becomes an Error with its code and message.
async function call(method, path, body, headers) {
  const sent = { "x-trestle-csrf": csrf || "", "x-ms-version": "2019-02-02",
    "Accept": "application/json;odata=fullmetadata", ...(headers || {}) };
  // A text body goes as it is, with the caller's Content-Type; anything else as JSON.
  const raw = typeof body === "string";
  if (body !== undefined && !raw) sent["Content-Type"] = "application/json";
  const answer = await fetch(path, { method, headers: sent, credentials: "same-origin",
    body: body === undefined ? undefined : raw ? body : JSON.stringify(body) });
  const text = await answer.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = null; }
  if (!answer.ok) {
    const failure = json && json["odata.error"];
    const error = new Error(failure ? `${failure.code}: ${failure.message.value}` : `${answer.status} ${text}`);
    error.status = answer.status;
    throw error;
  }
  return { json, text, headers: answer.headers, status: answer.status };
}

function failed(error) {
  say(error.message, true);
  if (error.status === 401 || error.status === 403 && /sign in/.test(error.message)) signedOut();
}

// Sign-in and session.
async function signIn(event) {
  event.preventDefault();
  const credential = $("credential").value;
  $("credential").value = "";
  try {
    const answer = await fetch("/session", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ credential }), credentials: "same-origin" });
    const json = await answer.json();
    if (!answer.ok) throw new Error(json["odata.error"] ? json["odata.error"].message.value : "sign-in refused");
    signedIn(json);
  } catch (error) { say(error.message, true); }
}

function signedIn(session) {
  csrf = session.csrf;
  access = session.access;
  $("who").textContent = access === "account" ? "signed in with an account key" : "signed in with a token";
  say("");
  openTables();
}

function signedOut() {
  csrf = null; current = null; stopTail(); stopDashboard();
  show("sign-in");
}

async function signOut() {
  try { await fetch("/session", { method: "DELETE", headers: { "x-trestle-csrf": csrf || "" } }); } catch (_) {}
  say("Signed out.");
  signedOut();
}

// Tables.
async function openTables() {
  stopDashboard();
  show(current ? "table" : "tables");
  $("table-list").replaceChildren();
  await listTables(null);
  await loadCors();
}

// The service's CORS rules (Set Service Properties through the REST endpoint, an account key's
// call): shown, added to and removed from; a body of only <Cors> leaves the other properties.
const SERVICE = `${ACCOUNT}/?restype=service&comp=properties`;
const CORS_FIELDS = [["AllowedOrigins", "origins"], ["AllowedMethods", "methods"],
  ["AllowedHeaders", "headers"], ["ExposedHeaders", "exposed"], ["MaxAgeInSeconds", "maxAge"]];
let corsRules = [];

async function loadCors() {
  $("cors").hidden = access !== "account";
  if ($("cors").hidden) return;
  try {
    const { text } = await call("GET", SERVICE);
    const xml = new DOMParser().parseFromString(text, "application/xml");
    corsRules = [...xml.getElementsByTagName("CorsRule")].map((rule) => {
      const kept = {};
      for (const [tag, field] of CORS_FIELDS) kept[field] = (rule.getElementsByTagName(tag)[0] || {}).textContent || "";
      return kept;
    });
    drawCors();
  } catch (error) { failed(error); }
}

function drawCors() {
  const list = $("cors-rules");
  list.replaceChildren();
  if (!corsRules.length) list.append(el("li", "No rules: browsers of other origins are refused.", "hint"));
  corsRules.forEach((rule, at) => {
    const item = el("li", `${rule.origins} · ${rule.methods} · headers ${rule.headers || "none"} · exposed ${rule.exposed || "none"} · max age ${rule.maxAge} s `);
    const remove = el("button", "Remove");
    remove.type = "button";
    remove.addEventListener("click", () => saveCors(corsRules.filter((_, other) => other !== at), "CORS rule removed."));
    item.append(remove);
    list.append(item);
  });
}

async function saveCors(rules, done) {
  const doc = document.implementation.createDocument(null, "StorageServiceProperties");
  const cors = doc.createElement("Cors");
  for (const rule of rules) {
    const element = doc.createElement("CorsRule");
    for (const [tag, field] of CORS_FIELDS) {
      const value = doc.createElement(tag);
      value.textContent = rule[field];
      element.append(value);
    }
    cors.append(element);
  }
  doc.documentElement.append(cors);
  const xml = `<?xml version="1.0" encoding="utf-8"?>${new XMLSerializer().serializeToString(doc)}`;
  try {
    await call("PUT", SERVICE, xml, { "Content-Type": "application/xml" });
    say(done);
    await loadCors();
  } catch (error) { failed(error); }
}

function addCorsRule(event) {
  event.preventDefault();
  const rule = { origins: $("cors-origins").value.trim(), methods: $("cors-methods").value.trim(),
    headers: $("cors-headers").value.trim(), exposed: $("cors-exposed").value.trim(),
    maxAge: String(Number($("cors-max-age").value || 0)) };
  saveCors([...corsRules, rule], "CORS rule added.");
}

// The open table's stored access policies (Get and Set Table ACL through the REST endpoint, a
// manager's call): shown, added to and removed from; the whole list is set each time.
const POLICY_FIELDS = [["Start", "start"], ["Expiry", "expiry"], ["Permission", "permissions"]];
let policies = [];

async function loadPolicies() {
  try {
    const { text } = await call("GET", `${ACCOUNT}/${encodeURIComponent(current)}?comp=acl`);
    const xml = new DOMParser().parseFromString(text, "application/xml");
    policies = [...xml.getElementsByTagName("SignedIdentifier")].map((identifier) => {
      const kept = { id: (identifier.getElementsByTagName("Id")[0] || {}).textContent || "" };
      for (const [tag, field] of POLICY_FIELDS) kept[field] = (identifier.getElementsByTagName(tag)[0] || {}).textContent || "";
      return kept;
    });
    drawPolicies();
  } catch (error) {
    policies = [];
    $("policies").replaceChildren(el("li", error.message, "hint"));
  }
}

function drawPolicies() {
  const list = $("policies");
  list.replaceChildren();
  if (!policies.length) list.append(el("li", "No stored access policies.", "hint"));
  policies.forEach((policy, at) => {
    const item = el("li", `${policy.id} · ${policy.permissions || "no permissions"} · from ${policy.start || "any time"} · until ${policy.expiry || "no end"} `);
    const remove = el("button", "Remove");
    remove.type = "button";
    remove.dataset.policy = policy.id;
    remove.addEventListener("click", () => savePolicies(policies.filter((_, other) => other !== at), `Policy ${policy.id} removed.`));
    item.append(remove);
    list.append(item);
  });
}

async function savePolicies(kept, done) {
  const doc = document.implementation.createDocument(null, "SignedIdentifiers");
  for (const policy of kept) {
    const identifier = doc.createElement("SignedIdentifier");
    const id = doc.createElement("Id");
    id.textContent = policy.id;
    const access = doc.createElement("AccessPolicy");
    for (const [tag, field] of POLICY_FIELDS) {
      if (!policy[field]) continue;
      const value = doc.createElement(tag);
      value.textContent = policy[field];
      access.append(value);
    }
    identifier.append(id, access);
    doc.documentElement.append(identifier);
  }
  const xml = `<?xml version="1.0" encoding="utf-8"?>${new XMLSerializer().serializeToString(doc)}`;
  try {
    await call("PUT", `${ACCOUNT}/${encodeURIComponent(current)}?comp=acl`, xml, { "Content-Type": "application/xml" });
    say(done);
    await loadSettings();
  } catch (error) { failed(error); }
}

function addPolicy(event) {
  event.preventDefault();
  const policy = { id: $("policy-id").value.trim(), permissions: $("policy-permissions").value.trim(),
    start: $("policy-start").value.trim(), expiry: $("policy-expiry").value.trim() };
  savePolicies([...policies, policy], `Policy ${policy.id} added.`);
}

async function listTables(after) {
  try {
    const path = `${ACCOUNT}/Tables` + (after ? `?NextTableName=${encodeURIComponent(after)}` : "");
    const { json, headers } = await call("GET", path);
    for (const table of json.value) {
      const item = el("li");
      const open = el("button", table.TableName);
      open.dataset.table = table.TableName;
      open.addEventListener("click", () => openTable(table.TableName));
      item.append(open);
      $("table-list").append(item);
    }
    const next = headers.get("x-ms-continuation-NextTableName");
    $("more-tables").hidden = !next;
    $("more-tables").onclick = () => listTables(next);
  } catch (error) { failed(error); }
}

async function createTable(event) {
  event.preventDefault();
  const name = $("new-table").value.trim();
  try {
    await call("POST", `${ACCOUNT}/Tables`, { TableName: name }, { "Prefer": "return-no-content" });
    $("new-table").value = "";
    say(`Created table ${name}.`);
    current = null;
    await openTables();
    await openTable(name);
  } catch (error) { failed(error); }
}

async function deleteTable() {
  try {
    await call("DELETE", `${ACCOUNT}/Tables('${quote(current)}')`);
    say(`Deleted table ${current}.`);
    current = null;
    stopTail();
    await openTables();
  } catch (error) { failed(error); }
}

function quote(text) { return encodeURIComponent(String(text).replace(/'/g, "''")); }

async function openTable(name) {
  current = name;
  stopTail();
  show("table");
  $("table-name").textContent = name;
  $("query-form").reset();
  $("confirm-delete-table").hidden = true;
  $("editor").hidden = true;
  $("tail").replaceChildren();
  $("tail-state").textContent = "";
  await loadSettings();
  await runQuery();
}

async function loadSettings() {
  try {
    const { json } = await call("GET", `/console/tables/${encodeURIComponent(current)}`);
    drawSettings(json);
  } catch (error) { $("settings-body").replaceChildren(el("p", error.message, "hint")); }
  await loadPolicies();
}

// A table's settings as the console's calls describe them: the facts, the forms filled in, and
// the indexes with a drop button each (asked twice).
function drawSettings(json) {
  const body = $("settings-body");
  body.replaceChildren();
  const facts = el("p");
  const feed = json.changeFeed ? `kept ${json.changeFeed.retentionSeconds} s` + (json.changeFeed.beforeImages ? ", with before images" : "") : "off";
  const ttl = json.timeToLive ? (json.timeToLive.defaultSeconds ? `entities live ${json.timeToLive.defaultSeconds} s unless they say` : "per entity (TimeToLive property)") : "off";
  facts.textContent = `Change feed: ${feed}. Time to live: ${ttl}. Access policies: ${json.accessPolicies.length ? json.accessPolicies.join(", ") : "none"}.`;
  facts.id = "settings-facts";
  body.append(facts);
  $("feed-on").checked = !!json.changeFeed;
  $("feed-retention").value = json.changeFeed ? json.changeFeed.retentionSeconds : "";
  $("feed-before").checked = !!(json.changeFeed && json.changeFeed.beforeImages);
  $("ttl-on").checked = !!json.timeToLive;
  $("ttl-default").value = json.timeToLive ? json.timeToLive.defaultSeconds : "";
  const table = el("table");
  table.id = "index-table";
  const head = el("tr");
  for (const name of ["Index", "Paths", "Scope", "Unique", "State", ""]) head.append(el("th", name));
  table.append(head);
  for (const index of json.indexes) {
    const row = el("tr");
    const drop = el("button", "Drop");
    drop.type = "button";
    drop.dataset.index = index.name;
    drop.addEventListener("click", () => {
      if (drop.dataset.asked) { dropIndex(index.name); return; }
      drop.dataset.asked = "yes";
      drop.textContent = "Confirm: drop it";
      drop.className = "danger";
    });
    const dropCell = el("td");
    dropCell.append(drop);
    row.append(el("td", index.name), el("td", index.paths.join(", ")), el("td", index.scope),
      el("td", index.unique ? "yes" : "no"), el("td", index.state + (index.failure ? `: ${index.failure}` : "")), dropCell);
    table.append(row);
  }
  body.append(json.indexes.length ? table : el("p", "No declared indexes.", "hint"));
}

// A change of the open table's settings through a console call; the answer is the new settings.
async function changeSettings(method, path, body, done) {
  try {
    const { json } = await call(method, `/console/tables/${encodeURIComponent(current)}${path}`, body);
    drawSettings(json);
    say(done);
  } catch (error) { failed(error); }
}

function saveFeed(event) {
  event.preventDefault();
  const feed = $("feed-on").checked
    ? { retentionSeconds: Number($("feed-retention").value || 0), beforeImages: $("feed-before").checked }
    : null;
  changeSettings("PUT", "/settings", { changeFeed: feed }, feed ? "Change feed on." : "Change feed off.");
}

function saveTimeToLive(event) {
  event.preventDefault();
  const ttl = $("ttl-on").checked ? { defaultSeconds: Number($("ttl-default").value || 0) } : null;
  changeSettings("PUT", "/settings", { timeToLive: ttl }, ttl ? "Time to live on." : "Time to live off.");
}

function declareIndex(event) {
  event.preventDefault();
  const paths = $("index-paths").value.split(",").map((path) => path.trim()).filter((path) => path);
  const index = { name: $("index-name").value.trim(), paths, scope: $("index-scope").value, unique: $("index-unique").checked };
  changeSettings("POST", "/indexes", index, `Index ${index.name} declared; it is built in the background.`);
}

function dropIndex(name) {
  changeSettings("DELETE", `/indexes/${encodeURIComponent(name)}`, undefined, `Index ${name} dropped.`);
}

// Queries and the grid.
function queryFilter() {
  const parts = [];
  const partition = $("q-partition").value;
  const prefix = $("q-prefix").value;
  if (partition) parts.push(`PartitionKey eq '${partition.replace(/'/g, "''")}'`);
  if (prefix) {
    const last = prefix.codePointAt(prefix.length - 1);
    const end = prefix.slice(0, -1) + String.fromCodePoint(last + 1);
    parts.push(`RowKey ge '${prefix.replace(/'/g, "''")}' and RowKey lt '${end.replace(/'/g, "''")}'`);
  }
  const filter = $("q-filter").value.trim();
  if (filter) parts.push(parts.length ? `(${filter})` : filter);
  return parts.join(" and ");
}

async function runQuery(event, token) {
  if (event) event.preventDefault();
  // Encoded by encodeURIComponent, not URLSearchParams: the endpoint reads `+` as a plus, as
  // Azure does, not as a space.
  const params = new Map();
  const filter = queryFilter();
  if (filter) params.set("$filter", filter);
  if ($("q-select").value.trim()) params.set("$select", $("q-select").value.trim());
  if ($("q-order").value.trim()) params.set("$orderby", $("q-order").value.trim());
  params.set("$top", $("q-top").value || "50");
  if (token) { params.set("NextPartitionKey", token); params.set("NextRowKey", "next"); }
  try {
    const query = [...params].map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&");
    const { json, headers } = await call("GET", `${ACCOUNT}/${encodeURIComponent(current)}()?${query}`);
    drawGrid(json.value);
    pageToken = headers.get("x-ms-continuation-NextPartitionKey");
    $("next-page").hidden = !pageToken;
    $("page-stats").textContent = `plan ${headers.get("x-trestle-plan") || "?"} · examined ${headers.get("x-trestle-examined") || "?"} · ${json.value.length} shown` + (pageToken ? " · more pages" : "");
    if (event) say("");
  } catch (error) { failed(error); }
}

// The properties of an entity in full metadata: [name, value, type] without the annotations.
function properties(entity) {
  const out = [];
  for (const [name, value] of Object.entries(entity)) {
    if (name.startsWith("odata.") || name.endsWith("@odata.type")) continue;
    out.push([name, value, entity[`${name}@odata.type`] || typeOfJson(value)]);
  }
  return out;
}

function typeOfJson(value) {
  if (value === null) return "null";
  if (typeof value === "boolean") return "Edm.Boolean";
  if (typeof value === "number") return Number.isInteger(value) ? "Edm.Int32" : "Edm.Double";
  return "Edm.String";
}

// A cell showing a value as its type: numbers, dates, GUIDs, binary and booleans as themselves,
// a document (a string holding a JSON object or array) expandable.
function cell(value, type) {
  const td = el("td");
  const short = type.replace("Edm.", "");
  if (value === null || value === undefined) { td.append(el("span", "null", "v-null")); return td; }
  if (short === "String" && /^[\[{]/.test(value)) {
    try {
      const parsed = JSON.parse(value);
      const details = el("details", null, "doc");
      details.append(el("summary", Array.isArray(parsed) ? `array [${parsed.length}]` : `document {${Object.keys(parsed).length}}`));
      details.append(el("pre", JSON.stringify(parsed, null, 2)));
      details.addEventListener("click", (e) => e.stopPropagation());
      td.append(details);
      return td;
    } catch (_) { /* a string that only looks like JSON */ }
  }
  td.append(el("span", String(value), `v-${short}`));
  if (short !== "String") td.append(el("span", short, "t"));
  return td;
}

function drawGrid(entities) {
  const columns = ["PartitionKey", "RowKey", "Timestamp"];
  for (const entity of entities) {
    for (const [name] of properties(entity)) if (!columns.includes(name)) columns.push(name);
  }
  const head = el("tr");
  for (const name of columns) head.append(el("th", name));
  $("grid").tHead.replaceChildren(head);
  const rows = entities.map((entity) => {
    const row = el("tr");
    const typed = Object.fromEntries(properties(entity).map(([n, v, t]) => [n, [v, t]]));
    for (const name of columns) {
      const [value, type] = typed[name] || [undefined, "Edm.String"];
      row.append(name === "Timestamp" ? cell(value, "Edm.DateTime") : cell(value, type));
    }
    row.dataset.partitionKey = entity.PartitionKey;
    row.dataset.rowKey = entity.RowKey;
    row.addEventListener("click", () => openEntity(entity));
    return row;
  });
  $("grid").tBodies[0].replaceChildren(...rows);
}

// The entity editor.
function editable(entity) {
  const out = {};
  for (const [name, value] of Object.entries(entity)) {
    if (name.startsWith("odata.") || name === "Timestamp" || name === "Timestamp@odata.type") continue;
    out[name] = value;
  }
  return out;
}

function openEntity(entity) {
  editing = { partitionKey: entity.PartitionKey, rowKey: entity.RowKey, etag: entity["odata.etag"] };
  $("editor").hidden = false;
  $("editor-title").textContent = `Entity (${entity.PartitionKey}, ${entity.RowKey})`;
  $("editor-etag").textContent = editing.etag || "";
  $("editor-text").value = JSON.stringify(editable(entity), null, 2);
  $("save-entity").hidden = $("delete-entity").hidden = false;
  $("insert-entity").hidden = true;
}

function newEntity() {
  editing = null;
  $("editor").hidden = false;
  $("editor-title").textContent = "New entity";
  $("editor-etag").textContent = "";
  $("editor-text").value = JSON.stringify({ PartitionKey: $("q-partition").value || "", RowKey: "" }, null, 2);
  $("save-entity").hidden = $("delete-entity").hidden = true;
  $("insert-entity").hidden = false;
}

function editedEntity() {
  try { return JSON.parse($("editor-text").value); } catch (error) { throw new Error(`The entity is not JSON: ${error.message}`); }
}

function entityPath(partitionKey, rowKey) {
  return `${ACCOUNT}/${encodeURIComponent(current)}(PartitionKey='${quote(partitionKey)}',RowKey='${quote(rowKey)}')`;
}

async function saveEntity() {
  try {
    const entity = editedEntity();
    await call("PUT", entityPath(editing.partitionKey, editing.rowKey), entity, { "If-Match": editing.etag });
    say(`Saved (${editing.partitionKey}, ${editing.rowKey}).`);
    $("editor").hidden = true;
    await runQuery();
  } catch (error) { failed(error); }
}

async function insertEntity() {
  try {
    const entity = editedEntity();
    await call("POST", `${ACCOUNT}/${encodeURIComponent(current)}`, entity, { "Prefer": "return-no-content" });
    say(`Inserted (${entity.PartitionKey}, ${entity.RowKey}).`);
    $("editor").hidden = true;
    await runQuery();
  } catch (error) { failed(error); }
}

async function deleteEntity() {
  try {
    await call("DELETE", entityPath(editing.partitionKey, editing.rowKey), undefined, { "If-Match": editing.etag });
    say(`Deleted (${editing.partitionKey}, ${editing.rowKey}).`);
    $("editor").hidden = true;
    await runQuery();
  } catch (error) { failed(error); }
}

// The change feed's live tail: polls the console's feed read once a second from where it left.
async function startTail() {
  stopTail();
  $("tail-start").hidden = true;
  $("tail-stop").hidden = false;
  const table = current;
  let after = null;
  const poll = async () => {
    try {
      const query = after ? `?after=${encodeURIComponent(after)}` : "";
      const { json } = await call("GET", `/console/tables/${encodeURIComponent(table)}/changes${query}`);
      after = json.next;
      for (const record of json.records) {
        const item = el("li");
        item.append(el("span", record.kind, "kind"), el("span", `(${record.partitionKey}, ${record.rowKey}) at ${record.position} `));
        if (record.entity) item.append(el("span", JSON.stringify(editable(record.entity)), "hint"));
        $("tail").prepend(item);
      }
      while ($("tail").children.length > 200) $("tail").lastChild.remove();
      $("tail-state").textContent = `following from ${after}`;
      tailTimer = setTimeout(poll, 1000);
    } catch (error) {
      $("tail-state").textContent = error.message;
      stopTail();
    }
  };
  await poll();
}

function stopTail() {
  if (tailTimer) clearTimeout(tailTimer);
  tailTimer = null;
  $("tail-start").hidden = false;
  $("tail-stop").hidden = true;
}

// The dashboard: request rates and mean latency by protocol, from /console/metrics.
const history = [];

function sampleSum(text, name, labels) {
  let sum = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (!(rest.startsWith("{") || rest.startsWith(" "))) continue;
    if (labels.every((label) => line.includes(label))) sum += Number(line.slice(line.lastIndexOf(" ") + 1)) || 0;
  }
  return sum;
}

async function openDashboard() {
  stopTail();
  show("dashboard");
  history.length = 0;
  await sampleMetrics();
}

async function sampleMetrics() {
  try {
    const { text } = await call("GET", "/console/metrics");
    const now = Date.now() / 1000;
    const point = { at: now };
    for (const protocol of ["grpc", "rest"]) {
      const label = `protocol="${protocol}"`;
      point[protocol] = sampleSum(text, "trestle_requests_total", [label]);
      point[`${protocol}_sum`] = sampleSum(text, "trestle_request_duration_seconds_sum", [label]);
      point[`${protocol}_count`] = sampleSum(text, "trestle_request_duration_seconds_count", [label]);
    }
    point.inFlight = sampleSum(text, "trestle_requests_in_flight", []);
    history.push(point);
    if (history.length > 61) history.shift();
    drawDashboard();
    dashboardTimer = setTimeout(sampleMetrics, 2000);
  } catch (error) { failed(error); }
}

function stopDashboard() {
  if (dashboardTimer) clearTimeout(dashboardTimer);
  dashboardTimer = null;
}

function drawDashboard() {
  const rates = { grpc: [], rest: [] };
  const latency = { grpc: [], rest: [] };
  for (let i = 1; i < history.length; i++) {
    const [a, b] = [history[i - 1], history[i]];
    const seconds = Math.max(b.at - a.at, 0.001);
    for (const protocol of ["grpc", "rest"]) {
      rates[protocol].push((b[protocol] - a[protocol]) / seconds);
      const count = b[`${protocol}_count`] - a[`${protocol}_count`];
      latency[protocol].push(count > 0 ? 1000 * (b[`${protocol}_sum`] - a[`${protocol}_sum`]) / count : 0);
    }
  }
  chart($("chart-rate"), rates);
  chart($("chart-latency"), latency);
  const last = history[history.length - 1];
  const rows = [["gRPC requests", last.grpc], ["REST requests", last.rest], ["in flight", last.inFlight]]
    .map(([name, value]) => { const row = el("tr"); row.append(el("td", name), el("td", value)); return row; });
  $("dashboard-numbers").tBodies[0].replaceChildren(...rows);
}

const COLORS = { grpc: "#2f5bd3", rest: "#d97706" };

function chart(svg, series) {
  const ns = "http://www.w3.org/2000/svg";
  const max = Math.max(1, ...Object.values(series).flat());
  const children = [];
  for (const [name, values] of Object.entries(series)) {
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("stroke", COLORS[name]);
    line.setAttribute("points", values.map((v, i) => `${(i * 600) / 60},${150 - (v / max) * 140}`).join(" "));
    children.push(line);
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", name === "grpc" ? 8 : 60);
    label.setAttribute("y", 12);
    label.setAttribute("fill", COLORS[name]);
    label.textContent = name;
    children.push(label);
  }
  const top = document.createElementNS(ns, "text");
  top.setAttribute("x", 540); top.setAttribute("y", 12);
  top.textContent = `max ${max.toFixed(max < 10 ? 2 : 0)}`;
  children.push(top);
  svg.replaceChildren(...children);
}

// Wiring.
document.addEventListener("DOMContentLoaded", async () => {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("go-tables").addEventListener("click", () => { current = null; openTables(); });
  $("go-dashboard").addEventListener("click", openDashboard);
  $("create-table-form").addEventListener("submit", createTable);
  $("delete-table").addEventListener("click", () => { $("confirm-delete-table").hidden = false; });
  $("confirm-delete-table").addEventListener("click", deleteTable);
  $("query-form").addEventListener("submit", (event) => runQuery(event));
  $("next-page").addEventListener("click", () => runQuery(null, pageToken));
  $("new-entity").addEventListener("click", newEntity);
  $("save-entity").addEventListener("click", saveEntity);
  $("insert-entity").addEventListener("click", insertEntity);
  $("delete-entity").addEventListener("click", deleteEntity);
  $("close-editor").addEventListener("click", () => { $("editor").hidden = true; });
  $("tail-start").addEventListener("click", startTail);
  $("tail-stop").addEventListener("click", stopTail);
  $("feed-form").addEventListener("submit", saveFeed);
  $("ttl-form").addEventListener("submit", saveTimeToLive);
  $("index-form").addEventListener("submit", declareIndex);
  $("cors-form").addEventListener("submit", addCorsRule);
  $("policy-form").addEventListener("submit", addPolicy);
  try {
    const answer = await fetch("/session", { credentials: "same-origin" });
    if (answer.ok) { signedIn(await answer.json()); return; }
  } catch (_) { /* not signed in */ }
  show("sign-in");
});
