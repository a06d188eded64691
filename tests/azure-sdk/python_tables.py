"""The official Python SDK (azure-data-tables) against Trestle's REST endpoint.

Run by tests/azure_sdk.rs with TRESTLE_REST_ENDPOINT set to the endpoint's account URL. Leaves
table CrossProtocol with entity (typed, "all") for the Rust side to read over gRPC. With the
argument `keyed`, runs against a server with a key file instead: TRESTLE_ACCOUNT_KEY is its key
as a connection string carries it, and the development key must be refused.
"""

import datetime
import json
import os
import sys
import time
import uuid

import requests

from azure.core import MatchConditions
from azure.core.credentials import AccessToken, AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import (
    AccountSasPermissions,
    TableCorsRule,
    TableAnalyticsLogging,
    EdmType,
    EntityProperty,
    ResourceTypes,
    TableAccessPolicy,
    TableClient,
    TableServiceClient,
    TableTransactionError,
    UpdateMode,
    generate_account_sas,
    generate_table_sas,
)

DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


ENDPOINT = os.environ["TRESTLE_REST_ENDPOINT"]
HOUR = datetime.timedelta(hours=1)


def connect(key=DEV_KEY):
    protocol = "https" if ENDPOINT.startswith("https:") else "http"
    return TableServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol={protocol};AccountName=devstoreaccount1;"
        f"AccountKey={key};TableEndpoint={ENDPOINT};"
    )


def over_tls(service):
    """Over https (the CA trusted through REQUESTS_CA_BUNDLE): a table, an entity, a query."""
    table = service.create_table("PyTls")
    table.create_entity({"PartitionKey": "p", "RowKey": "r", "Note": "over TLS"})
    assert table.get_entity("p", "r")["Note"] == "over TLS"
    assert [e["RowKey"] for e in table.query_entities("Note eq 'over TLS'")] == ["r"]
    service.delete_table("PyTls")


def refused(code, action):
    """Runs action, which must fail with HTTP 403 and Azure's error code `code`."""
    try:
        action()
    except HttpResponseError as error:
        assert error.status_code == 403, (error.status_code, str(error))
        given = error.response.headers.get("x-ms-error-code")
        assert given == code, (given, code, str(error))
        return
    raise AssertionError(f"expected a refusal with {code}")


def expect(error, action):
    try:
        action()
    except error:
        return
    raise AssertionError(f"expected {error.__name__}")


def tables(service):
    table = service.create_table("PyTables")
    expect(ResourceExistsError, lambda: service.create_table("pytables"))
    names = [t.name for t in service.list_tables()]
    assert "PyTables" in names, names
    service.create_table("PyTablesToo")
    named = [t.name for t in service.query_tables("TableName eq @name", parameters={"name": "PyTables"})]
    assert named == ["PyTables"], named
    ranged = [t.name for t in service.query_tables("TableName ge 'PyTables' and TableName lt 'PyTablet'")]
    assert ranged == ["PyTables", "PyTablesToo"], ranged
    paged = service.query_tables("TableName ge 'Py'", results_per_page=1).by_page()
    assert sum(len(list(page)) for page in paged) >= 2
    expect(HttpResponseError, lambda: list(service.query_tables("TableName eq")))
    service.delete_table("PyTablesToo")
    service.delete_table("PyTables")
    assert "PyTables" not in [t.name for t in service.list_tables()]
    return table


