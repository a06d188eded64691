// The official JS SDK (@azure/data-tables) against Trestle's REST endpoint. Run by
// tests/azure_sdk.rs with TRESTLE_REST_ENDPOINT set to the endpoint's account URL.

import assert from "node:assert/strict";
import {
  AzureNamedKeyCredential,
  AzureSASCredential,
  TableClient,
  TableServiceClient,
  generateAccountSas,
  generateTableSas,
  odata,
} from "@azure/data-tables";

const DEV_KEY =
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const connection =
  "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
  `AccountKey=${DEV_KEY};TableEndpoint=${process.env.TRESTLE_REST_ENDPOINT};`;
const options = { allowInsecureConnection: true };

async function rejects(status, action) {
  await assert.rejects(action, (error) => {
    assert.equal(error.statusCode, status, String(error));
    return true;
  });
}

async function tables() {
  const service = TableServiceClient.fromConnectionString(connection, options);
  await service.createTable("JsTables");
  const names = [];
  for await (const table of service.listTables()) names.push(table.name);
  assert.ok(names.includes("JsTables"), names.join());
  await service.deleteTable("JsTables");
}

async function entities() {
  const table = TableClient.fromConnectionString(connection, "JsEntities", options);
  await table.createTable();
  const created = await table.createEntity({ partitionKey: "p", rowKey: "1", name: "Ada", age: 36 });
  assert.ok(created.etag);
  await rejects(409, () => table.createEntity({ partitionKey: "p", rowKey: "1" }));
  // A body over Azure's 4 MiB: the SDK, which writes its whole body before it reads, gets the 413.
  const big = { partitionKey: "p", rowKey: "big" };
  for (let n = 0; n < 160; n++) big[`P${n}`] = "x".repeat(30_000);
  await rejects(413, () => table.createEntity(big));
  let got = await table.getEntity("p", "1");
  assert.equal(got.name, "Ada");
  assert.equal(got.age, 36);
  const etag = got.etag;

  await table.updateEntity({ partitionKey: "p", rowKey: "1", age: 37 }, "Merge");
  got = await table.getEntity("p", "1");
  assert.equal(got.name, "Ada");
  assert.equal(got.age, 37);
  await rejects(412, () =>
    table.updateEntity({ partitionKey: "p", rowKey: "1", age: 1 }, "Replace", { etag }),
  );
  await table.upsertEntity({ partitionKey: "p", rowKey: "2", name: "Grace" }, "Replace");
  await table.deleteEntity("p", "2");
  await rejects(404, () => table.getEntity("p", "2"));

  for (let n = 0; n < 12; n++) {
    await table.createEntity({ partitionKey: "q", rowKey: String(n).padStart(2, "0"), n });
  }
  const found = [];
  const filter = odata`PartitionKey eq ${"q"} and n ge ${5}`;
  for await (const entity of table.listEntities({ queryOptions: { filter } })) found.push(entity.n);
  assert.deepEqual(found, [5, 6, 7, 8, 9, 10, 11]);
  // As Azure: `select` returns only what it names, not the keys either.
  const selected = [];
  const onlyN = { queryOptions: { filter: odata`n eq ${5}`, select: ["n"] } };
  for await (const entity of table.listEntities(onlyN)) selected.push(entity);
  assert.equal(selected.length, 1);
  assert.equal(selected[0].n, 5);
  assert.equal(selected[0].partitionKey, undefined, JSON.stringify(selected[0]));
  assert.equal(selected[0].rowKey, undefined, JSON.stringify(selected[0]));
  let pages = 0;
  let total = 0;
  for await (const page of table.listEntities().byPage({ maxPageSize: 5 })) {
    pages += 1;
    total += page.length;
  }
  assert.equal(total, 13);
  assert.equal(pages, 3);
  await table.deleteTable();
}

