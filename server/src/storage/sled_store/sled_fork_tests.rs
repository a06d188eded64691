//! Tests of the changes Trestle's vendored sled makes (`server/vendor/sled/TRESTLE.md`): leaves of
//! up to 48 entries within 16 KiB, leaves written in key order split near their end, leaves
//! paged in as one shared buffer, pages written whole every twentieth update, and keys added to
//! a cached leaf in one copy of it.

/// The leaves of `tree`, counted in sled's debug dump of it.
fn leaves(tree: &sled::Tree) -> usize {
    format!("{tree:?}").matches("data: Leaf(").count()
}

fn tree_of(entries: u32, value_len: usize) -> sled::Tree {
    let db = sled::Config::new().temporary(true).open().unwrap();
    let tree = db.open_tree("t").unwrap();
    for i in 0..entries {
        tree.insert(format!("key{i:06}"), vec![7u8; value_len])
            .unwrap();
    }
    tree
}

#[test]
fn sled_leaves_hold_up_to_48_small_entries_and_fill_up_when_written_in_key_order() {
    // Written in key order, a leaf that passes 48 entries keeps 45 and leaves 4 to the next,
    // which the writes go on filling: leaves of 45. Upstream's halves of 16 would give 111
    // leaves.
    let leaves = leaves(&tree_of(1_000, 150));
    assert!((22..=24).contains(&leaves), "{leaves} leaves");
}

#[test]
fn sled_leaves_written_out_of_key_order_split_in_halves() {
    // Written in descending key order, each write lands before a leaf's last key: a leaf
    // passing 48 entries splits in two halves, of which the right one is never written again:
    // leaves of 25.
    let db = sled::Config::new().temporary(true).open().unwrap();
    let tree = db.open_tree("t").unwrap();
    for i in (0..1_000).rev() {
        tree.insert(format!("key{i:06}"), vec![7u8; 150]).unwrap();
    }
    let leaves = leaves(&tree);
    assert!((39..=41).contains(&leaves), "{leaves} leaves");
}

#[test]
fn sled_leaves_of_large_entries_are_no_larger_than_upstream() {
    // 17 entries of 1 KiB exceed the 16 KiB bound, so leaves split as upstream's did: halves
    // of 9. Without the bound, 200 entries would take 8 leaves of up to 48.
    let leaves = leaves(&tree_of(200, 1024));
    assert!((22..=24).contains(&leaves), "{leaves} leaves");
}

/// Opens the tree `t` of the database in `dir`, with sled's default cache (1 GiB); a tree
/// opened again after its database was dropped reads every leaf back from the log.
fn open_tree(dir: &std::path::Path) -> sled::Tree {
    open_tree_cached(dir, 1 << 30)
}

/// [`open_tree`] with a cache of `cache_bytes`. sled's threads can hold a dropped database's
/// file lock for a moment, so this waits for the lock (sled's own tests block on it too).
fn open_tree_cached(dir: &std::path::Path, cache_bytes: u64) -> sled::Tree {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes)
            .open()
        {
            Ok(db) => return db.open_tree("t").unwrap(),
            Err(sled::Error::Io(error))
                if error.to_string().contains("could not acquire lock")
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(error) => panic!("opening {}: {error}", dir.display()),
        }
    }
}

/// A value whose length and bytes depend on `i` and `round`, 0 to 299 bytes long: some
/// inline in an `IVec` (up to 22 bytes), most not.
fn value_of(i: u32, round: u8) -> Vec<u8> {
    vec![round.wrapping_add(i as u8); (i as usize * 7) % 300]
}