def entities(service):
    table = service.create_table("PyEntities")
    created = table.create_entity({"PartitionKey": "p", "RowKey": "1", "Name": "Ada", "Age": 36})
    assert created["etag"], created
    expect(ResourceExistsError, lambda: table.create_entity({"PartitionKey": "p", "RowKey": "1"}))
    got = table.get_entity("p", "1")
    assert got["Name"] == "Ada" and got["Age"] == 36, got
    etag = got.metadata["etag"]
    # A body over Azure's 4 MiB is answered 413 RequestBodyTooLarge, and nothing is written.
    big = {"PartitionKey": "p", "RowKey": "big"}
    big.update({f"P{n}": "x" * 30_000 for n in range(160)})
    try:
        table.create_entity(big)
        raise AssertionError("a body over 4 MiB was taken")
    except HttpResponseError as error:
        assert error.status_code == 413, (error.status_code, str(error))
        given = error.response.headers.get("x-ms-error-code")
        assert given == "RequestBodyTooLarge", (given, str(error))
    expect(ResourceNotFoundError, lambda: table.get_entity("p", "big"))

    table.update_entity({"PartitionKey": "p", "RowKey": "1", "Age": 37}, mode=UpdateMode.MERGE)
    got = table.get_entity("p", "1")
    assert got["Name"] == "Ada" and got["Age"] == 37, got
    expect(
        ResourceModifiedError,
        lambda: table.update_entity(
            {"PartitionKey": "p", "RowKey": "1", "Age": 1},
            mode=UpdateMode.REPLACE,
            etag=etag,
            match_condition=MatchConditions.IfNotModified,
        ),
    )
    table.update_entity({"PartitionKey": "p", "RowKey": "1", "Age": 38}, mode=UpdateMode.REPLACE)
    got = table.get_entity("p", "1")
    assert "Name" not in got and got["Age"] == 38, got

    table.upsert_entity({"PartitionKey": "p", "RowKey": "2", "Name": "Grace"}, mode=UpdateMode.MERGE)
    table.upsert_entity({"PartitionKey": "p", "RowKey": "2", "Age": 45}, mode=UpdateMode.MERGE)
    got = table.get_entity("p", "2")
    assert got["Name"] == "Grace" and got["Age"] == 45, got
    table.upsert_entity({"PartitionKey": "p", "RowKey": "2", "Age": 46}, mode=UpdateMode.REPLACE)
    assert "Name" not in table.get_entity("p", "2")

    table.delete_entity("p", "2")
    expect(ResourceNotFoundError, lambda: table.get_entity("p", "2"))
    expect(ResourceNotFoundError, lambda: service.get_table_client("Missing").get_entity("p", "1"))

    for n in range(25):
        table.create_entity({"PartitionKey": "q", "RowKey": f"{n:02}", "N": n, "Even": n % 2 == 0})
    found = list(table.query_entities("PartitionKey eq 'q' and N ge @low", parameters={"low": 10}))
    assert [e["N"] for e in found] == list(range(10, 25)), found
    found = list(table.query_entities("Even eq true and N lt 6", select=["N"]))
    assert [e["N"] for e in found] == [0, 2, 4] and "Even" not in found[0], found
    # As Azure: only what `select` names, not the keys either.
    assert "PartitionKey" not in found[0] and "RowKey" not in found[0], found
    # Azure's leniencies: a lone `true` or `false` (health checks send it), booleans in any case.
    assert len(list(table.query_entities("true"))) == 26
    assert list(table.query_entities("false")) == []
    found = list(table.query_entities("PartitionKey eq 'q' and Even eq True and N lt 4"))
    assert [e["N"] for e in found] == [0, 2], found
    # Pages of 7 follow the continuation headers to the end.
    pages = table.list_entities(results_per_page=7).by_page()
    sizes = [len(list(page)) for page in pages]
    assert sum(sizes) == 26 and max(sizes) == 7, sizes
    expect(HttpResponseError, lambda: list(table.query_entities("N eq eq")))
    service.delete_table("PyEntities")


def batches(service):
    table = service.create_table("PyBatch")
    table.create_entity({"PartitionKey": "b", "RowKey": "gone", "N": 0})
    operations = [("create", {"PartitionKey": "b", "RowKey": f"{n:03}", "N": n}) for n in range(98)]
    operations.append(("upsert", {"PartitionKey": "b", "RowKey": "extra", "N": -1}))
    operations.append(("delete", {"PartitionKey": "b", "RowKey": "gone"}))
    answered = []

    def keep(response):
        response.http_response.read()  # cached: the SDK parses the same bytes after
        answered.append(response.http_response.text())

    results = table.submit_transaction(operations, raw_response_hook=keep)
    assert len(results) == 100 and results[0]["etag"], results[:2]
    # The SDK sends a batch's inserts without `Prefer: return-no-content`: as on Azure, each
    # insert's part is 201 Created with the entity, the upsert's and the delete's 204.
    parts = answered[0]
    assert parts.count("HTTP/1.1 201 Created") == 98, parts[:2000]
    assert parts.count("HTTP/1.1 204 No Content") == 2, parts[:2000]
    assert '"RowKey":"097"' in parts, parts[:2000]
    assert len(list(table.query_entities("PartitionKey eq 'b'"))) == 99

    # The second operation fails: nothing is written, and the error names its index.
    failing = [
        ("create", {"PartitionKey": "b", "RowKey": "new"}),
        ("create", {"PartitionKey": "b", "RowKey": "000"}),
        ("update", {"PartitionKey": "b", "RowKey": "001", "N": 7}, {"mode": UpdateMode.MERGE}),
    ]
    try:
        table.submit_transaction(failing)
        raise AssertionError("the batch should fail")
    except TableTransactionError as error:
        assert error.index == 1, (error.index, str(error))
        assert error.error_code == "EntityAlreadyExists", error.error_code
    expect(ResourceNotFoundError, lambda: table.get_entity("b", "new"))
    assert table.get_entity("b", "001")["N"] == 1
    service.delete_table("PyBatch")