async function batches() {
  const table = TableClient.fromConnectionString(connection, "JsBatch", options);
  await table.createTable();
  const actions = [];
  for (let n = 0; n < 100; n++) {
    actions.push(["create", { partitionKey: "b", rowKey: String(n).padStart(3, "0"), n }]);
  }
  const result = await table.submitTransaction(actions);
  assert.equal(result.status, 202);
  assert.equal(result.subResponses.length, 100);
  assert.ok(result.subResponses[0].etag);
  // Each sub-response names its entity's RowKey.
  assert.equal(result.subResponses[7].rowKey, "007");
  // The JS SDK sends a batch's inserts with `Prefer: return-no-content`: 204, as on Azure (the
  // Python SDK sends none and gets 201 with the entity).
  assert.equal(result.getResponseForEntity("042").status, 204);
  // A duplicate second insert: nothing is written.
  await rejects(409, () =>
    table.submitTransaction([
      ["create", { partitionKey: "b", rowKey: "new" }],
      ["create", { partitionKey: "b", rowKey: "000" }],
    ]),
  );
  await rejects(404, () => table.getEntity("b", "new"));
  await table.deleteTable();
}

async function types() {
  const table = TableClient.fromConnectionString(connection, "JsTypes", options);
  await table.createTable();
  const when = new Date(Date.UTC(2024, 1, 29, 12, 30, 45, 123));
  await table.createEntity({
    partitionKey: "typed",
    rowKey: "all",
    text: "héllo",
    int64: { value: "9007199254740993", type: "Int64" },
    double: { value: "1.0", type: "Double" },
    when,
    // 100 ns precision, which a JavaScript Date cannot hold: sent and read back as text.
    ticks: { value: "2024-02-29T12:30:45.1234567Z", type: "DateTime" },
    guid: { value: "6f9619ff-8b86-d011-b42d-00c04fc964ff", type: "Guid" },
    bytes: new Uint8Array([0, 1, 254, 255]),
    flag: true,
  });
  const got = await table.getEntity("typed", "all", { disableTypeConversion: true });
  assert.equal(got.text.value, "héllo");
  assert.deepEqual(got.int64, { value: "9007199254740993", type: "Int64" });
  assert.equal(got.double.type, "Double");
  assert.equal(Number(got.double.value), 1);
  assert.equal(got.when.type, "DateTime");
  assert.equal(new Date(got.when.value).getTime(), when.getTime());
  assert.deepEqual(got.ticks, { value: "2024-02-29T12:30:45.1234567Z", type: "DateTime" });
  const filtered = table.listEntities({
    queryOptions: { filter: "ticks gt datetime'2024-02-29T12:30:45.1234566Z'" },
  });
  let matched = 0;
  for await (const entity of filtered) matched += entity.rowKey === "all" ? 1 : 0;
  assert.equal(matched, 1, "a DateTime literal compares at 100 ns");
  assert.deepEqual(got.guid, { value: "6f9619ff-8b86-d011-b42d-00c04fc964ff", type: "Guid" });
  assert.equal(got.bytes.type, "Binary");
  assert.equal(got.bytes.value, "AAH+/w==");
  await table.deleteTable();
}

// SAS made by the SDK: the granted reads work, writes and other partitions are refused.
async function sharedAccessSignatures() {
  const table = TableClient.fromConnectionString(connection, "JsSas", options);
  await table.createTable();
  for (const pk of ["a", "b"]) await table.createEntity({ partitionKey: pk, rowKey: "1", n: 1 });
  const credential = new AzureNamedKeyCredential("devstoreaccount1", DEV_KEY);
  const expiresOn = new Date(Date.now() + 3600_000);
  const endpoint = process.env.TRESTLE_REST_ENDPOINT;
  const sas = generateTableSas("JsSas", credential, {
    permissions: { query: true },
    expiresOn,
    startPartitionKey: "b",
    endPartitionKey: "b",
  });
  const limited = new TableClient(endpoint, "JsSas", new AzureSASCredential(sas), options);
  assert.equal((await limited.getEntity("b", "1")).n, 1);
  await rejects(403, () => limited.getEntity("a", "1"));
  await rejects(403, () => limited.createEntity({ partitionKey: "b", rowKey: "2" }));
  const accountSas = generateAccountSas(credential, {
    permissions: { read: true, list: true },
    resourceTypes: "co",
    expiresOn,
  });
  const account = new TableServiceClient(endpoint, new AzureSASCredential(accountSas), options);
  const names = [];
  for await (const t of account.listTables()) names.push(t.name);
  assert.ok(names.includes("JsSas"), names.join());
  await rejects(403, () => account.createTable("JsSasNew"));
  await table.deleteTable();
}

