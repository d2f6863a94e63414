//! Helpers shared by the robustness test binaries (each binary uses a different part).
#![allow(dead_code)]

pub mod rawclient;

/// Copies a directory tree: what a `kill -9` leaves on disk, taken while the writer is
/// still running.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}