def types(service):
    table = service.create_table("CrossProtocol")
    when = datetime.datetime(2024, 2, 29, 12, 30, 45, 123456, tzinfo=datetime.timezone.utc)
    guid = uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff")
    entity = {
        "PartitionKey": "typed",
        "RowKey": "all",
        "Text": "héllo",
        "Int32": 2147483647,
        "Int64": EntityProperty(2**53 + 1, EdmType.INT64),
        "Double": 1.0,
        "Fraction": 0.25,
        "Bool": True,
        "When": when,
        "Guid": guid,
        "Bytes": b"\x00\x01\xfe\xff",
    }
    table.create_entity(entity)
    got = table.get_entity("typed", "all")
    assert got["Text"] == "héllo", got
    assert got["Int32"] == 2147483647 and isinstance(got["Int32"], int), got
    assert got["Int64"].value == 2**53 + 1 and got["Int64"].edm_type == EdmType.INT64, got
    assert got["Double"] == 1.0 and isinstance(got["Double"], float), got
    assert got["Fraction"] == 0.25, got
    assert got["Bool"] is True, got
    assert got["When"] == when, (got["When"], when)
    assert got["Guid"] == guid, got
    assert got["Bytes"] == b"\x00\x01\xfe\xff", got
    print("etag", got.metadata["etag"])
    print("timestamp", got.metadata["timestamp"].isoformat())

    # Written over gRPC by the Rust side, read here with its types.
    grpc = service.get_table_client("FromGrpc").get_entity("typed", "from-grpc")
    assert grpc["Int64"].value == -(2**60) and grpc["Int64"].edm_type == EdmType.INT64, grpc
    assert grpc["Double"] == 2.0 and isinstance(grpc["Double"], float), grpc
    assert grpc["When"] == datetime.datetime(
        1999, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.timezone.utc
    ), grpc
    assert grpc["Guid"] == uuid.UUID("00112233-4455-6677-8899-aabbccddeeff"), grpc
    assert grpc["Bytes"] == b"grpc", grpc


