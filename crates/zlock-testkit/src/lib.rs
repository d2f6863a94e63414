//! zlock-testkit
