//! zlock-core
