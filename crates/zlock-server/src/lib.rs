//! zlock-server
