//! The README's Redis example is the crate's first doc example, line for line.
//!
//! tickwheel's doc-tests run every README block, but they cannot link this crate, so the
//! README marks its Redis block `ignore`. The same code is compiled here as the crate's first
//! doc example (`src/lib.rs`, a `no_run` doc-test); this test fails when the two drift apart.

use std::path::Path;

/// The lines of the first fenced block that starts after `after` in `text`, with `prefix`
/// stripped from each line and doc-test hidden lines (`# ...`) left out.
fn block(text: &str, after: &str, prefix: &str) -> Vec<String> {
    let start = text
        .find(after)
        .unwrap_or_else(|| panic!("no `{after}` in the file"));
    let mut lines = text[start..].lines().map(|l| {
        l.strip_prefix(prefix)
            .unwrap_or(l)
            .trim_start_matches(' ')
            .to_string()
    });
    lines
        .by_ref()
        .find(|l| l.starts_with("```"))
        .expect("an opening fence");
    lines
        .take_while(|l| !l.starts_with("```"))
        .filter(|l| !(l == "#" || l.starts_with("# ")))
        .map(|l| l.trim_end().to_string())
        .collect()
}

/// Reads a file relative to this crate's directory.
fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn readme_redis_block_is_the_crate_doc_example() {
    let readme = block(
        &read("../../README.md"),
        "## Durable delayed tasks (Redis)",
        "",
    );
    let lib = block(
        &read("src/lib.rs"),
        "//! a handler at its run-at instant.",
        "//!",
    );
    assert!(readme.len() > 5, "README block not found: {readme:?}");
    assert_eq!(
        readme, lib,
        "README.md's Redis block and src/lib.rs's first doc example differ"
    );
}