def shared_access_signatures(service, key):
    """Service and account SAS made by the SDK: what they grant works, the rest is refused."""
    table = service.create_table("PySas")
    for pk in "abc":
        for rk in range(1, 8):
            table.create_entity({"PartitionKey": pk, "RowKey": str(rk), "N": rk})
    credential = AzureNamedKeyCredential("devstoreaccount1", key)
    now = datetime.datetime.now(datetime.timezone.utc)

    def table_client(sas, name="PySas"):
        return TableClient(ENDPOINT, name, credential=AzureSasCredential(sas))

    # Read rows 2..5 of partition b only.
    rows = generate_table_sas(
        credential, "PySas", permission="r", expiry=now + HOUR,
        start_pk="b", start_rk="2", end_pk="b", end_rk="5",
    )
    limited = table_client(rows)
    assert limited.get_entity("b", "3")["N"] == 3
    refused("AuthorizationFailure", lambda: limited.get_entity("b", "6"))
    refused("AuthorizationFailure", lambda: limited.get_entity("a", "3"))
    found = sorted(e["RowKey"] for e in limited.query_entities("PartitionKey eq 'b'"))
    assert found == ["2", "3", "4", "5"], found
    refused(
        "AuthorizationPermissionMismatch",
        lambda: limited.create_entity({"PartitionKey": "b", "RowKey": "4x"}),
    )
    refused("AuthorizationPermissionMismatch", lambda: limited.delete_entity("b", "3"))

    # Add and update in partitions a..b; upsert needs both.
    writes = generate_table_sas(
        credential, "PySas", permission="au", expiry=now + HOUR, start_pk="a", end_pk="b"
    )
    writer = table_client(writes)
    writer.upsert_entity({"PartitionKey": "a", "RowKey": "9", "N": 9})
    refused("AuthorizationFailure", lambda: writer.create_entity({"PartitionKey": "c", "RowKey": "9"}))
    refused("AuthorizationPermissionMismatch", lambda: writer.get_entity("a", "9"))
    assert table.get_entity("a", "9")["N"] == 9

    # Another table, an expired SAS, a start in the future and a tampered signature.
    service.create_table("PySasOther")
    refused("AuthorizationResourceTypeMismatch", lambda: table_client(rows, "PySasOther").get_entity("b", "3"))
    expired = generate_table_sas(credential, "PySas", permission="r", expiry=now - HOUR)
    refused("AuthenticationFailed", lambda: table_client(expired).get_entity("b", "3"))
    later = generate_table_sas(credential, "PySas", permission="r", start=now + HOUR, expiry=now + 2 * HOUR)
    refused("AuthenticationFailed", lambda: table_client(later).get_entity("b", "3"))
    tampered = rows.replace("sp=r", "sp=rd")
    refused("AuthenticationFailed", lambda: table_client(tampered).get_entity("b", "3"))
    stored_access_policies(table, credential, table_client, now)

    # An account SAS: list tables and read entities, nothing else.
    readers = generate_account_sas(
        credential,
        resource_types=ResourceTypes(container=True, object=True),
        permission=AccountSasPermissions(read=True, list=True),
        expiry=now + HOUR,
    )
    account = TableServiceClient(ENDPOINT, credential=AzureSasCredential(readers))
    assert "PySas" in [t.name for t in account.list_tables()]
    assert len(list(account.get_table_client("PySas").list_entities())) == 22
    refused("AuthorizationPermissionMismatch", lambda: account.create_table("PySasNew"))
    refused(
        "AuthorizationPermissionMismatch",
        lambda: account.get_table_client("PySas").create_entity({"PartitionKey": "d", "RowKey": "1"}),
    )
    owners = generate_account_sas(
        credential,
        resource_types=ResourceTypes(container=True, object=True),
        permission=AccountSasPermissions(read=True, write=True, delete=True, list=True, create=True),
        expiry=now + HOUR,
    )
    owner = TableServiceClient(ENDPOINT, credential=AzureSasCredential(owners))
    owner.create_table("PySasNew").create_entity({"PartitionKey": "d", "RowKey": "1"})
    owner.delete_table("PySasNew")
    for name in ("PySas", "PySasOther"):
        service.delete_table(name)


def stored_access_policies(table, credential, table_client, now):
    """A SAS naming a stored access policy takes its fields, and is refused once it changes."""
    table.set_table_access_policy({
        "readers": TableAccessPolicy(permission="r", start=now - HOUR, expiry=now + HOUR),
        "open": TableAccessPolicy(permission="r"),
    })
    kept = table.get_table_access_policy()
    assert sorted(kept) == ["open", "readers"] and kept["readers"].permission == "r", kept
    named = generate_table_sas(credential, "PySas", policy_id="readers")
    reader = table_client(named)
    assert reader.get_entity("b", "3")["N"] == 3
    refused("AuthorizationPermissionMismatch", lambda: reader.delete_entity("b", "3"))
    # A field given by both the signature and the policy is refused; one the policy leaves out
    # comes from the signature.
    both = generate_table_sas(credential, "PySas", policy_id="readers", permission="r")
    refused("AuthenticationFailed", lambda: table_client(both).get_entity("b", "3"))
    with_expiry = generate_table_sas(credential, "PySas", policy_id="open", expiry=now + HOUR)
    assert table_client(with_expiry).get_entity("b", "3")["N"] == 3
    # Changing the policy changes what its signatures grant; removing it revokes them.
    table.set_table_access_policy({
        "readers": TableAccessPolicy(permission="r", start=now - 2 * HOUR, expiry=now - HOUR),
    })
    refused("AuthenticationFailed", lambda: reader.get_entity("b", "3"))
    table.set_table_access_policy({})
    refused("AuthenticationFailed", lambda: reader.get_entity("b", "3"))
    missing = generate_table_sas(credential, "PySas", policy_id="nobody")
    refused("AuthenticationFailed", lambda: table_client(missing).get_entity("b", "3"))


