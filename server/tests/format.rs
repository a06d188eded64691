//! The data directory's format version: a directory written by the build before the format marker
//! existed opens, keeps its data and is marked; one marked by a newer format is refused with a
//! clear message and left untouched.

mod support;

use std::path::Path;

use support::ServerProcess;
use trestle_proto::pb;
use trestle_server::storage::{CURRENT_FORMAT, FORMAT_KEY};

/// Written by `trestle-server` at commit a1a0d6b (before the marker): table `Legacy` with one entity
/// of every EDM type at p1/r1 and a two-row transaction in p2, table `Other`, and table `Gone`
/// created and deleted.
const UNVERSIONED_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/unversioned-data-dir"
);

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn stored_format(data_dir: &Path) -> Option<u32> {
    let db = open_sled(data_dir);
    db.get(FORMAT_KEY)
        .unwrap()
        .map(|bytes| u32::from_be_bytes(bytes.as_ref().try_into().unwrap()))
}

/// The sled database in `data_dir`, once the one opened just before has let go of its file lock
/// (sled's flusher thread holds it for a moment after the database is dropped).
fn open_sled(data_dir: &Path) -> sled::Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sled::open(data_dir) {
            Ok(db) => return db,
            Err(sled::Error::Io(error))
                if error.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(error) => panic!("opening {}: {error}", data_dir.display()),
        }
    }
}

fn kind(entity: &pb::Entity, name: &str) -> pb::value::Kind {
    entity.properties[name].kind.clone().expect("a value")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_from_the_build_before_the_marker_opens_and_is_marked() {
    let data_dir = tempfile::tempdir().unwrap();
    copy_dir(Path::new(UNVERSIONED_FIXTURE), data_dir.path());
    assert_eq!(
        stored_format(data_dir.path()),
        None,
        "the fixture is unmarked"
    );

    let server = ServerProcess::start(data_dir.path());
    let mut client = server.client().await;
    let get = |pk: &str, rk: &str| pb::GetEntityRequest {
        table: "legacy".into(),
        partition_key: pk.into(),
        row_key: rk.into(),
        select: vec![],
    };
    let ada = client
        .get_entity(get("p1", "r1"))
        .await
        .unwrap()
        .into_inner();
    use pb::value::Kind;
    assert_eq!(kind(&ada, "Name"), Kind::StringValue("Ada".into()));
    assert_eq!(kind(&ada, "Age"), Kind::Int32Value(36));
    assert_eq!(kind(&ada, "Big"), Kind::Int64Value(9_007_199_254_740_993));
    assert_eq!(kind(&ada, "Score"), Kind::DoubleValue(2.5));
    assert_eq!(kind(&ada, "Active"), Kind::BoolValue(true));
    assert_eq!(
        kind(&ada, "Born"),
        Kind::DatetimeValue(prost_types::Timestamp {
            seconds: -4_861_728_000,
            nanos: 0
        })
    );
    assert_eq!(
        kind(&ada, "Id"),
        Kind::GuidValue("a455c695-df98-5678-aaaa-81d3367e5a34".into())
    );
    assert_eq!(kind(&ada, "Blob"), Kind::BinaryValue(vec![0, 1, 2, 255]));
    assert!(ada.etag.starts_with("W/\"datetime'2026-11-21T22"));
    for (rk, n) in [("a", 1), ("b", 2)] {
        let row = client.get_entity(get("p2", rk)).await.unwrap().into_inner();
        assert_eq!(kind(&row, "N"), Kind::Int32Value(n));
    }
    assert_eq!(support::table_names(&mut client).await, ["Legacy", "Other"]);
    // The old directory takes writes in the current build.
    client
        .insert_entity(pb::InsertEntityRequest {
            table: "Legacy".into(),
            entity: Some(support::entity("p3", "new", &[("V", 3)])),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(server.terminate().success());
    assert_eq!(stored_format(data_dir.path()), Some(CURRENT_FORMAT));

    let reopened = ServerProcess::start(data_dir.path());
    let all = support::all_entities(&mut reopened.client().await, "Legacy").await;
    assert_eq!(all.len(), 4);
    reopened.kill_9();
}

#[test]
fn a_directory_in_a_newer_format_is_refused_and_left_untouched() {
    let data_dir = tempfile::tempdir().unwrap();
    {
        let db = open_sled(data_dir.path());
        db.insert(FORMAT_KEY, &(CURRENT_FORMAT + 1).to_be_bytes())
            .unwrap();
        db.flush().unwrap();
    }
    let (status, printed) = ServerProcess::run_to_exit(data_dir.path(), &[]);
    assert!(!status.success(), "started on a newer format: {printed}");
    let expected = format!(
        "format version {}, newer than this build's {CURRENT_FORMAT}",
        CURRENT_FORMAT + 1
    );
    assert!(printed.contains(&expected), "unclear refusal: {printed}");
    assert_eq!(stored_format(data_dir.path()), Some(CURRENT_FORMAT + 1));
    let db = open_sled(data_dir.path());
    assert_eq!(db.tree_names().len(), 1, "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_in_an_older_format_opens_and_is_marked_current() {
    let data_dir = tempfile::tempdir().unwrap();
    {
        let db = open_sled(data_dir.path());
        db.insert(FORMAT_KEY, &1u32.to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    let server = ServerProcess::start(data_dir.path());
    assert!(support::table_names(&mut server.client().await)
        .await
        .is_empty());
    assert!(server.terminate().success());
    assert_eq!(stored_format(data_dir.path()), Some(CURRENT_FORMAT));
}
