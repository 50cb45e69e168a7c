//! Unit tests of [`StoreAt`](super::StoreAt) parsing.

use super::*;

#[test]
fn a_store_value_without_a_scheme_is_a_file_and_with_one_an_etcd_url() {
    assert_eq!(
        "runs.redb".parse::<StoreAt>().expect("a path"),
        StoreAt::File(PathBuf::from("runs.redb"))
    );
    // A path with a colon is still a path.
    assert!(matches!("c:runs".parse(), Ok(StoreAt::File(_))));
    let etcd = "etcd://127.0.0.1:2379/q".parse::<StoreAt>();
    if cfg!(feature = "etcd") {
        let at = etcd.expect("an etcd URL");
        assert!(matches!(at, StoreAt::Etcd(_)));
        assert_eq!(at.to_string(), "etcd://127.0.0.1:2379/q");
    } else {
        assert!(matches!(etcd, Err(StoreAtError::NoEtcd { .. })));
    }
    // A bad URL is refused whatever the build, naming what is wrong.
    for (bad, names) in [
        ("etcd://127.0.0.1/q", "no :PORT"),
        ("http://127.0.0.1:2379", "not an etcd URL"),
    ] {
        let e = bad.parse::<StoreAt>().expect_err(bad);
        assert!(matches!(e, StoreAtError::Url { .. }), "{bad}: {e:?}");
        assert!(e.to_string().contains(names), "{bad}: {e}");
    }
}
