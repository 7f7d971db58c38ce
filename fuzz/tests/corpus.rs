//! Replays every file under `fuzz/corpus/<target>/` through its target: the seeds, the hostile inputs
//! of the limits in `docs/FORMATS.md`, every input that once made a target fail, and what fuzzing found
//! that reached new code. A target returns for every input; a panic fails this test and names the file.

use std::path::Path;

#[test]
fn every_corpus_file_passes_through_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut replayed = 0;
    for &(name, target) in shardplan_fuzz::TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus directory {}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "target {name} has no corpus files in {}", dir.display());
        for path in files {
            let data = std::fs::read(&path).unwrap();
            let run = std::panic::catch_unwind(|| target(&data));
            assert!(run.is_ok(), "target {name} panicked on {}", path.display());
            replayed += 1;
        }
    }
    // Every target has a corpus directory; none is left without inputs.
    let dirs = std::fs::read_dir(&root).unwrap().count();
    assert_eq!(dirs, shardplan_fuzz::TARGETS.len(), "one corpus directory per target in {}", root.display());
    assert!(replayed >= shardplan_fuzz::TARGETS.len());
}
