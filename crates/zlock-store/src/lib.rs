//! zlock-store (to be written)