def settings(service):
    """Service properties (CORS rules kept, logging and metrics answered back), statistics, and
    a table's ACL with its limits."""
    properties = service.get_service_properties()
    assert properties["analytics_logging"].read is False and properties["cors"] == [], properties
    rule = TableCorsRule(["http://app.example"], ["GET", "PUT"], allowed_headers=["x-ms-*"],
                    exposed_headers=["x-ms-*"], max_age_in_seconds=600)
    service.set_service_properties(cors=[rule], analytics_logging=TableAnalyticsLogging(read=True))
    properties = service.get_service_properties()
    cors = properties["cors"]
    assert len(cors) == 1 and cors[0].allowed_origins == ["http://app.example"], cors
    assert cors[0].allowed_methods == ["GET", "PUT"] and cors[0].max_age_in_seconds == 600, cors
    assert properties["analytics_logging"].read is True, properties
    # A section left out stays as it was.
    service.set_service_properties(cors=[])
    properties = service.get_service_properties()
    assert properties["cors"] == [] and properties["analytics_logging"].read is True, properties
    too_many = [rule] * 6
    expect(HttpResponseError, lambda: service.set_service_properties(cors=too_many))
    stats = service.get_service_stats()
    assert stats["geo_replication"]["status"] == "live", stats

    table = service.create_table("PyAcl")
    assert table.get_table_access_policy() == {}
    table.set_table_access_policy({})
    policy = TableAccessPolicy(permission="r", expiry=datetime.datetime.now() + HOUR)
    table.set_table_access_policy({"readers": policy})
    assert list(table.get_table_access_policy()) == ["readers"]
    six = {f"p{n}": policy for n in range(6)}
    expect(HttpResponseError, lambda: table.set_table_access_policy(six))
    assert list(table.get_table_access_policy()) == ["readers"], "a refusal changes nothing"
    expect(ResourceNotFoundError, lambda: service.get_table_client("NoAcl").get_table_access_policy())
    service.delete_table("PyAcl")


