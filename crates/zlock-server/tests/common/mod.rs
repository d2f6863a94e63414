//! Helpers shared by the robustness test binaries (each binary uses a different part).
#![allow(dead_code)]

pub mod rawclient;
