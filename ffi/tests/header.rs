//! The committed include/weir.h must equal a fresh cbindgen generation.

#[test]
fn committed_header_is_current() {
    let fresh = include_str!(concat!(env!("OUT_DIR"), "/weir.h"));
    let committed =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../include/weir.h"))
            .expect("include/weir.h is missing: run `make header`");
    assert!(
        fresh == committed,
        "include/weir.h is stale: run `make header` and commit it"
    );
}