def keyed():
    """A server with a key file: its key works, in connection strings and SAS; the dev key not."""
    key = os.environ["TRESTLE_ACCOUNT_KEY"]
    service = connect(key)
    table = service.create_table("PyKeyed")
    table.create_entity({"PartitionKey": "k", "RowKey": "1", "N": 1})
    assert table.get_entity("k", "1")["N"] == 1
    refused("AuthenticationFailed", lambda: list(connect(DEV_KEY).list_tables()))
    shared_access_signatures(service, key)
    credential = AzureNamedKeyCredential("devstoreaccount1", DEV_KEY)
    forged = generate_table_sas(
        credential, "PyKeyed", permission="r",
        expiry=datetime.datetime.now(datetime.timezone.utc) + HOUR,
    )
    forged_client = TableClient(ENDPOINT, "PyKeyed", credential=AzureSasCredential(forged))
    refused("AuthenticationFailed", lambda: forged_client.get_entity("k", "1"))

    # Trestle's own scoped token (read, table PyKeyed) as a Bearer credential, over plain HTTP.
    def get(path, token):
        headers = {"Accept": "application/json;odata=nometadata", "x-ms-version": "2019-02-02"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return requests.get(f"{ENDPOINT}/{path}", headers=headers, timeout=10)

    token = os.environ["TRESTLE_READ_TOKEN"]
    got = get("PyKeyed(PartitionKey='k',RowKey='1')", token)
    assert got.status_code == 200 and got.json()["N"] == 1, got.text
    other = get("Tables", token)
    assert other.status_code == 403, other.text
    anonymous = get("PyKeyed(PartitionKey='k',RowKey='1')", None)
    assert anonymous.headers["x-ms-error-code"] == "AuthenticationFailed", anonymous.text
    service.delete_table("PyKeyed")


# The documents tests/azure_sdk.rs writes over gRPC, as JSON: how the SDKs see them.
ADDRESS = {
    "Big": "1152921504606846977",
    "City": "Seattle",
    "Gone": None,
    "Id": "00112233-4455-6677-8899-aabbccddeeff",
    "Ok": True,
    "Ratio": 1.0,
    "Raw": "AQI=",
    "Since": "2024-02-29T12:30:45.1234567Z",
    "Zip": 98101,
}
TAGS = ["x", 2, None, []]


class MintedToken:
    """A TokenCredential (azure.core.credentials) handing out a token the test minted, as an
    Entra ID credential hands out the token it fetched; it records the scopes it was asked for."""

    def __init__(self, variable):
        self.token = os.environ[variable]
        self.scopes = set()

    def get_token(self, *scopes, **kwargs):
        self.scopes.update(scopes)
        return AccessToken(self.token, int(time.time()) + 3600)


def oauth():
    """OAuth bearer tokens through the SDK's TokenCredential path (over https, which the SDK
    requires for bearer tokens): a Contributor writes, a Reader reads but cannot write, an expired
    token is 401 InvalidAuthenticationInfo, and the development key signs nothing here."""
    # On `localhost` at a port other than 10002 the SDK takes the endpoint for Cosmos DB's and asks
    # for Cosmos' scope unless told the audience.
    storage = {"audience": "https://storage.azure.com"}
    contributor = MintedToken("TRESTLE_OAUTH_CONTRIBUTOR")
    service = TableServiceClient(endpoint=ENDPOINT, credential=contributor, **storage)
    table = service.create_table("PyOauth")
    table.create_entity({"PartitionKey": "p", "RowKey": "r", "Note": "by token"})
    assert [t.name for t in service.list_tables()] == ["PyOauth"]
    assert contributor.scopes == {"https://storage.azure.com/.default"}, contributor.scopes
    reader = TableClient(endpoint=ENDPOINT, table_name="PyOauth",
                         credential=MintedToken("TRESTLE_OAUTH_READER"), **storage)
    assert reader.get_entity("p", "r")["Note"] == "by token"
    refused("AuthorizationPermissionMismatch",
            lambda: reader.create_entity({"PartitionKey": "p", "RowKey": "s"}))
    expired = TableClient(endpoint=ENDPOINT, table_name="PyOauth",
                          credential=MintedToken("TRESTLE_OAUTH_EXPIRED"), **storage)
    try:
        expired.get_entity("p", "r")
        raise AssertionError("an expired token was taken")
    except HttpResponseError as error:
        assert error.status_code == 401, (error.status_code, str(error))
        given = error.response.headers.get("x-ms-error-code")
        assert given == "InvalidAuthenticationInfo", (given, str(error))
    refused("AuthenticationFailed", lambda: list(connect().list_tables()))
    service.delete_table("PyOauth")


def documents(service):
    """A document property reads as an Edm.String holding the document's JSON text."""
    table = service.get_table_client("Docs")
    got = table.get_entity("people", "ada")
    listed = list(table.query_entities("PartitionKey eq 'people'"))
    assert len(listed) == 1, listed
    for entity in (got, listed[0]):
        assert entity["Name"] == "Ada", entity
        assert isinstance(entity["Address"], str), entity
        assert json.loads(entity["Address"]) == ADDRESS, entity["Address"]
        assert json.loads(entity["Tags"]) == TAGS, entity["Tags"]


def main():
    if sys.argv[1:] == ["documents"]:
        documents(connect())
        print("python sdk, documents: ok")
        return
    if sys.argv[1:] == ["tls"]:
        over_tls(connect())
        print("python sdk, tls: ok")
        return
    if sys.argv[1:] == ["oauth"]:
        oauth()
        print("python sdk, oauth: ok")
        return
    if sys.argv[1:] == ["keyed"]:
        keyed()
        print("python sdk, keyed: ok")
        return
    service = connect()
    tables(service)
    entities(service)
    batches(service)
    types(service)
    shared_access_signatures(service, DEV_KEY)
    settings(service)
    print("python sdk: ok")


if __name__ == "__main__":
    main()
