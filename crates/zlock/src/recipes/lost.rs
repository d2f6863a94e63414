//! When a hold may be lost: the session behind it is in doubt (suspended past a safe
//! window) or gone.

use std::time::Duration;

use crate::{Client, ConnectionState};

/// Resolves when the session behind `client` may no longer hold what it created:
/// the connection has stayed [`ConnectionState::Suspended`] for `window`, or the
/// state is [`ConnectionState::Lost`] or [`ConnectionState::Closed`]. Returns that state.
pub(crate) async fn session_in_doubt(client: Client, window: Duration) -> ConnectionState {
    let mut state = client.state_stream();
    loop {
        let now = *state.borrow_and_update();
        match now {
            ConnectionState::Lost | ConnectionState::Closed => return now,
            ConnectionState::Suspended => {
                tokio::select! {
                    () = tokio::time::sleep(window) => return now,
                    r = state.changed() => if r.is_err() { return ConnectionState::Closed },
                }
            }
            ConnectionState::Connected | ConnectionState::Reconnected => {
                if state.changed().await.is_err() {
                    return ConnectionState::Closed;
                }
            }
        }
    }
}

/// The default safe window: a third of the negotiated session timeout. A suspension
/// is usually noticed some time after the server last heard from us, so past this the
/// server may be close to expiring the session.
pub(crate) fn default_window(client: &Client) -> Duration {
    let ms = u64::try_from(client.session_timeout_ms()).unwrap_or(0) / 3;
    Duration::from_millis(ms)
}