async function settings() {
  const service = TableServiceClient.fromConnectionString(connection, options);
  const rule = {
    allowedOrigins: "http://js.example",
    allowedMethods: "GET,PUT",
    allowedHeaders: "x-ms-*",
    exposedHeaders: "x-ms-*",
    maxAgeInSeconds: 60,
  };
  await service.setProperties({ cors: [rule] });
  const properties = await service.getProperties();
  assert.equal(properties.cors.length, 1);
  assert.equal(properties.cors[0].allowedOrigins, "http://js.example");
  assert.equal(properties.cors[0].maxAgeInSeconds, 60);
  await service.setProperties({ cors: [] });
  assert.equal((await service.getProperties()).cors.length, 0);
  // Statistics from the secondary location, signed as the SDK sends them there.
  const endpoint = process.env.TRESTLE_REST_ENDPOINT;
  const secondary = TableServiceClient.fromConnectionString(
    connection.replace(`TableEndpoint=${endpoint};`, `TableEndpoint=${endpoint}-secondary;`),
    options,
  );
  const stats = await secondary.getStatistics();
  assert.equal(stats.geoReplication.status, "live");
  await rejects(400, () => service.getStatistics());

  // A stored access policy, and a SAS naming it until it is removed.
  const table = TableClient.fromConnectionString(connection, "JsAcl", options);
  await table.createTable();
  await table.createEntity({ partitionKey: "p", rowKey: "1", n: 1 });
  const expiry = new Date(Date.now() + 3600_000);
  await table.setAccessPolicy([{ id: "readers", accessPolicy: { permission: "r", expiry } }]);
  const acl = await table.getAccessPolicy();
  assert.equal(acl.length, 1);
  assert.equal(acl[0].id, "readers");
  assert.equal(acl[0].accessPolicy.permission, "r");
  const credential = new AzureNamedKeyCredential("devstoreaccount1", DEV_KEY);
  const sas = generateTableSas("JsAcl", credential, { identifier: "readers" });
  const named = new TableClient(endpoint, "JsAcl", new AzureSASCredential(sas), options);
  assert.equal((await named.getEntity("p", "1")).n, 1);
  await table.setAccessPolicy([]);
  await rejects(403, () => named.getEntity("p", "1"));
  await table.deleteTable();
}

// A document property (written over gRPC by tests/azure_sdk.rs) reads as a string holding the
// document's JSON text.
async function documents() {
  const table = TableClient.fromConnectionString(connection, "Docs", options);
  const got = await table.getEntity("people", "ada");
  const listed = [];
  for await (const entity of table.listEntities()) listed.push(entity);
  assert.equal(listed.length, 1);
  for (const entity of [got, listed[0]]) {
    assert.equal(entity.Name, "Ada");
    assert.equal(typeof entity.Address, "string");
    assert.deepEqual(JSON.parse(entity.Address), {
      Big: "1152921504606846977",
      City: "Seattle",
      Gone: null,
      Id: "00112233-4455-6677-8899-aabbccddeeff",
      Ok: true,
      Ratio: 1,
      Raw: "AQI=",
      Since: "2024-02-29T12:30:45.1234567Z",
      Zip: 98101,
    });
    assert.deepEqual(JSON.parse(entity.Tags), ["x", 2, null, []]);
  }
}

