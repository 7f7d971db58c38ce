//! The README's library example is the prelude's doc test (which `cargo test` compiles and runs): the
//! two must not drift apart.

#[test]
fn the_readme_library_example_is_the_prelude_doc_test() {
    let readme = include_str!("../../../README.md");
    let start = readme.find("```rust\n").expect("README has a rust example") + "```rust\n".len();
    let end = start + readme[start..].find("```").expect("the example ends");
    let example: Vec<&str> = readme[start..end].lines().collect();
    let lib = include_str!("../../src/lib.rs");
    let doc: Vec<&str> = lib
        .lines()
        .map(str::trim_start)
        .filter_map(|l| l.strip_prefix("///"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let open = doc.iter().position(|l| *l == "```").expect("the prelude has a doc test");
    let close = open + 1 + doc[open + 1..].iter().position(|l| *l == "```").expect("the doc test ends");
    let tested: Vec<&str> = doc[open + 1..close].iter().copied().filter(|l| !l.starts_with("# ")).collect();
    assert_eq!(example, tested, "README.md's library example differs from planner_core::prelude's doc test");
}
