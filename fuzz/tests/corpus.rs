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

/// A short fuzz run inside `cargo test` (no instrumented build: CI cannot afford the half hour it takes
/// on two cores): every corpus file of every target mutated `ROUNDS` times — bytes flipped, inserted,
/// deleted, digits swapped for huge or negative numbers, spans repeated — by a seeded generator, so a
/// failure replays. Blind, not coverage-guided: `scripts/fuzz.sh` is the real fuzzer; this keeps the
/// targets honest between its runs.
#[test]
fn mutated_corpus_files_pass_through_their_targets() {
    const ROUNDS: usize = 64;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut state = 0x5eed_f022_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut runs = 0;
    for &(name, target) in shardplan_fuzz::TARGETS {
        let mut files: Vec<_> = std::fs::read_dir(root.join(name)).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for path in files {
            let seed = std::fs::read(&path).unwrap();
            for round in 0..ROUNDS {
                let mut data = seed.clone();
                for _ in 0..=(next() % 4) {
                    let at = if data.is_empty() { 0 } else { (next() as usize) % data.len() };
                    match next() % 6 {
                        0 if !data.is_empty() => data[at] = next() as u8,
                        1 => data.insert(at, b"0123456789-.e,:[]{}\"\n"[(next() % 21) as usize]),
                        2 if !data.is_empty() => {
                            data.remove(at);
                        }
                        3 => data.splice(at..at, b"18446744073709551616".iter().copied()).for_each(drop),
                        4 => data.splice(at..at, b"-1e308".iter().copied()).for_each(drop),
                        _ => {
                            let end = (at + 1 + (next() as usize) % 64).min(data.len());
                            let span = data[at.min(end)..end].to_vec();
                            data.splice(at..at, span).for_each(drop);
                        }
                    }
                }
                let run = std::panic::catch_unwind(|| target(&data));
                assert!(run.is_ok(), "target {name} panicked on mutation {round} of {}", path.display());
                runs += 1;
            }
        }
    }
    assert!(runs >= ROUNDS * shardplan_fuzz::TARGETS.len());
}