// Fills TRESTLE_SEED_TABLE with TRESTLE_SEED_COUNT entities of every type in 7 partitions, in
// transactions (tests/cli_tool.rs copies them into Trestle and compares each with its own
// reckoning of entity i).
async function seed() {
  const count = Number(process.env.TRESTLE_SEED_COUNT);
  const table = TableClient.fromConnectionString(connection, process.env.TRESTLE_SEED_TABLE, options);
  await table.createTable();
  const partitions = new Map();
  for (let i = 0; i < count; i++) {
    const partitionKey = `p${i % 7}`;
    const entity = {
      partitionKey,
      rowKey: `r${String(i).padStart(6, "0")}`,
      Name: `entity ${i}`,
      Count: i,
      Big: { value: String(9007199254740993n + BigInt(i)), type: "Int64" },
      Ratio: i + 0.25,
      Whole: { value: "2", type: "Double" },
      When: { value: "2024-02-29T12:30:45.1234567Z", type: "DateTime" },
      Id: { value: "00112233-4455-6677-8899-aabbccddeeff", type: "Guid" },
      Raw: new Uint8Array([i % 256, 1, 255]),
      Even: i % 2 === 0,
    };
    if (!partitions.has(partitionKey)) partitions.set(partitionKey, []);
    partitions.get(partitionKey).push(["create", entity]);
  }
  for (const actions of partitions.values()) {
    for (let at = 0; at < actions.length; at += 100) {
      await table.submitTransaction(actions.slice(at, at + 100));
    }
  }
}

if (process.argv[2] === "seed") {
  await seed();
  console.log("js sdk, seed: ok");
  process.exit(0);
}

// Over https (the CA trusted through NODE_EXTRA_CA_CERTS): a table, an entity, a query.
if (process.argv[2] === "tls") {
  const secure = connection.replace("DefaultEndpointsProtocol=http;", "DefaultEndpointsProtocol=https;");
  const table = TableClient.fromConnectionString(secure, "JsTls");
  await table.createTable();
  await table.createEntity({ partitionKey: "p", rowKey: "r", note: "over TLS" });
  assert.equal((await table.getEntity("p", "r")).note, "over TLS");
  const found = [];
  for await (const entity of table.listEntities()) found.push(entity.rowKey);
  assert.deepEqual(found, ["r"]);
  await table.deleteTable();
  console.log("js sdk, tls: ok");
  process.exit(0);
}

// OAuth bearer tokens through a TokenCredential (over https, which the SDK requires for them).
if (process.argv[2] === "oauth") {
  const asked = new Set();
  const minted = (variable) => ({
    getToken: async (scopes) => {
      for (const scope of [scopes].flat()) asked.add(scope);
      return { token: process.env[variable], expiresOnTimestamp: Date.now() + 3_600_000 };
    },
  });
  const endpoint = process.env.TRESTLE_REST_ENDPOINT;
  const table = new TableClient(endpoint, "JsOauth", minted("TRESTLE_OAUTH_CONTRIBUTOR"));
  await table.createTable();
  await table.createEntity({ partitionKey: "p", rowKey: "r", note: "by token" });
  assert.deepEqual([...asked], ["https://storage.azure.com/.default"]);
  const reader = new TableClient(endpoint, "JsOauth", minted("TRESTLE_OAUTH_READER"));
  assert.equal((await reader.getEntity("p", "r")).note, "by token");
  const refusedWith = (status, code) => (error) => {
    assert.equal(error.statusCode, status, String(error));
    assert.equal(error.response?.headers.get("x-ms-error-code"), code, String(error));
    return true;
  };
  await assert.rejects(
    () => reader.createEntity({ partitionKey: "p", rowKey: "s" }),
    refusedWith(403, "AuthorizationPermissionMismatch"),
  );
  const expired = new TableClient(endpoint, "JsOauth", minted("TRESTLE_OAUTH_EXPIRED"));
  await assert.rejects(() => expired.getEntity("p", "r"), refusedWith(401, "InvalidAuthenticationInfo"));
  await table.deleteTable();
  console.log("js sdk, oauth: ok");
  process.exit(0);
}

if (process.argv[2] === "documents") {
  await documents();
  console.log("js sdk, documents: ok");
  process.exit(0);
}

await tables();
await entities();
await batches();
await types();
await sharedAccessSignatures();
await settings();
console.log("js sdk: ok");
