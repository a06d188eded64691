"""The official Python SDK (azure-data-tables) against Trestle's REST endpoint.

Run by tests/azure_sdk.rs with TRESTLE_REST_ENDPOINT set to the endpoint's account URL. Leaves
table CrossProtocol with entity (typed, "all") for the Rust side to read over gRPC.
"""

import datetime
import os
import sys
import uuid

from azure.core import MatchConditions
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.data.tables import (
    EdmType,
    EntityProperty,
    TableServiceClient,
    TableTransactionError,
    UpdateMode,
)

DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def connect():
    endpoint = os.environ["TRESTLE_REST_ENDPOINT"]
    return TableServiceClient.from_connection_string(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={DEV_KEY};TableEndpoint={endpoint};"
    )


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
    results = table.submit_transaction(operations)
    assert len(results) == 100 and results[0]["etag"], results[:2]
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


def main():
    service = connect()
    tables(service)
    entities(service)
    batches(service)
    types(service)
    print("python sdk: ok")


if __name__ == "__main__":
    main()