#[test]
fn sled_pages_a_leaf_in_as_one_buffer() {
    // A leaf read from the log keeps its values in the buffer read: a value of 101 bytes
    // starts 102 bytes (its length's one-byte varint) after the previous one. Values copied
    // one by one into allocations of their own are never that close.
    let dir = tempfile::tempdir().unwrap();
    let tree = open_tree(dir.path());
    for i in 0..40u32 {
        tree.insert(format!("key{i:06}"), vec![i as u8; 101])
            .unwrap();
    }
    tree.flush().unwrap();
    drop(tree);

    let tree = open_tree(dir.path());
    let values: Vec<sled::IVec> = (0..40u32)
        .map(|i| tree.get(format!("key{i:06}")).unwrap().unwrap())
        .collect();
    for (i, value) in values.iter().enumerate() {
        assert_eq!(value.as_ref(), &[i as u8; 101][..]);
    }
    let adjacent = values
        .windows(2)
        .filter(|pair| (pair[1].as_ptr() as usize).wrapping_sub(pair[0].as_ptr() as usize) == 102)
        .count();
    assert!(adjacent >= 20, "{adjacent} of 39 pairs adjacent");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Writes applied to cached leaves (a key added at any place in a leaf, an overwrite, a
    /// removal, the splits they cause) leave the tree holding what a map given the same writes
    /// holds.
    #[test]
    fn sled_leaves_written_in_memory_hold_what_was_written(
        writes in proptest::collection::vec((0u16..400, proptest::option::of(0u8..=255)), 1..600),
    ) {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        let mut model = std::collections::BTreeMap::new();
        for (key, value) in writes {
            let key = format!("key{key:05}").into_bytes();
            match value {
                Some(value) => {
                    let value = value_of(u32::from(value), value);
                    tree.insert(&key, value.clone()).unwrap();
                    model.insert(key, value);
                }
                None => {
                    tree.remove(&key).unwrap();
                    model.remove(&key);
                }
            }
        }
        let stored: Vec<(Vec<u8>, Vec<u8>)> = tree
            .iter()
            .map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
            .collect();
        let expected: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
        proptest::prop_assert_eq!(stored, expected);
    }
}

#[test]
fn sled_pages_with_many_linked_updates_read_back_whole() {
    // A page is written whole every twentieth update: a leaf updated 11 to 40 times between
    // openings of its database (a base and up to nineteen links in the log, or the page written
    // back whole when it was read) reads back with every update applied.
    let dir = tempfile::tempdir().unwrap();
    let mut tree = open_tree(dir.path());
    for i in 0..10u32 {
        tree.insert(format!("key{i:06}"), value_of(i, 0)).unwrap();
    }
    for round in 1..=30u8 {
        tree.flush().unwrap();
        drop(tree);
        tree = open_tree(dir.path());
        for i in 0..10u32 {
            let expected = value_of(i, round - 1);
            let stored = tree.get(format!("key{i:06}")).unwrap();
            assert_eq!(
                stored.as_deref(),
                Some(&expected[..]),
                "key {i}, round {round}"
            );
        }
        let i = u32::from(round) % 10;
        for update in 0..round {
            tree.insert(format!("key{i:06}"), value_of(i, update))
                .unwrap();
        }
        for j in 0..10u32 {
            tree.insert(format!("key{j:06}"), value_of(j, round))
                .unwrap();
        }
    }
}

#[test]
fn sled_leaves_read_back_stay_right_through_updates_and_splits() {
    // Leaves paged in share their buffer between keys and values; overwriting, removing and
    // inserting entries in them, which splits them, and reading them back again must still
    // give every entry as written.
    let dir = tempfile::tempdir().unwrap();
    let tree = open_tree(dir.path());
    for i in (0..3_000u32).step_by(2) {
        tree.insert(format!("key{i:06}"), value_of(i, 0)).unwrap();
    }
    tree.flush().unwrap();
    drop(tree);

    let tree = open_tree(dir.path());
    for i in 0..3_000u32 {
        let key = format!("key{i:06}");
        match i % 4 {
            0 => drop(tree.insert(key, value_of(i, 1)).unwrap()),
            2 => drop(tree.remove(key).unwrap()),
            _ => drop(tree.insert(key, value_of(i, 2)).unwrap()),
        }
    }
    tree.flush().unwrap();
    drop(tree);

    let tree = open_tree(dir.path());
    for i in 0..3_000u32 {
        let expected = match i % 4 {
            0 => Some(value_of(i, 1)),
            2 => None,
            _ => Some(value_of(i, 2)),
        };
        let stored = tree.get(format!("key{i:06}")).unwrap();
        assert_eq!(stored.as_deref(), expected.as_deref(), "key {i}");
    }
    assert_eq!(tree.len(), 2_250);
}

#[test]
fn sled_leaves_stay_right_when_paged_in_and_out_under_concurrent_writes() {
    // A 64 KiB cache holds a few leaves, so nearly every access pages a leaf in (as one
    // shared buffer) while other threads overwrite, remove and insert entries in the same
    // leaves, splitting them and evicting them. Each thread owns every fourth key and keeps
    // what it wrote; at the end, and after reopening, the tree holds exactly that.
    const THREADS: u32 = 4;
    const KEYS: u32 = 4_000;
    let dir = tempfile::tempdir().unwrap();
    let tree = open_tree_cached(dir.path(), 64 * 1024);
    let expected: std::collections::BTreeMap<u32, Vec<u8>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let tree = &tree;
                scope.spawn(move || {
                    let mut written = std::collections::BTreeMap::new();
                    let mut state = 0x9E37_79B9_u32.wrapping_mul(thread + 1);
                    for round in 0..20_000u32 {
                        state ^= state << 13;
                        state ^= state >> 17;
                        state ^= state << 5;
                        let i = state % (KEYS / THREADS) * THREADS + thread;
                        let key = format!("key{i:06}");
                        match state / KEYS % 3 {
                            0 => {
                                let value = value_of(i, round as u8);
                                tree.insert(key, value.clone()).unwrap();
                                written.insert(i, value);
                            }
                            1 => {
                                tree.remove(key).unwrap();
                                written.remove(&i);
                            }
                            _ => {
                                let stored = tree.get(key).unwrap();
                                let expected = written.get(&i).map(Vec::as_slice);
                                assert!(stored.as_deref() == expected, "key {i} read wrong");
                            }
                        }
                    }
                    written
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|worker| worker.join().unwrap())
            .collect()
    });
    let check = |tree: &sled::Tree| {
        let stored: std::collections::BTreeMap<u32, Vec<u8>> = tree
            .iter()
            .map(|entry| {
                let (key, value) = entry.unwrap();
                let key = std::str::from_utf8(&key[3..]).unwrap().parse().unwrap();
                (key, value.to_vec())
            })
            .collect();
        let differing: Vec<u32> = (0..KEYS)
            .filter(|i| stored.get(i) != expected.get(i))
            .take(5)
            .collect();
        assert!(
            differing.is_empty(),
            "keys {differing:?}... differ from what was written ({} stored, {} written)",
            stored.len(),
            expected.len()
        );
    };
    check(&tree);
    tree.flush().unwrap();
    drop(tree);
    check(&open_tree_cached(dir.path(), 64 * 1024));
}
