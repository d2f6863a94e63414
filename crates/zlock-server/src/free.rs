//! Freeing large values away from the thread that lets them go.

/// Drops `value` on a short-lived thread of its own (`zlock-free`), for values whose
/// freeing takes long enough to hold up the thread that holds them: a whole state
/// (a million znodes take a noticeable fraction of a second), or the tens of thousands
/// of log entries a purge takes out. If no thread can be started, it is dropped here.
pub(crate) fn elsewhere<T: Send + 'static>(value: T) {
    let _ = std::thread::Builder::new()
        .name("zlock-free".into())
        .spawn(move || drop(value));
}
